"""Tiered storage (KIP-405) on a 3-broker cluster against one S3 server (S3Proxy): only the
leader copies, every replica's disk holds only a few segments (followers apply local
retention too), a leader killed (kill -9) is followed by one that copies on from its
manifests (contiguous, non-overlapping ranges), a consumer reads everything from the
beginning byte for byte, and a broker whose data directory was wiped starts its log at the
leader's local log start instead of fetching the tiered history."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from lockgate.storage.object_store import S3ObjectStore, S3Settings
from lockgate.tiered.layout import RemoteSegment
from lockgate.tiered.listing import scan
from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.object_store import S3ProxyServer
from tests.support.tiered import broker_settings

pytestmark = pytest.mark.compat

TOPIC = "tiered"
SEGMENT_BYTES = 16384
FIRST, SECOND = 1500, 500  # records before and after the leader's kill


def manifests(server: S3ProxyServer, prefix: str) -> list[RemoteSegment]:
    endpoint = server.endpoint
    settings = S3Settings(
        bucket=endpoint.bucket, endpoint=endpoint.endpoint, prefix=prefix,
        region=endpoint.region, access_key_id=endpoint.access_key,
        secret_access_key=endpoint.secret_key, allow_http=True,
    )  # fmt: skip

    async def listed() -> list[RemoteSegment]:
        found, _orphans = await scan(S3ObjectStore(settings), "")
        return sorted(found, key=lambda s: s.base_offset)

    return asyncio.run(listed())


def settled(server: S3ProxyServer, prefix: str) -> list[RemoteSegment]:
    """The manifests once two listings in a row agree: S3Proxy's filesystem backend leaves
    existing keys out of a listing taken while objects are written in the same directory
    (S3 lists consistently), and the leader may be copying meanwhile."""
    previous = manifests(server, prefix)
    for _ in range(50):
        time.sleep(0.3)
        current = manifests(server, prefix)
        if current == previous:
            return current
        previous = current
    raise AssertionError("the object store's listing never settled")


def local_logs(data_dir: Path) -> list[Path]:
    return sorted((data_dir / f"{TOPIC}-0").glob("*.log"))


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 4096, "enable.idempotence": True})  # fmt: skip
    for value in values:
        producer.produce(TOPIC, value)
        producer.poll(0)
    assert producer.flush(30) == 0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


def contiguous(segments: list[RemoteSegment]) -> bool:
    return all(a.next_offset == b.base_offset for a, b in itertools.pairwise(segments))


@pytest.mark.timeout(180)
def test_leaders_copy_followers_retain_and_a_wiped_broker_starts_at_the_local_start(
    etcd: EtcdCluster, s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    prefix = f"cluster-{uuid.uuid4().hex[:8]}"
    cluster = BrokerCluster(tmp_path_factory.mktemp("tiered"), etcd,
                            settings=broker_settings(s3proxy, prefix, 300))  # fmt: skip
    try:
        cluster.start()
        cluster.create_topic(TOPIC, partitions=1, replication=3, **{
            "remote.storage.enable": "true", "internal.segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "1"})  # fmt: skip
        values = [b"record-%05d-" % i + bytes(200) for i in range(FIRST + SECOND)]
        produce(cluster.bootstrap, values[:FIRST])
        brokers = cluster.brokers
        # every replica keeps only its last segments, followers as the leader
        wait_until(lambda: all(len(local_logs(b.data_dir)) <= 3 for b in brokers.values()),
                   "local retention on every replica")  # fmt: skip
        first = settled(s3proxy, prefix)
        old = cluster.partitions(TOPIC)[0].leader
        assert len(first) >= 10 and {s.broker_id for s in first} == {old}

        brokers[old].kill()
        new = cluster.wait_leader(TOPIC, 0, other_than=old).leader
        produce(cluster.bootstrap, values[FIRST:])
        wait_until(lambda: any(s.broker_id == new for s in manifests(s3proxy, prefix)),
                   "the new leader copying")  # fmt: skip
        live = [b for n, b in brokers.items() if n != old]
        wait_until(lambda: all(len(local_logs(b.data_dir)) <= 3 for b in live),
                   "local retention under the new leader")  # fmt: skip
        remote = settled(s3proxy, prefix)
        assert remote[0].base_offset == 0 and contiguous(remote)  # on from the old manifests
        assert {s.broker_id for s in remote} == {old, new}
        read = consume_all(cluster.bootstrap, TOPIC, 1, FIRST + SECOND, timeout=60)
        assert [v for _offset, v in read[0]] == values

        # the killed broker comes back with an empty disk: it does not fetch the history
        shutil.rmtree(brokers[old].data_dir)
        brokers[old].start()
        cluster.wait_full_isr(TOPIC)
        rebuilt = local_logs(brokers[old].data_dir)
        local_start = int(rebuilt[0].stem)
        # the end of the remote segment holding the leader's local start - 1 (its own start
        # or a little past it)
        ends = {s.next_offset for s in settled(s3proxy, prefix)}
        assert local_start > 0 and local_start in ends
        assert sum(p.stat().st_size for p in rebuilt) < 4 * SEGMENT_BYTES
        log_start = (brokers[old].data_dir / f"{TOPIC}-0" / "log-start-offset").read_text()
        assert int(log_start) == 0  # the tiered part stays part of its log
        # the whole history still reads from the beginning, through the leader
        read = consume_all(cluster.bootstrap, TOPIC, 1, FIRST + SECOND, timeout=60)
        assert [v for _offset, v in read[0]] == values
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
        time.sleep(0.2)  # (obstore's threads, before the interpreter shuts down)
