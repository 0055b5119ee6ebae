"""lockgate.dualwrite against a real PostgreSQL and a lockgate broker: units of work commit rows
and records together or neither, with the asyncio and the blocking writer, several workers at
once, recovery that completes or aborts, and a zombie worker that cannot break the agreement."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import psycopg
import pytest

from lockgate.client.errors import KafkaError
from lockgate.dualwrite import (
    AsyncDualWriter,
    CompletionPendingError,
    DualWriter,
    Recovery,
    RecoveryNeededError,
    Step,
    StepHook,
)
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


class Crash(BaseException):
    """Stands for the process dying at a step: nothing of the writer's cleanup runs for it
    after the database COMMIT."""


@pytest.fixture
def topic(broker: BrokerProcess, postgres: PostgresServer) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, PARTITIONS)
    create_orders_table(postgres.conninfo)
    return name


def async_writer(
    postgres: PostgresServer,
    broker: BrokerProcess,
    transactional_id: str,
    on_step: StepHook | None = None,
) -> AsyncDualWriter:
    return AsyncDualWriter(
        postgres.conninfo,
        broker.bootstrap,
        transactional_id,
        producer_options=FAST,
        on_step=on_step,
    )


async def write_order(writer: AsyncDualWriter, topic: str, order_id: str) -> None:
    async with writer.transaction() as unit:
        await unit.execute(INSERT_ORDER, (order_id, writer.transactional_id, 10))
        await unit.send(topic, b'{"amount": 10}', order_id.encode())


async def test_units_commit_rows_and_records_together(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    writer = async_writer(postgres, broker, f"{topic}-w")
    await writer.ensure_schema()
    with pytest.raises(RecoveryNeededError):
        async with writer.transaction():
            pass  # recover() comes first
    async with writer:
        for i in range(5):
            await write_order(writer, topic, f"{topic}-{i}")
    expected = {f"{topic}-{i}": 1 for i in range(5)}
    assert order_rows(postgres.conninfo, topic) == expected
    assert await committed_events(broker.bootstrap, topic) == expected


async def test_an_exception_in_the_unit_rolls_back_both(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    async with async_writer(postgres, broker, f"{topic}-w") as writer:
        await writer.ensure_schema()
        with pytest.raises(ZeroDivisionError):
            async with writer.transaction() as unit:
                await unit.execute(INSERT_ORDER, (f"{topic}-lost", "w", 1))
                delivered = await unit.send(topic, b"lost", f"{topic}-lost".encode())
                await delivered  # written to the log, then the unit fails
                raise ZeroDivisionError
        await write_order(writer, topic, f"{topic}-kept")  # the writer goes on
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-kept": 1}
    assert await committed_events(broker.bootstrap, topic) == {f"{topic}-kept": 1}


async def test_a_refused_commit_aborts_the_prepared_transaction(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    """A deferred constraint fails at COMMIT: the server said no, so the records go too."""
    with psycopg.connect(postgres.conninfo, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS deferred_check (id int PRIMARY KEY"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        connection.execute("DELETE FROM deferred_check")
        connection.execute("INSERT INTO deferred_check VALUES (1)")
    async with async_writer(postgres, broker, f"{topic}-w") as writer:
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with writer.transaction() as unit:
                await unit.execute(INSERT_ORDER, (f"{topic}-refused", "w", 1))
                await unit.execute("INSERT INTO deferred_check VALUES (1)")
                await unit.send(topic, b"refused", f"{topic}-refused".encode())
        await write_order(writer, topic, f"{topic}-after")
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-after": 1}
    assert await committed_events(broker.bootstrap, topic) == {f"{topic}-after": 1}


def test_the_blocking_writer(broker: BrokerProcess, postgres: PostgresServer, topic: str) -> None:
    writer = DualWriter(postgres.conninfo, broker.bootstrap, f"{topic}-w", producer_options=FAST)
    writer.ensure_schema()
    steps: list[Step] = []
    writer.on_step = steps.append
    with writer:
        with writer.transaction() as unit:
            unit.execute(INSERT_ORDER, (f"{topic}-1", "sync", 5))
            unit.send(topic, b"one", f"{topic}-1")
        with pytest.raises(KeyError), writer.transaction() as unit:
            unit.execute(INSERT_ORDER, (f"{topic}-2", "sync", 5))
            unit.send(topic, b"two", f"{topic}-2")
            raise KeyError("the application failed")
    assert steps == list(Step)  # every step once, in order, for the committed unit only
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-1": 1}
    assert asyncio.run(committed_events(broker.bootstrap, topic)) == {f"{topic}-1": 1}


async def test_several_workers_with_their_own_transactional_ids(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    workers = [async_writer(postgres, broker, f"{topic}-worker-{n}") for n in range(3)]

    async def work(writer: AsyncDualWriter) -> None:
        async with writer:
            for i in range(6):
                if i == 3:  # one failed unit per worker, between committed ones
                    with pytest.raises(ValueError):
                        async with writer.transaction() as unit:
                            await unit.send(topic, b"x", f"{writer.transactional_id}-bad".encode())
                            raise ValueError
                    continue
                await write_order(writer, topic, f"{writer.transactional_id}-{i}")

    await asyncio.gather(*(work(writer) for writer in workers))
    expected = {f"{topic}-worker-{n}-{i}": 1 for n in range(3) for i in range(6) if i != 3}
    assert order_rows(postgres.conninfo, topic) == expected
    assert await committed_events(broker.bootstrap, topic) == expected


async def test_recovery_commits_what_the_database_committed(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    def crash_after_commit(step: Step) -> None:
        if step is Step.AFTER_DB_COMMIT:
            raise Crash

    crashed = async_writer(postgres, broker, f"{topic}-w", on_step=crash_after_commit)
    await crashed.recover()
    with pytest.raises(Crash):
        await write_order(crashed, topic, f"{topic}-decided")
    # decided but not completed: the row is there, the record not yet visible
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-decided": 1}
    assert await committed_events(broker.bootstrap, topic) == {}

    async with async_writer(postgres, broker, f"{topic}-w") as successor:
        assert await successor.recover() == Recovery.NOTHING  # once is enough
        await write_order(successor, topic, f"{topic}-next")
    await crashed.close()
    expected = {f"{topic}-decided": 1, f"{topic}-next": 1}
    assert order_rows(postgres.conninfo, topic) == expected
    assert await committed_events(broker.bootstrap, topic) == expected


async def test_recovery_outcomes(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    tid = f"{topic}-w"

    def crash_at(wanted: Step) -> StepHook:
        def hook(step: Step) -> None:
            if step is wanted:
                raise Crash

        return hook

    committed = async_writer(postgres, broker, tid, on_step=crash_at(Step.AFTER_DB_COMMIT))
    await committed.recover()
    with pytest.raises(Crash):
        await write_order(committed, topic, f"{topic}-a")
    await committed.close()
    recovering = async_writer(postgres, broker, tid)
    assert await recovering.recover() == Recovery.COMMITTED
    await recovering.close()

    # killed between prepare and COMMIT: the session dies with the process, nothing is decided
    undecided = async_writer(postgres, broker, tid)
    await undecided.recover()
    connection, producer = undecided._ready()
    await connection.execute(
        "SELECT producer_id FROM lockgate_prepared_txn WHERE transactional_id = %s FOR UPDATE",
        (tid,),
    )
    producer.begin_transaction()
    await connection.execute(INSERT_ORDER, (f"{topic}-b", "w", 1))
    await producer.send(topic, b"b", f"{topic}-b".encode())
    await producer.prepare_transaction()
    await connection.close()  # the process "died": its session is rolled back
    assert await committed_events(broker.bootstrap, topic) == {f"{topic}-a": 1}
    recovering = async_writer(postgres, broker, tid)
    assert await recovering.recover() == Recovery.ABORTED
    await recovering.close()
    await undecided.close()
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-a": 1}
    assert await committed_events(broker.bootstrap, topic) == {f"{topic}-a": 1}


def test_a_zombie_worker_cannot_break_the_agreement(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    """Its successor recovers while the zombie is between prepare and COMMIT: recovery fences
    it in Kafka, then waits for the zombie's lock on the state row and follows its decision."""
    tid = f"{topic}-w"
    successor = DualWriter(postgres.conninfo, broker.bootstrap, tid, producer_options=FAST)
    outcome: list[Recovery] = []
    recovering = threading.Thread(target=lambda: outcome.append(successor.recover()))

    def recover_meanwhile(step: Step) -> None:
        if step is Step.AFTER_PREPARE:
            recovering.start()
            time.sleep(1.0)  # the successor fences us, then waits for our row lock
            assert not outcome

    zombie = DualWriter(postgres.conninfo, broker.bootstrap, tid, producer_options=FAST)
    with zombie:
        zombie.on_step = recover_meanwhile
        with pytest.raises(CompletionPendingError) as pending, zombie.transaction() as unit:
            unit.execute(INSERT_ORDER, (f"{topic}-z", "zombie", 1))
            unit.send(topic, b"z", f"{topic}-z")
        assert isinstance(pending.value.__cause__, KafkaError)  # fenced at complete
        recovering.join(30)
        assert outcome == [Recovery.COMMITTED]
        with pytest.raises(RecoveryNeededError), zombie.transaction():
            pass  # it knows it must recover
    with successor, successor.transaction() as unit:
        unit.execute(INSERT_ORDER, (f"{topic}-s", "successor", 1))
        unit.send(topic, b"s", f"{topic}-s")
    expected = {f"{topic}-z": 1, f"{topic}-s": 1}
    assert order_rows(postgres.conninfo, topic) == expected
    assert asyncio.run(committed_events(broker.bootstrap, topic)) == expected


def test_an_idle_zombie_is_fenced_at_its_next_unit(
    broker: BrokerProcess, postgres: PostgresServer, topic: str
) -> None:
    tid = f"{topic}-w"
    zombie = DualWriter(postgres.conninfo, broker.bootstrap, tid, producer_options=FAST)
    successor = DualWriter(postgres.conninfo, broker.bootstrap, tid, producer_options=FAST)
    with zombie, successor:  # the successor's recover() fences the zombie
        with pytest.raises(KafkaError), zombie.transaction() as unit:
            unit.execute(INSERT_ORDER, (f"{topic}-z", "zombie", 1))
            unit.send(topic, b"z", f"{topic}-z")
        with successor.transaction() as unit:
            unit.execute(INSERT_ORDER, (f"{topic}-s", "successor", 1))
            unit.send(topic, b"s", f"{topic}-s")
    assert order_rows(postgres.conninfo, topic) == {f"{topic}-s": 1}
    assert asyncio.run(committed_events(broker.bootstrap, topic)) == {f"{topic}-s": 1}
