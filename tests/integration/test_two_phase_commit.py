"""KIP-939 end to end: an external transaction manager (external_tm.py, a child process) with
three lockgate participants prepares, crashes with SIGKILL at each point of its protocol,
recovers with keep_prepared_txn and finishes according to its decision log. A read_committed
consumer then sees each round either from all three participants or from none, never twice,
and nothing is lost — with and without a broker crash while the manager is down."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer
from lockgate.server.broker import Broker
from tests.integration.external_tm import CRASH_POINTS, PARTICIPANTS, values_of
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    # the abort sweep runs often, to show that prepared transactions are exempt from it
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
# Points at which a commit decision is already durable: recovery must commit.
DECIDED = {"after-decision", "after-complete-1", "after-complete-2", "after-complete-3"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("2pc") / "data", SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


def run_manager(
    broker: BrokerProcess,
    prefix: str,
    topic: str,
    log: Path,
    round_number: int,
    *extra: str,
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "tests.integration.external_tm",
        "--bootstrap",
        broker.bootstrap,
        "--prefix",
        prefix,
        "--topic",
        topic,
        "--decision-log",
        str(log),
        "--round",
        str(round_number),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


async def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    async with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        wanted = [TopicPartition(topic, p) for p in range(PARTICIPANTS)]
        consumer.assign(wanted)
        await consumer.seek_to_beginning(wanted)
        ends = await consumer.end_offsets(wanted)
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in wanted]
            if all(position >= ends[tp] for position, tp in zip(positions, wanted, strict=True)):
                break
            seen.extend(m.value or b"" for m in await consumer.poll(200))
        return seen


def expected(*rounds: int) -> Counter[bytes]:
    return Counter(v for r in rounds for p in range(PARTICIPANTS) for v in values_of(r, p))


async def check_open(bootstrap: str, prefix: str) -> list[str]:
    """The states of the participants' transactions."""
    async with Admin(bootstrap) as admin:
        ids = [f"{prefix}-participant-{i}" for i in range(PARTICIPANTS)]
        described = await admin.describe_transactions(ids)
    return [described[i].state for i in ids]


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
async def test_the_manager_crashes_and_recovers_from_its_decision_log(
    broker: BrokerProcess, tmp_path: Path, crash_at: str
) -> None:
    prefix, topic = f"tm-{uuid.uuid4().hex[:8]}", f"2pc-{crash_at}"
    create_topic(broker.bootstrap, topic, PARTICIPANTS)
    log = tmp_path / "decisions.jsonl"

    crashed = await asyncio.to_thread(
        run_manager, broker, prefix, topic, log, 1, "--crash-at", crash_at
    )
    assert crashed.returncode == -9, crashed.stderr
    assert json.loads(crashed.stdout.splitlines()[-1]) == {"event": "crash", "at": crash_at}
    if crash_at.startswith("after-prepare") or crash_at == "after-decision":
        await asyncio.sleep(1.5)  # past the 1 s timeout, two sweeps: prepared ones survive
        states = await check_open(broker.bootstrap, prefix)
        assert "Ongoing" in states
    # Nothing of round 1 is visible before the manager decides and completes everything;
    # the participants it already completed (after-complete-N) are the only exception.
    visible = Counter(await read_committed(broker.bootstrap, topic))
    completed = int(crash_at[-1]) if crash_at.startswith("after-complete") else 0
    assert visible == Counter(v for p in range(completed) for v in values_of(1, p))

    recovered = await asyncio.to_thread(run_manager, broker, prefix, topic, log, 2)
    assert recovered.returncode == 0, recovered.stderr

    seen = Counter(await read_committed(broker.bootstrap, topic))
    assert seen == (expected(1, 2) if crash_at in DECIDED else expected(2))
    assert max(seen.values()) == 1  # never twice
    # the markers are visible before CompleteCommit is logged: wait for it, boundedly
    deadline, logged = time.monotonic() + 10, ["CompleteCommit"] * PARTICIPANTS
    while (states := await check_open(broker.bootstrap, prefix)) != logged:
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("crash_at", ["after-prepare-3", "after-decision", "after-complete-1"])
async def test_the_broker_crashes_too_while_the_manager_is_down(
    tmp_path: Path, crash_at: str
) -> None:
    broker = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        prefix, topic = "tm-with-broker-crash", "2pc"
        create_topic(broker.bootstrap, topic, PARTICIPANTS)
        log = tmp_path / "decisions.jsonl"
        crashed = await asyncio.to_thread(
            run_manager, broker, prefix, topic, log, 1, "--crash-at", crash_at
        )
        assert crashed.returncode == -9, crashed.stderr
        broker.kill()  # the prepared transactions must survive in __transaction_state
        broker.start()
        recovered = await asyncio.to_thread(run_manager, broker, prefix, topic, log, 2)
        assert recovered.returncode == 0, recovered.stderr
        seen = Counter(await read_committed(broker.bootstrap, topic))
        assert seen == (expected(1, 2) if crash_at in DECIDED else expected(2))
    finally:
        broker.kill()


async def test_two_phase_commit_is_refused_unless_the_broker_enables_it(
    memory_broker: Broker,
) -> None:
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    async with Producer(bootstrap, transactional_id="not-allowed") as producer:
        with pytest.raises(KafkaError) as refused:
            await producer.init_transactions(enable_2pc=True)
        assert refused.value.code.name == "transactional_id_authorization_failed"
    async with Producer(bootstrap, transactional_id="allowed-plain") as plain:
        await plain.init_transactions()  # ordinary transactions are unaffected
