"""File descriptors stay bounded, end to end: a broker child limited to 256 descriptors
(RLIMIT_NOFILE soft = hard = 256) holds ~2,000 partitions (6,000+ segment files); a
confluent-kafka producer writes to every partition and a consumer reads every one back, then
the broker restarts and does it again. psutil samples the child's open descriptors meanwhile:
they stay within the limit, with the segment files inside their budget (half the limit)."""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all

pytestmark = pytest.mark.compat

LIMIT = 256
TOPICS = 4
PARTITIONS_EACH = 500  # 2,000 partitions in all
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}


def limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


class FdSampler:
    """The broker child's open descriptor count, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self._process.num_fds())
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def produce_everywhere(bootstrap: str, round_: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    count = 0
    for topic in range(TOPICS):
        for partition in range(PARTITIONS_EACH):
            producer.produce(
                f"fd-{topic}",
                b"round-%d-partition-%d" % (round_, partition),
                partition=partition,
                on_delivery=delivered,
            )
            count += 1
            producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    return count


def read_everything(bootstrap: str, rounds: int) -> None:
    for topic in range(TOPICS):
        read = consume_all(bootstrap, f"fd-{topic}", PARTITIONS_EACH, PARTITIONS_EACH * rounds)
        for partition, records in read.items():
            assert [v for _, v in records] == [
                b"round-%d-partition-%d" % (r, partition) for r in range(rounds)
            ], f"fd-{topic}-{partition}"


def test_two_thousand_partitions_within_256_descriptors(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings=SETTINGS, preexec=limit_descriptors)
    broker.start()
    try:
        assert broker.process is not None
        sampler = FdSampler(broker.process.pid)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics(
            [NewTopic(f"fd-{t}", PARTITIONS_EACH, 1) for t in range(TOPICS)],
            operation_timeout=60,
            request_timeout=120,
        )
        for future in futures.values():
            future.result(timeout=180)
        produce_everywhere(broker.bootstrap, 0)
        read_everything(broker.bootstrap, 1)
        first_peak = sampler.stop()

        broker.restart()
        assert broker.process is not None
        sampler = FdSampler(broker.process.pid)
        started = time.monotonic()
        produce_everywhere(broker.bootstrap, 1)
        read_everything(broker.bootstrap, 2)
        second_peak = sampler.stop()
        log = broker.log()
        print(
            f"peak descriptors {first_peak}, {second_peak};"
            f" second round {time.monotonic() - started:.1f}s"
        )
        assert "segment files may keep 128 descriptors open" in log
        assert "Too many open files" not in log
        # 128 segment handles plus sockets, the event loop and the interpreter's own
        budget = LIMIT // 2
        assert 0 < first_peak <= budget + 48 and 0 < second_peak <= budget + 48
    finally:
        broker.stop()
