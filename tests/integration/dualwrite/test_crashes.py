"""The dual-write recipe under crashes: the worker SIGKILLed at every step of a unit, the
database crashed before and after COMMIT, the session cut during COMMIT, the broker killed -9
while a transaction is prepared. After each, recovery makes the database rows and the
read_committed records agree exactly (nothing twice, nothing lost), and before it a
read_committed consumer never sees a record whose rows are not committed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections import Counter

import psycopg
import pytest

from lockgate.dualwrite import (
    AsyncDualWriter,
    CommitOutcomeUnknownError,
    Recovery,
    RecoveryNeededError,
    Step,
    StepHook,
)
from tests.integration.dualwrite.crash_worker import CRASH_POINTS, DURING_COMPLETE
from tests.integration.dualwrite.orders import (
    INSERT_ORDER,
    PARTITIONS,
    committed_events,
    create_orders_table,
    order_rows,
)
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.postgres import PostgresServer

FAST = {"linger_ms": 0, "max_block_ms": 10_000}
# Crash points after which the database has decided: recovery must commit.
DECIDED = {Step.AFTER_DB_COMMIT.value, DURING_COMPLETE, Step.AFTER_COMPLETE.value}
# What recovery may find at each point (a record sent but not yet in the log leaves no
# transaction; an EndTxn received but not answered leaves a completed one).
RECOVERY = {
    Step.BEFORE_PREPARE.value: {Recovery.ABORTED, Recovery.NOTHING},
    Step.AFTER_PREPARE.value: {Recovery.ABORTED},
    Step.BEFORE_DB_COMMIT.value: {Recovery.ABORTED},
    Step.AFTER_DB_COMMIT.value: {Recovery.COMMITTED},
    DURING_COMPLETE: {Recovery.COMMITTED, Recovery.NOTHING},
    Step.AFTER_COMPLETE.value: {Recovery.NOTHING},
}


@pytest.fixture
def worker(broker: BrokerProcess, postgres: PostgresServer) -> str:
    """A fresh transactional id, which also names the worker's topic and orders."""
    name = f"dw-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, PARTITIONS)
    create_orders_table(postgres.conninfo)
    writer = AsyncDualWriter(postgres.conninfo, broker.bootstrap, name)
    asyncio.run(writer.ensure_schema())
    return name


def run_worker(
    postgres: PostgresServer,
    broker: BrokerProcess,
    worker: str,
    first: int,
    count: int,
    crash_at: str,
) -> list[dict[str, object]]:
    command = [
        sys.executable,
        "-m",
        "tests.integration.dualwrite.crash_worker",
        "--database",
        postgres.conninfo,
        "--bootstrap",
        broker.bootstrap,
        "--transactional-id",
        worker,
        "--topic",
        worker,
        "--first",
        str(first),
        "--count",
        str(count),
        "--crash-at",
        crash_at,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == -9, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1] == {"event": "crash", "at": crash_at}
    return events


def writer_for(
    postgres: PostgresServer, broker: BrokerProcess, worker: str, on_step: StepHook | None = None
) -> AsyncDualWriter:
    return AsyncDualWriter(
        postgres.conninfo, broker.bootstrap, worker, producer_options=FAST, on_step=on_step
    )


async def write_orders(writer: AsyncDualWriter, orders: range) -> None:
    for order in orders:
        order_id = f"{writer.transactional_id}-{order}"
        async with writer.transaction() as unit:
            await unit.execute(INSERT_ORDER, (order_id, writer.transactional_id, order))
            await unit.send(writer.transactional_id, b"{}", order_id.encode())


async def assert_agreement(
    postgres: PostgresServer, broker: BrokerProcess, worker: str, orders: set[int]
) -> None:
    expected = Counter({f"{worker}-{order}": 1 for order in orders})
    assert order_rows(postgres.conninfo, worker) == expected
    assert await committed_events(broker.bootstrap, worker) == expected


async def assert_no_record_without_rows(
    postgres: PostgresServer, broker: BrokerProcess, worker: str
) -> None:
    visible = await committed_events(broker.bootstrap, worker)
    assert max(visible.values(), default=1) == 1
    assert set(visible) <= set(order_rows(postgres.conninfo, worker))


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
async def test_the_worker_is_killed_at_every_step(
    broker: BrokerProcess, postgres: PostgresServer, worker: str, crash_at: str
) -> None:
    events = await asyncio.to_thread(run_worker, postgres, broker, worker, 0, 2, crash_at)
    assert {"event": "committed", "order": 0} in events
    await assert_no_record_without_rows(postgres, broker, worker)

    successor = writer_for(postgres, broker, worker)
    assert await successor.recover() in RECOVERY[crash_at]
    assert await successor.recover() is Recovery.NOTHING  # nothing is left for a second time
    await write_orders(successor, range(2, 4))
    await successor.close()
    await assert_agreement(
        postgres, broker, worker, {0, 2, 3} | ({1} if crash_at in DECIDED else set())
    )


async def test_the_database_crashes_between_prepare_and_commit(
    broker: BrokerProcess, postgres: PostgresServer, worker: str
) -> None:
    def crash_database(step: Step) -> None:
        if step is Step.AFTER_PREPARE:
            postgres.restart(crash=True)

    writer = writer_for(postgres, broker, worker, crash_database)
    await writer.recover()
    with pytest.raises(psycopg.OperationalError):
        await write_orders(writer, range(0, 1))
    writer.on_step = None
    with pytest.raises(RecoveryNeededError):
        await write_orders(writer, range(1, 2))
    # the unit's prepared transaction was aborted on the spot: nothing is left to recover
    assert await writer.recover() is Recovery.NOTHING
    await write_orders(writer, range(1, 2))
    await writer.close()
    await assert_agreement(postgres, broker, worker, {1})


async def test_the_database_crashes_after_commit(
    broker: BrokerProcess, postgres: PostgresServer, worker: str
) -> None:
    def crash_database(step: Step) -> None:
        if step is Step.AFTER_DB_COMMIT:
            postgres.restart(crash=True)  # fsync on: the committed unit survives

    writer = writer_for(postgres, broker, worker, crash_database)
    await writer.recover()
    await write_orders(writer, range(0, 1))  # completed in Kafka after the crash
    writer.on_step = None
    with pytest.raises(psycopg.OperationalError):
        await write_orders(writer, range(1, 2))  # the session died with the server
    assert await writer.recover() is Recovery.NOTHING
    await write_orders(writer, range(1, 2))
    await writer.close()
    await assert_agreement(postgres, broker, worker, {0, 1})


async def test_the_session_is_cut_during_commit(
    broker: BrokerProcess, postgres: PostgresServer, worker: str
) -> None:
    """COMMIT's outcome is unknown: the Kafka transaction stays prepared, and recovery reads
    the state row to learn what the database did (here: nothing, the session was killed
    before COMMIT reached it)."""
    writer = writer_for(postgres, broker, worker)

    def terminate_session(step: Step) -> None:
        if step is Step.BEFORE_DB_COMMIT:
            backend = writer._ready()[0].info.backend_pid
            with psycopg.connect(postgres.conninfo, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (backend,))

    await writer.recover()
    await write_orders(writer, range(0, 1))
    writer.on_step = terminate_session
    with pytest.raises(CommitOutcomeUnknownError):
        await write_orders(writer, range(1, 2))
    await assert_no_record_without_rows(postgres, broker, worker)
    writer.on_step = None
    assert await writer.recover() is Recovery.ABORTED
    await write_orders(writer, range(2, 3))
    await writer.close()
    await assert_agreement(postgres, broker, worker, {0, 2})


@pytest.mark.parametrize("crash_at", [Step.AFTER_PREPARE.value, Step.AFTER_DB_COMMIT.value])
async def test_the_broker_is_killed_while_the_transaction_is_prepared(
    broker: BrokerProcess, postgres: PostgresServer, worker: str, crash_at: str
) -> None:
    await asyncio.to_thread(run_worker, postgres, broker, worker, 0, 2, crash_at)
    broker.restart(clean=False)  # kill -9: the prepared transaction is in the log only
    successor = writer_for(postgres, broker, worker)
    expected = Recovery.COMMITTED if crash_at in DECIDED else Recovery.ABORTED
    assert await successor.recover() is expected
    await write_orders(successor, range(2, 3))
    await successor.close()
    await assert_agreement(
        postgres, broker, worker, {0, 2} | ({1} if crash_at in DECIDED else set())
    )


async def test_a_live_worker_completes_after_the_broker_restarts(
    broker: BrokerProcess, postgres: PostgresServer, worker: str
) -> None:
    def kill_broker(step: Step) -> None:
        if step is Step.AFTER_DB_COMMIT:
            broker.restart(clean=False)

    writer = writer_for(postgres, broker, worker, kill_broker)
    await writer.recover()
    await write_orders(writer, range(0, 1))  # complete_transaction retries until it is back
    writer.on_step = None
    await write_orders(writer, range(1, 2))
    await writer.close()
    await assert_agreement(postgres, broker, worker, {0, 1})
