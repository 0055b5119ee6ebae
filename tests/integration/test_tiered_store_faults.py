"""Tiered storage (KIP-405) while the object store misbehaves: a broker copying through an HTTP
fault proxy (tests/support/http_fault_proxy.py) in front of the S3 test server. The store down
(nothing deleted locally until it is safely remote, copies catch up once it is back), a 500 on
a share of the requests (every rolled segment ends up remote exactly once), a slow store (the
event loop is not held: producers and tail readers keep their pace while a remote read waits,
and a Fetch does not wait longer than remote.fetch.max.wait.ms), and 500 on every read (the
consumer gets a retriable error and reads on once it stops). Each failure is one log line."""

from __future__ import annotations

import asyncio
import itertools
import re
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lockgate.storage.object_store import S3ObjectStore, S3Settings
from lockgate.tiered.layout import RemoteSegment
from lockgate.tiered.listing import scan
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.http_fault_proxy import HttpFaultProxy
from tests.support.kafka_wire import KafkaWire, fetch_batches
from tests.support.object_store import S3ProxyServer

pytestmark = pytest.mark.compat

RECORDS = 1200
VALUE_BYTES = 200
SEGMENT_BYTES = 16384
KAFKA_STORAGE_ERROR = 56
STORE_DELAY = 3.0  # the slow store's delay per response: the yardstick of "not held"
# a Fetch's remote read at most: below the store's delay, above what the client's 3 tries
# of a read answered 500 take (backoff 100, 200, 400 ms), so that they end in an error
REMOTE_FETCH_WAIT_MS = 2000


@dataclass
class Tiered:
    broker: BrokerProcess
    proxy: HttpFaultProxy
    server: S3ProxyServer
    prefix: str

    def store(self) -> S3ObjectStore:
        """A client of the S3 server itself (not through the proxy), for the checks."""
        endpoint = self.server.endpoint
        return S3ObjectStore(
            S3Settings(
                bucket=endpoint.bucket, endpoint=endpoint.endpoint, prefix=self.prefix,
                region=endpoint.region, access_key_id=endpoint.access_key,
                secret_access_key=endpoint.secret_key, allow_http=True,
            )
        )  # fmt: skip


@pytest.fixture(scope="module")
def tiered(s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    prefix = f"faults-{uuid.uuid4().hex[:8]}"
    endpoint = s3proxy.endpoint
    with HttpFaultProxy(s3proxy.port) as proxy:
        settings = {
            "remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": "200",
            "remote.fetch.max.wait.ms": str(REMOTE_FETCH_WAIT_MS),
            "rsm.config.s3.endpoint": proxy.endpoint,
            "rsm.config.s3.bucket": endpoint.bucket,
            "rsm.config.s3.prefix": prefix,
            "rsm.config.s3.region": endpoint.region,
            "rsm.config.s3.access.key.id": endpoint.access_key,
            "rsm.config.s3.secret.access.key": endpoint.secret_key,
        }
        data = tmp_path_factory.mktemp("tiered-faults") / "data"
        broker = BrokerProcess(data, settings).start()
        try:
            yield Tiered(broker, proxy, s3proxy, prefix)
        finally:
            broker.kill()


@pytest.fixture
def faults(tiered: Tiered) -> Iterator[Tiered]:
    """The module's broker, with the store healthy again after each test."""
    try:
        yield tiered
    finally:
        tiered.proxy.clear_rules()
        tiered.proxy.up()


def new_topic(broker: BrokerProcess, name: str) -> str:
    create_topic(
        broker.bootstrap, name, 1,
        {"remote.storage.enable": "true", "internal.segment.bytes": str(SEGMENT_BYTES),
         "local.retention.bytes": "1"},
    )  # fmt: skip
    return name


def local_segments(broker: BrokerProcess, topic: str) -> list[str]:
    return sorted(p.name for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def records(topic: str) -> list[bytes]:
    return [b"%s-%05d-" % (topic.encode(), i) + bytes(VALUE_BYTES) for i in range(RECORDS)]


def producer(bootstrap: str) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4096, "acks": "all"}
    )


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    sender = producer(bootstrap)
    for value in values:
        sender.produce(topic, value)
    assert sender.flush(30) == 0


def consumer(bootstrap: str, topic: str, offset: int = 0) -> Consumer:
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    reader.assign([TopicPartition(topic, 0, offset)])
    return reader


def consume(reader: Consumer, expected: int, timeout: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for message in reader.consume(500, 0.5):
            error = message.error()
            if error is not None:
                raise AssertionError(error)
            got.append(message.value() or b"")
    return got


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    reader = consumer(bootstrap, topic)
    try:
        return consume(reader, expected)
    finally:
        reader.close()


def wait_until(condition: object, what: str, timeout: float = 30.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def mostly_remote(broker: BrokerProcess, topic: str) -> None:
    wait_until(lambda: len(local_segments(broker, topic)) <= 2, f"{topic}: local deletions")


def remote_segments(tiered: Tiered, topic: str) -> tuple[list[RemoteSegment], list[str]]:
    async def scanned() -> tuple[list[RemoteSegment], list[str]]:
        return await scan(tiered.store(), f"{topic}-")

    return asyncio.run(scanned())


def check_remote_once(tiered: Tiered, topic: str) -> list[RemoteSegment]:
    """Every copied segment once: no orphans, no overlaps, contiguous from offset 0 up to the
    local log's start."""
    found, orphans = remote_segments(tiered, topic)
    assert orphans == []
    found.sort(key=lambda s: s.base_offset)
    ranges = [(s.base_offset, s.end_offset) for s in found]
    assert ranges and ranges[0][0] == 0, ranges
    for (_, end), (base, _) in itertools.pairwise(ranges):
        assert base == end + 1, f"not contiguous or overlapping: {ranges}"
    local_start = int(local_segments(tiered.broker, topic)[0].split(".")[0])
    assert ranges[-1][1] + 1 >= local_start
    return found


def log_lines(broker: BrokerProcess, pattern: str) -> list[str]:
    return [line for line in broker.log().splitlines() if re.search(pattern, line)]


def check_log(broker: BrokerProcess) -> None:
    """No traceback, and every line a log record's (an S3 error body spans no lines)."""
    lines = broker.log().splitlines()
    assert not [line for line in lines if "Traceback" in line]
    assert not [line for line in lines if not re.match(r"\d{4}-\d\d-\d\d ", line)]


def test_store_down_keeps_every_local_segment_until_copies_catch_up(faults: Tiered) -> None:
    broker, proxy = faults.broker, faults.proxy
    proxy.down()
    topic = new_topic(broker, "down")
    values = records(topic)
    counts = []
    sender = producer(broker.bootstrap)
    for at in range(0, RECORDS, 100):
        for value in values[at : at + 100]:
            sender.produce(topic, value)
        assert sender.flush(30) == 0
        counts.append(len(local_segments(broker, topic)))
    for _ in range(10):  # several passes (200 ms apart) with nothing to copy to
        time.sleep(0.2)
        counts.append(len(local_segments(broker, topic)))
    assert counts == sorted(counts) and counts[-1] > 5, counts  # only ever more
    assert local_segments(broker, topic)[0] == f"{0:020d}.log"
    assert read_all(broker.bootstrap, topic, RECORDS) == values
    proxy.up()
    mostly_remote(broker, topic)
    assert read_all(broker.bootstrap, topic, RECORDS) == values  # now mostly remote
    check_remote_once(faults, topic)
    # one line when the failure began, one when it ended: not one per pass
    assert len(log_lines(broker, rf"{topic}-0: tiered storage pass (failed|still)")) == 1
    assert len(log_lines(broker, rf"{topic}-0: tiered storage pass works again")) == 1
    check_log(broker)


def test_500_on_a_third_of_requests_copies_every_segment_exactly_once(faults: Tiered) -> None:
    broker, proxy = faults.broker, faults.proxy
    topic = new_topic(broker, "flaky")
    share = proxy.fail(percent=33.0, seed=11)
    # a manifest PUT the store does while the client hears it failed, every retry of it
    ambiguous = proxy.fail("PUT", rf"/{topic}-[^/]+/0/.*\.manifest$", forward=True, limit=4)
    # a data file failing all its tries: the copy stops with other files already up
    partial = proxy.fail("PUT", rf"/{topic}-[^/]+/0/0*[1-9]\d*-.*\.index$", limit=4)
    values = records(topic)
    produce(broker.bootstrap, topic, values)
    mostly_remote(broker, topic)
    assert read_all(broker.bootstrap, topic, RECORDS) == values
    assert share.applied > 0 and ambiguous.applied == 4 and partial.applied == 4
    proxy.clear_rules()
    time.sleep(1.0)  # a few passes without faults: leftovers of failed copies go
    found = check_remote_once(faults, topic)
    assert len(found) >= len(values) * VALUE_BYTES // SEGMENT_BYTES - 2
    assert read_all(broker.bootstrap, topic, RECORDS) == values
    check_log(broker)


def test_a_slow_store_holds_neither_producers_nor_tail_readers(faults: Tiered) -> None:
    broker, proxy = faults.broker, faults.proxy
    topic = new_topic(broker, "slow")
    values = records(topic)
    produce(broker.bootstrap, topic, values)
    mostly_remote(broker, topic)
    delayed = proxy.delay(STORE_DELAY)
    # a consumer reading from the beginning: its fetches wait on the slow store
    remote_reader = consumer(broker.bootstrap, topic)
    stop = threading.Event()
    remote_got: list[bytes] = []

    def read_remote() -> None:
        while not stop.is_set():
            for message in remote_reader.consume(100, 0.2):
                if message.error() is None:
                    remote_got.append(message.value() or b"")

    thread = threading.Thread(target=read_remote, daemon=True)
    thread.start()
    tail = consumer(broker.bootstrap, topic, RECORDS)
    try:
        wait_until(lambda: proxy.in_flight > 0, "a remote read in flight", 10)
        sender = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        produce_ms: list[float] = []
        tail_ms: list[float] = []
        in_flight: list[int] = []
        for i in range(300):
            in_flight.append(proxy.in_flight)
            began = time.monotonic()
            sender.produce(topic, b"tail-%d" % i)
            assert sender.flush(10) == 0
            produce_ms.append((time.monotonic() - began) * 1000)
            message = None
            while message is None and time.monotonic() - began < 10:
                message = tail.poll(0.1)
            assert message is not None and message.error() is None
            assert message.value() == b"tail-%d" % i
            tail_ms.append((time.monotonic() - began) * 1000)
    finally:
        stop.set()
        thread.join(10)
        tail.close()
        remote_reader.close()
    produce_p99 = statistics.quantiles(produce_ms, n=100)[98]
    tail_p99 = statistics.quantiles(tail_ms, n=100)[98]
    print(
        f"\nslow store ({STORE_DELAY} s a response): produce p50 "
        f"{statistics.median(produce_ms):.1f} ms p99 {produce_p99:.1f} ms; produce-to-tail "
        f"p50 {statistics.median(tail_ms):.1f} ms p99 {tail_p99:.1f} ms; "
        f"{delayed.applied} store responses delayed, {len(remote_got)} records read remotely, "
        f"a store request in flight at {sum(map(bool, in_flight))} of {len(in_flight)} sends"
    )
    # the store was busy with the remote reader (and copies) while the sends went on
    assert delayed.applied > 0 and sum(map(bool, in_flight)) >= len(in_flight) // 2
    assert produce_p99 < STORE_DELAY * 1000
    assert tail_p99 < STORE_DELAY * 1000
    # a remote read is cut at remote.fetch.max.wait.ms: no records, no error, not the store's
    # delay (the consumer fetches again)
    began = time.monotonic()
    with KafkaWire(broker.bootstrap, timeout=30.0) as wire:
        assert fetch_batches(wire, topic, 0, 0) == (0, [])
    assert time.monotonic() - began < STORE_DELAY
    assert log_lines(broker, rf"{topic}-0: remote read failed .*no answer within")
    check_log(broker)


def test_500_on_every_read_is_a_retriable_error_then_reads_resume(faults: Tiered) -> None:
    broker, proxy = faults.broker, faults.proxy
    topic = new_topic(broker, "unreadable")
    values = records(topic)
    produce(broker.bootstrap, topic, values)
    mostly_remote(broker, topic)
    reads = proxy.fail("GET", rf"/{topic}-")
    with KafkaWire(broker.bootstrap, timeout=30.0) as wire:
        error, batches = fetch_batches(wire, topic, 0, 0)
    assert (error, batches) == (KAFKA_STORAGE_ERROR, [])
    reader = consumer(broker.bootstrap, topic)
    try:
        assert consume(reader, 1, timeout=2.0) == []  # retried by the client, not surfaced
        assert reads.applied > 1
        proxy.remove_rule(reads)
        assert consume(reader, RECORDS) == values
    finally:
        reader.close()
    assert len(log_lines(broker, rf"{topic}-0: remote read (failed|still)")) == 1
    assert len(log_lines(broker, rf"{topic}-0: remote read works again")) == 1
    check_log(broker)
