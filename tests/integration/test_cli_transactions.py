"""`lockgate transactions ...` as subprocesses against a broker, with lockgate's client opening
the transactions: the duration and state filters of list, describe, force-terminate of a
prepared (two-phase) transaction nobody will complete, and find-hanging + abort of a transaction
whose coordinator lost its log."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.client.transactions import PreparedTxnState
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TWO_PHASE = {"transaction.two.phase.commit.enable": "true"}
ANY_AGE = ("--max-transaction-timeout", "0")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-txn") / "data", TWO_PHASE).start()
    try:
        yield process
    finally:
        process.kill()


def lockgate(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lockgate.cli", *args, "--bootstrap-server", broker.bootstrap]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def lockgate_json(broker: BrokerProcess, *args: str) -> list[dict[str, Any]]:
    result = lockgate(broker, *args, "--json")
    assert result.returncode == 0, result.stderr
    parsed = json.loads(result.stdout)
    assert isinstance(parsed, list)
    return parsed


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def wait_for_state(admin: Admin, transactional_id: str, state: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        found = (await admin.describe_transactions([transactional_id]))[transactional_id]
        if found.state == state or time.monotonic() > deadline:
            assert found.state == state
            return
        await asyncio.sleep(0.05)


async def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Everything a read_committed consumer sees up to the last stable offset."""
    async with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(wanted)
        await consumer.seek_to_beginning(wanted)
        ends = await consumer.end_offsets(wanted)
        seen: list[bytes] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in wanted]
            if all(position >= ends[tp] for position, tp in zip(positions, wanted, strict=True)):
                break
            seen.extend(m.value or b"" for m in await consumer.poll(200))
        return seen


async def test_list_filters_by_duration_and_state_and_describe_shows_the_partitions(
    broker: BrokerProcess,
) -> None:
    topic = unique("list")
    create_topic(broker.bootstrap, topic, 2)
    slow_id, fresh_id = unique("slow"), unique("fresh")
    async with (
        Producer(broker.bootstrap, transactional_id=slow_id) as slow,
        Producer(broker.bootstrap, transactional_id=fresh_id) as fresh,
    ):
        await slow.init_transactions()
        await fresh.init_transactions()
        slow.begin_transaction()
        await (await slow.send(topic, b"slow", partition=1))
        await asyncio.sleep(3.5)
        fresh.begin_transaction()
        await (await fresh.send(topic, b"fresh", partition=0))
        fresh_began = time.monotonic()

        listed = await asyncio.to_thread(lockgate_json, broker, "transactions", "list")
        ours = {row["TransactionalId"]: row for row in listed}
        assert ours[slow_id]["TransactionState"] == "Ongoing"
        assert ours[fresh_id]["TransactionState"] == "Ongoing"
        longer = await asyncio.to_thread(
            lockgate_json, broker, "transactions", "list", "--running-longer-than-ms", "3000"
        )
        assert {row["TransactionalId"] for row in longer} >= {slow_id}
        if time.monotonic() - fresh_began < 3.0:  # a very slow machine may have aged it
            assert fresh_id not in {row["TransactionalId"] for row in longer}

        described = await asyncio.to_thread(
            lockgate_json, broker, "transactions", "describe", "--transactional-id", slow_id
        )
        (row,) = described
        assert row["TransactionState"] == "Ongoing"
        assert row["TopicPartitions"] == f"{topic}-1"
        assert row["TransactionDurationMs"] >= 3500
        assert row["ProducerId"] == slow.identity.producer_id  # type: ignore[union-attr]

        await slow.commit_transaction()
        await fresh.abort_transaction()

    async with Admin(broker.bootstrap) as admin:
        await wait_for_state(admin, slow_id, "CompleteCommit")
        await wait_for_state(admin, fresh_id, "CompleteAbort")
    committed = await asyncio.to_thread(
        lockgate_json, broker, "transactions", "list", "--state", "CompleteCommit"
    )
    names = {row["TransactionalId"] for row in committed}
    assert slow_id in names and fresh_id not in names
    table = lockgate(broker, "transactions", "describe", "--transactional-id", slow_id)
    assert table.stdout.splitlines()[0].split()[:3] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
    ]
    missing = lockgate(broker, "transactions", "describe", "--transactional-id", unique("none"))
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


async def test_force_terminate_aborts_a_prepared_transaction_nobody_completes(
    broker: BrokerProcess,
) -> None:
    topic = unique("force")
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = unique("orphan")
    abandoned = Producer(broker.bootstrap, transactional_id=transactional_id)
    await abandoned.start()
    await abandoned.init_transactions(enable_2pc=True)
    abandoned.begin_transaction()
    for i in range(4):
        await abandoned.send(topic, f"orphan-{i}".encode(), partition=i % 2)
    prepared = await abandoned.prepare_transaction()
    await abandoned.close()  # the external transaction manager never comes back

    async with Producer(broker.bootstrap, transactional_id=unique("other")) as other:
        await other.init_transactions()
        other.begin_transaction()
        await other.send(topic, b"after", partition=0)
        await other.commit_transaction()
    # the prepared transaction holds back the last stable offset of both partitions
    assert await committed_values(broker.bootstrap, topic, 2) == []

    result = await asyncio.to_thread(
        lockgate, broker, "transactions", "force-terminate", "--transactional-id", transactional_id
    )
    assert result.returncode == 0, result.stderr
    async with Admin(broker.bootstrap) as admin:
        # aborted, then initialised afresh for the id's next producer
        await wait_for_state(admin, transactional_id, "Empty")
        described = (await admin.describe_transactions([transactional_id]))[transactional_id]
        assert described.producer_epoch > prepared.epoch  # every earlier producer is fenced
    assert await committed_values(broker.bootstrap, topic, 2) == [b"after"]

    # The transaction manager coming back finds nothing kept: completing is a no-op.
    async with Producer(broker.bootstrap, transactional_id=transactional_id) as late:
        await late.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        await late.complete_transaction(PreparedTxnState(prepared.producer_id, prepared.epoch))
    assert await committed_values(broker.bootstrap, topic, 2) == [b"after"]


async def test_find_hanging_and_abort_after_the_coordinator_lost_its_log(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = "hanging"
        create_topic(broker.bootstrap, topic, 2)
        async with Producer(broker.bootstrap, transactional_id="lost") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            for _ in range(3):
                await producer.send(topic, b"lost", partition=0)
            await producer.flush()
            producer_id = producer.identity.producer_id  # type: ignore[union-attr]
            broker.kill()  # the transaction is open on partition 0 ...
        for lost in (tmp_path / "data").glob("__transaction_state-*"):
            shutil.rmtree(lost)  # ... and its coordinator's log is gone
        broker.start()

        hanging = await asyncio.to_thread(
            lockgate_json, broker, "transactions", "find-hanging", "--topic", topic, *ANY_AGE
        )
        assert [(h["Partition"], h["ProducerId"], h["StartOffset"]) for h in hanging] == [
            (0, producer_id, 0)
        ]
        assert "no coordinator knows" in hanging[0]["Reason"]
        by_broker = await asyncio.to_thread(
            lockgate_json, broker, "transactions", "find-hanging", "--broker-id", "0", *ANY_AGE
        )
        assert [h["Topic"] for h in by_broker] == [topic]
        # younger than the largest transaction timeout: it may still be completed normally
        assert (
            await asyncio.to_thread(
                lockgate_json,
                broker,
                "transactions",
                "find-hanging",
                "--topic",
                topic,
                "--max-transaction-timeout",
                "15",
            )
            == []
        )

        async with Producer(broker.bootstrap, transactional_id="later") as later:
            await later.init_transactions()
            later.begin_transaction()
            await later.send(topic, b"later", partition=0)
            await later.commit_transaction()
        assert await committed_values(broker.bootstrap, topic, 1) == []  # stuck behind it

        wrong = lockgate(
            broker, "transactions", "abort", "--topic", topic, "--partition", "0",
            "--start-offset", "1",
        )  # fmt: skip
        assert wrong.returncode == 1 and "no open transaction starts at offset 1" in wrong.stderr
        aborted = lockgate(
            broker, "transactions", "abort", "--topic", topic, "--partition", "0",
            "--start-offset", "0",
        )  # fmt: skip
        assert aborted.returncode == 0, aborted.stderr
        assert await committed_values(broker.bootstrap, topic, 1) == [b"later"]
        assert (
            await asyncio.to_thread(
                lockgate_json, broker, "transactions", "find-hanging", "--topic", topic, *ANY_AGE
            )
            == []
        )
    finally:
        broker.kill()
