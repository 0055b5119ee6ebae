"""Exactly-once consume-transform-produce pipelines (KIP-447) through real clients, each
instance a child process running eos_worker.py: it reads a few records of the input topic as
a member of a consumer group, writes "out:<value>" to the output topic and commits the input
offsets with the consumer's group metadata (send_offsets_to_transaction(offsets,
group_metadata)) in one transaction.

- Three instances share six input partitions. One is killed with SIGKILL inside a
  transaction, after its records and its offsets were sent and before the commit, and is
  replaced by a new process with the same transactional id (whose InitProducerId aborts the
  dead one's transaction). At the end the output topic read with read_committed holds every
  input record exactly once, the dead transaction's records are in the log but invisible, and
  the group's committed offsets are at the end of every input partition.
  confluent-kafka and kafka-python (3.0 supports send_offsets_to_transaction with
  KafkaConsumer.group_metadata(), i.e. TxnOffsetCommit v3 with generation and member id).
- A zombie: an instance is frozen (SIGSTOP) inside a transaction, before it sends its offsets;
  its session expires, the group rebalances without it and another instance processes
  everything. Thawed, the zombie sends its offsets with its old group metadata: the broker
  refuses them (UNKNOWN_MEMBER_ID: the zombie was removed from the group, as Kafka answers;
  kafka-python reports it as CommitFailedError), the zombie cannot commit its transaction,
  and its records never become visible. confluent-kafka and kafka-python.
- A zombie that stayed in the group but missed a generation: with the cooperative protocol
  librdkafka rejoins in the background while the application is busy inside a transaction,
  so the member id is still valid but the generation in the application's group metadata is
  stale: ILLEGAL_GENERATION, and the commit fails. confluent-kafka only (kafka-python's
  cooperative assignor is not needed to show the rule twice).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.compat

TIMEOUT = 60.0
WORKER = Path(__file__).with_name("eos_worker.py")
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

Event = dict[str, Any]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("eos") / "data", SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


class Worker:
    """A worker child process and the events it printed (read by a thread)."""

    def __init__(self, name: str, log_dir: Path, arguments: list[str]) -> None:
        self.name = name
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._stderr = open(log_dir / f"{name}.stderr", "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["worker"] = self.name
            self._queue.put(event)
        self._queue.put(None)

    def collect(self) -> None:
        """Moves the events printed so far into self.events."""
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not None:
                self.events.append(event)

    def wait_for(self, kind: str, timeout: float = TIMEOUT) -> Event:
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        while time.monotonic() < deadline:
            self.collect()
            for event in self.events[seen:]:
                if event["event"] == kind:
                    return event
            seen = len(self.events)
            if self.process.poll() is not None and self._queue.empty():
                break
            time.sleep(0.02)
        raise AssertionError(f"{self.name}: no {kind!r} event; events: {self.events[-10:]}")

    def of_kind(self, kind: str) -> list[Event]:
        self.collect()
        return [e for e in self.events if e["event"] == kind]

    @property
    def assignment(self) -> set[int]:
        """The partitions of the latest assignment (empty after a revocation)."""
        self.collect()
        for event in reversed(self.events):
            if event["event"] == "assigned":
                return set(event["partitions"])
            if event["event"] == "revoked":
                return set()
        return set()

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
        self.process.wait(10)

    def resume_with_line(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 20.0) -> int:
        """Waits for a clean exit (after the stop file appeared); kills it if it does not."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop") from None

    def close(self) -> None:
        self.kill()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self._reader.join(5)
        self._stderr.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce_inputs(
    bootstrap: str, topic: str, partitions: int, per_partition: int, first: int = 0
) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [
        f"{topic}-{p}-{i}" for p in range(partitions) for i in range(first, first + per_partition)
    ]
    for value in values:
        producer.produce(topic, value=value.encode(), partition=int(value.split("-")[-2]))
    assert producer.flush(TIMEOUT) == 0
    return values


def read_output(
    bootstrap: str, topic: str, partitions: int, isolation: str, settle: float = 0.5
) -> list[str]:
    """Every value of the topic, from the beginning to the end of every partition (the LSO
    under read_committed), then `settle` more seconds of polling."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-verifier",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    values: list[str] = []
    at_end: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        settled = float("inf")
        while time.monotonic() < min(deadline, settled):
            for message in consumer.consume(1000, 0.1):
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(f"consumer error: {error}")
                    assert partition is not None
                    at_end.add(partition)
                    continue
                value = message.value()
                assert value is not None
                values.append(value.decode())
            if len(at_end) == partitions and settled == float("inf"):
                settled = time.monotonic() + settle
        assert len(at_end) == partitions, f"only partitions {at_end} reached their end"
    finally:
        consumer.close()
    return values


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answered = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT
        )
        return {tp.partition: tp.offset for tp in answered}
    finally:
        consumer.close()


class Pipeline:
    def __init__(self, broker: BrokerProcess, tmp_path: Path, client: str, name: str) -> None:
        self.broker = broker
        self.tmp_path = tmp_path
        self.client = client
        self.input, self.output, self.group = f"{name}-in", f"{name}-out", f"{name}-group"
        self.stop_file = tmp_path / f"{name}.stop"
        self.workers: list[Worker] = []

    def start(self, name: str, transactional_id: str, *extra: str) -> Worker:
        worker = Worker(
            name,
            self.tmp_path,
            [
                "--client",
                self.client,
                "--bootstrap",
                self.broker.bootstrap,
                "--group",
                self.group,
                "--input",
                self.input,
                "--output",
                self.output,
                "--transactional-id",
                transactional_id,
                "--stop-file",
                str(self.stop_file),
                *extra,
            ],
        )
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        self.stop_file.touch()
        for worker in self.workers:
            worker.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_three_instances_one_killed_mid_transaction(
    broker: BrokerProcess, tmp_path: Path, client: str
) -> None:
    partitions, per_partition = 6, 30
    pipeline = Pipeline(broker, tmp_path, client, f"eos-{client}")
    create_topic(broker.bootstrap, pipeline.input, partitions)
    create_topic(broker.bootstrap, pipeline.output, partitions)
    started = time.monotonic()
    try:
        doomed = pipeline.start("instance-1", f"{client}-eos-1", "--hang-at", "3")
        others = [pipeline.start(f"instance-{i}", f"{client}-eos-{i}") for i in (2, 3)]
        instances = [doomed, *others]
        wait_until(
            lambda: (
                sorted(len(w.assignment) for w in instances) == [2, 2, 2]
                and set().union(*(w.assignment for w in instances)) == set(range(partitions))
            ),
            "three instances sharing six partitions",
        )
        print(f"{client}: group formed after {time.monotonic() - started:.1f}s")
        inputs = produce_inputs(broker.bootstrap, pipeline.input, partitions, per_partition)

        hang = doomed.wait_for("hang")
        doomed.kill()  # between the offsets and the commit
        print(f"{client}: killed instance-1 in its transaction of {hang['records']} records")
        replacement = pipeline.start("instance-1b", f"{client}-eos-1")
        live = [replacement, *others]
        wait_until(
            lambda: (
                sorted(len(w.assignment) for w in live) == [2, 2, 2]
                and set().union(*(w.assignment for w in live)) == set(range(partitions))
            ),
            "the replacement in the group",
        )
        # more input once the replacement owns partitions: it must do its share
        inputs += produce_inputs(
            broker.bootstrap, pipeline.input, partitions, per_partition, first=per_partition
        )

        expected = sorted(f"out:{value}" for value in inputs)
        wait_until(
            lambda: (
                sum(e["records"] for w in pipeline.workers for e in w.of_kind("committed"))
                >= len(inputs)
            ),
            "every input record processed",
        )
        pipeline.stop_file.touch()
        for worker in [*others, replacement]:
            assert worker.finish() == 0, worker.events[-5:]
        print(
            f"{client}: {len(inputs)} records through "
            f"{sum(len(w.of_kind('committed')) for w in pipeline.workers)} transactions, "
            f"{sum(len(w.of_kind('aborting')) for w in pipeline.workers)} aborted, "
            f"in {time.monotonic() - started:.1f}s"
        )

        committed = read_output(broker.bootstrap, pipeline.output, partitions, "read_committed")
        assert sorted(committed) == expected  # every record exactly once
        everything = read_output(
            broker.bootstrap, pipeline.output, partitions, "read_uncommitted", settle=0.2
        )
        assert len(everything) >= len(expected) + hang["records"]  # the dead one's are there
        assert committed_offsets(broker.bootstrap, pipeline.group, pipeline.input, partitions) == (
            dict.fromkeys(range(partitions), 2 * per_partition)
        )
        assert replacement.of_kind("committed"), "the replacement never took over"
    finally:
        pipeline.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_zombie_with_a_stale_generation_cannot_commit(
    broker: BrokerProcess, tmp_path: Path, client: str
) -> None:
    partitions, per_partition = 2, 10
    pipeline = Pipeline(broker, tmp_path, client, f"zombie-{client}")
    create_topic(broker.bootstrap, pipeline.input, partitions)
    create_topic(broker.bootstrap, pipeline.output, partitions)
    try:
        inputs = produce_inputs(broker.bootstrap, pipeline.input, partitions, per_partition)
        zombie = pipeline.start(
            "zombie",
            f"{client}-zombie",
            "--pause-at",
            "1",
            "--session-timeout-ms",
            "1000",
            "--transaction-timeout-ms",
            "60000",  # the transaction stays open: only the group can fence it
        )
        paused = zombie.wait_for("paused")
        zombie.signal(signal.SIGSTOP)  # frozen: no heartbeats either
        survivor = pipeline.start("survivor", f"{client}-survivor")
        wait_until(
            lambda: sum(e["records"] for e in survivor.of_kind("committed")) >= len(inputs),
            "the survivor processing everything",
        )
        zombie.signal(signal.SIGCONT)
        zombie.resume_with_line()
        fenced = zombie.wait_for("fenced")
        print(f"{client}: zombie ({paused['records']} records) fenced: {fenced}")
        assert fenced["commit"] == "failed"
        if client == "confluent-kafka":
            assert fenced["error"] in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION")
        else:  # kafka-python reports both as CommitFailedError naming the broker's error
            assert fenced["error"] == "CommitFailedError"
            assert "UnknownMemberIdError" in fenced["detail"] or (
                "IllegalGenerationError" in fenced["detail"]
            )
        assert zombie.finish() == 0

        pipeline.stop_file.touch()
        assert survivor.finish() == 0
        committed = read_output(broker.bootstrap, pipeline.output, partitions, "read_committed")
        assert sorted(committed) == sorted(f"out:{value}" for value in inputs)
        assert committed_offsets(broker.bootstrap, pipeline.group, pipeline.input, partitions) == (
            dict.fromkeys(range(partitions), per_partition)
        )
    finally:
        pipeline.close()


def test_a_zombie_that_missed_a_rebalance_gets_illegal_generation(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """With the cooperative protocol librdkafka rejoins in its background thread while the
    application is busy: the member stays (same member id) but moves to a new generation, and
    the group metadata the application took before is stale: ILLEGAL_GENERATION."""
    partitions, per_partition = 2, 10
    pipeline = Pipeline(broker, tmp_path, "confluent-kafka", "stale-generation")
    create_topic(broker.bootstrap, pipeline.input, partitions)
    create_topic(broker.bootstrap, pipeline.output, partitions)
    cooperative = ("--assignor", "cooperative-sticky")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def stable_with(count: int) -> bool:
        group = admin.describe_consumer_groups([pipeline.group])[pipeline.group].result(TIMEOUT)
        return bool(group.state.name == "STABLE" and len(group.members) == count)

    try:
        inputs = produce_inputs(broker.bootstrap, pipeline.input, partitions, per_partition)
        zombie = pipeline.start("zombie", "stale-zombie", "--pause-at", "1", *cooperative)
        paused = zombie.wait_for("paused")  # busy inside its first transaction
        survivor = pipeline.start("survivor", "stale-survivor", *cooperative)
        wait_until(lambda: stable_with(2), "a new generation with both members")
        zombie.resume_with_line()
        fenced = zombie.wait_for("fenced")
        print(f"zombie ({paused['records']} records) fenced: {fenced}")
        assert fenced["error"] == "ILLEGAL_GENERATION"
        assert fenced["commit"] == "failed"
        assert zombie.finish() == 0
        wait_until(
            lambda: sum(e["records"] for e in survivor.of_kind("committed")) >= len(inputs),
            "the survivor processing everything",
        )
        pipeline.stop_file.touch()
        assert survivor.finish() == 0
        committed = read_output(broker.bootstrap, pipeline.output, partitions, "read_committed")
        assert sorted(committed) == sorted(f"out:{value}" for value in inputs)
    finally:
        pipeline.close()
