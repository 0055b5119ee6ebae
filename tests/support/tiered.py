# A tiered-storage (KIP-405) broker for the tests that read a mostly-remote history with real
# clients: its properties (S3Proxy as the object store, a pass every 200 ms), a history written
# with confluent-kafka (plain records with keys and headers, and committed and aborted
# transactions in between, every record's offset taken from its delivery report), and the
# wait until local retention has left only the active segment of each partition on disk. The
# records' offsets are the truth the readers are compared with: what is not a record's offset
# below the end is a transaction marker.
from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from lockgate.storage.object_store import S3Settings
from tests.support.broker import BrokerProcess
from tests.support.object_store import S3ProxyServer

TIMEOUT = 30.0
INTERVAL_MS = 200  # remote.log.manager.task.interval.ms

# Small segments (lockgate's test-only internal.segment.bytes) and a local retention of one
# byte: every rolled segment is deleted from the disk as soon as it is in the object store.
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "32768",
    "local.retention.bytes": "1",
}


def broker_settings(
    server: S3ProxyServer, prefix: str, interval_ms: int = INTERVAL_MS
) -> dict[str, str]:
    endpoint = server.endpoint
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": str(interval_ms),
        "rsm.config.s3.endpoint": endpoint.endpoint,
        "rsm.config.s3.bucket": endpoint.bucket,
        "rsm.config.s3.prefix": prefix,
        "rsm.config.s3.region": endpoint.region,
        "rsm.config.s3.access.key.id": endpoint.access_key,
        "rsm.config.s3.secret.access.key": endpoint.secret_key,
    }


def store_settings(server: S3ProxyServer, prefix: str) -> S3Settings:
    """A client's settings for the objects a broker with broker_settings(server, prefix)
    stores (the same keys)."""
    endpoint = server.endpoint
    return S3Settings(
        bucket=endpoint.bucket, endpoint=endpoint.endpoint, prefix=prefix,
        region=endpoint.region, access_key_id=endpoint.access_key,
        secret_access_key=endpoint.secret_key, allow_http=True,
    )  # fmt: skip


@contextmanager
def tiered_broker(server: S3ProxyServer, data_dir: Path, prefix: str) -> Iterator[BrokerProcess]:
    """A started broker copying to `server` under `prefix`, killed (kill -9) afterwards."""
    broker = BrokerProcess(data_dir, broker_settings(server, prefix)).start()
    try:
        yield broker
    finally:
        broker.kill()


Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Written:
    """One record as produced, where its delivery report put it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    aborted: bool


@dataclass(frozen=True, slots=True)
class History:
    topic: str
    partitions: int
    records: tuple[Written, ...]
    ends: dict[int, int]  # partition -> offset after its last record or marker

    def read_uncommitted(self, partition: int) -> list[Written]:
        return [r for r in self.records if r.partition == partition]

    def read_committed(self, partition: int) -> list[Written]:
        return [r for r in self.records if r.partition == partition and not r.aborted]

    def markers(self, partition: int) -> int:
        """Offsets below the end that hold no record: the transaction markers."""
        return self.ends[partition] - len(self.read_uncommitted(partition))


def _record(rng: random.Random, tag: str, index: int) -> tuple[bytes | None, bytes | None, Headers]:
    """A key (sometimes none), a value of 40-400 bytes (sometimes none or empty) and 0-2
    headers: byte-identity covers every field a reader hands back."""
    key = None if index % 7 == 0 else f"{tag}-key-{index % 50}".encode()
    roll = index % 53
    value = None if roll == 0 else b"" if roll == 1 else (
        f"{tag}-{index:05d}-".encode() + rng.randbytes(rng.randrange(40, 400))
    )  # fmt: skip
    headers = tuple((f"h{i}", rng.randbytes(rng.randrange(0, 12))) for i in range(index % 3))
    return key, value, headers


def write_history(
    bootstrap: str, topic: str, partitions: int, rounds: int = 10, plain: int = 120, txn: int = 40
) -> History:
    """`rounds` times: `plain` records from a plain producer, then a transaction of `txn`
    records over every partition (committed and aborted in turn; the first aborted one is
    larger than a segment in every partition, so that its records start in a segment before
    the one of its abort marker, where it is indexed); then `plain` more, so that the last
    markers are below the active segments too. Records go round the partitions."""
    rng = random.Random(36)
    written: list[Written] = []
    failures: list[KafkaError] = []

    def delivery(aborted: bool, key: bytes | None, value: bytes | None, headers: Headers) -> Any:
        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failures.append(error)
                return
            written.append(Written(message.partition(), message.offset(), key, value, headers,
                                   aborted))  # fmt: skip

        return delivered

    def send(producer: Producer, tag: str, count: int, aborted: bool) -> list[int]:
        """Sends `count` records; the bytes of their values in each partition."""
        sizes = [0] * partitions
        for index in range(count):
            key, value, headers = _record(rng, tag, index)
            sizes[index % partitions] += len(value or b"")
            producer.produce(
                topic, value=value, key=key, headers=list(headers), partition=index % partitions,
                on_delivery=delivery(aborted, key, value, headers),
            )  # fmt: skip
        # in the log before a commit or an abort (librdkafka purges what is unsent at abort)
        assert producer.flush(TIMEOUT) == 0
        return sizes

    plain_producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    txn_producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 5}
    )
    txn_producer.init_transactions(TIMEOUT)
    for round_ in range(rounds):
        send(plain_producer, f"plain{round_}", plain, aborted=False)
        commit = round_ % 2 == 0
        txn_producer.begin_transaction()
        tag = f"{'committed' if commit else 'aborted'}{round_}"
        if round_ == 1:
            sizes = send(txn_producer, tag, txn * 12, aborted=True)
            assert min(sizes) > int(TOPIC_CONFIG["internal.segment.bytes"])
        else:
            send(txn_producer, tag, txn, not commit)
        if commit:
            txn_producer.commit_transaction(TIMEOUT)
        else:
            txn_producer.abort_transaction(TIMEOUT)
    send(plain_producer, "tail", plain, aborted=False)
    assert failures == []
    written.sort(key=lambda r: (r.partition, r.offset))
    # the marker of the last transaction follows its records; the tail's records follow it
    ends = {p: max(r.offset for r in written if r.partition == p) + 1 for p in range(partitions)}
    return History(topic, partitions, tuple(written), ends)


def local_segments(data_dir: Path, topic: str, partition: int) -> int:
    return len(list((data_dir / f"{topic}-{partition}").glob("*.log")))


def local_start(data_dir: Path, topic: str, partition: int) -> int:
    """The base offset of the partition's one segment on disk (after wait_until_remote)."""
    (segment,) = (data_dir / f"{topic}-{partition}").glob("*.log")
    return int(segment.stem)


def wait_until_remote(data_dir: Path, history: History, timeout: float = 60.0) -> dict[int, int]:
    """Until local retention has left only the active segment of each partition on disk:
    every rolled segment is in the object store and gone from the disk. Returns each
    partition's local log start, checked to leave most of the partition remote."""
    deadline = time.monotonic() + timeout
    while True:
        left = {p: local_segments(data_dir, history.topic, p) for p in range(history.partitions)}
        if all(n == 1 for n in left.values()):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"local segments were not deleted: {left} left")
        time.sleep(0.1)
    starts = {p: local_start(data_dir, history.topic, p) for p in range(history.partitions)}
    assert all(starts[p] > history.ends[p] // 2 for p in starts), (starts, history.ends)
    return starts
