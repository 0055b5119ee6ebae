"""Tiered storage (KIP-405) end to end: a broker copying to a real S3 server (S3Proxy, the
tests' object store) and deleting local segments past local.retention.bytes; real clients
(confluent-kafka, kcat) read the topic from the beginning, byte for byte, most of it from the
object store, before and after a kill -9."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from lockgate.client.admin import Admin, ResourceType
from lockgate.client.share_consumer import ShareConsumer
from lockgate.storage.object_store import S3ObjectStore, S3Settings
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.object_store import S3ProxyServer
from tests.support.tiered import broker_settings

pytestmark = pytest.mark.compat

TOPIC = "history"
RECORDS = 3000
# a share consumer assigned within a second (Kafka's minimum heartbeat interval is 5 s)
SHARE_SETTINGS = {
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
}


@pytest.fixture(scope="module")
def tiered(
    s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, S3ProxyServer, str]]:
    prefix = f"tiered-{uuid.uuid4().hex[:8]}"
    data = tmp_path_factory.mktemp("tiered") / "data"
    broker = BrokerProcess(data, {**broker_settings(s3proxy, prefix), **SHARE_SETTINGS}).start()
    try:
        yield broker, s3proxy, prefix
    finally:
        broker.kill()


def produce(bootstrap: str) -> list[bytes]:
    values = [b"record-%05d-" % i + bytes(200) for i in range(RECORDS)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4096})
    for value in values:
        producer.produce(TOPIC, value)
    assert producer.flush(30) == 0
    return values


def wait_until_mostly_remote(data_dir: Path, topic: str = TOPIC, timeout: float = 60.0) -> None:
    """Until local retention has left at most two segments on disk."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list((data_dir / f"{topic}-0").glob("*.log"))
        if len(logs) <= 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"local segments were not deleted: {len(logs)} left")


def consume_all(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(error)
            if error is None:
                got.append(message.value() or b"")
    consumer.close()
    return got


def test_clients_read_a_mostly_remote_history(
    tiered: tuple[BrokerProcess, S3ProxyServer, str],
) -> None:
    broker, server, prefix = tiered
    create_topic(
        broker.bootstrap,
        TOPIC,
        1,
        {
            "remote.storage.enable": "true",
            "internal.segment.bytes": "65536",
            "local.retention.bytes": "1",
        },
    )
    values = produce(broker.bootstrap)
    wait_until_mostly_remote(broker.data_dir)
    assert consume_all(broker.bootstrap, RECORDS) == values
    # kcat (librdkafka's command-line client) too, from the beginning
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", TOPIC, "-p", "0", "-o", "beginning",
         "-e", "-q", "-f", "%s\\n"],
        capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.split(b"\n")[:-1] == values
    # a kill -9 and a restart: the remote log is rebuilt from the manifests
    broker.kill()
    broker.start()
    assert consume_all(broker.bootstrap, RECORDS) == values
    # the objects are there, under the topic's prefix
    settings = S3Settings(
        bucket=server.endpoint.bucket, endpoint=server.endpoint.endpoint, prefix=prefix,
        region=server.endpoint.region, access_key_id=server.endpoint.access_key,
        secret_access_key=server.endpoint.secret_key, allow_http=True,
    )  # fmt: skip

    async def listed() -> int:
        store = S3ObjectStore(settings)
        return len(await store.list(""))

    assert asyncio.run(listed()) > 0


def test_compacted_topics_refuse_remote_storage(
    tiered: tuple[BrokerProcess, S3ProxyServer, str],
) -> None:
    broker, _server, _prefix = tiered
    with pytest.raises(Exception, match=r"only supports topics with cleanup\.policy=delete"):
        create_topic(
            broker.bootstrap, "keyed", 1,
            {"remote.storage.enable": "true", "cleanup.policy": "compact"},
        )  # fmt: skip


def test_a_broker_without_tiered_storage_refuses_tiered_topics(
    tiered: tuple[BrokerProcess, S3ProxyServer, str],
) -> None:
    """As Kafka: turning tiered storage off on a broker that has tiered topics is refused at
    start (their local logs would never be trimmed, nor their remote part read)."""
    broker, _server, _prefix = tiered
    create_topic(broker.bootstrap, "tiered-too", 1, {"remote.storage.enable": "true"})
    broker.kill()
    plain = BrokerProcess(broker.data_dir, SHARE_SETTINGS)
    try:
        with pytest.raises(RuntimeError, match="delete all topics with the property"):
            plain.start()
    finally:
        plain.kill()  # (had it started, it would be left running)
    broker.start()  # (tiered again: the module's fixture stops it)


def test_a_share_group_reads_a_mostly_remote_history(
    tiered: tuple[BrokerProcess, S3ProxyServer, str],
) -> None:
    """A share group from the earliest offset of a tiered topic: its share partition starts
    in the object store, and every record is handed out once and accepted."""
    broker, _server, _prefix = tiered
    topic = "queue"
    create_topic(broker.bootstrap, topic, 1, {"remote.storage.enable": "true",
                                              "internal.segment.bytes": "16384",
                                              "local.retention.bytes": "1"})  # fmt: skip
    values = [b"job-%05d-" % i + bytes(200) for i in range(2000)]
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 4096}
    )  # fmt: skip  (small batches: many segments)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    wait_until_mostly_remote(broker.data_dir, topic)
    assert sorted((broker.data_dir / f"{topic}-0").glob("*.log"))[0].name != f"{0:020d}.log"

    async def consume() -> list[bytes]:
        async with Admin(broker.bootstrap) as admin:
            await admin.alter_configs(
                "queue-workers", set_configs={"share.auto.offset.reset": "earliest"},
                resource_type=ResourceType.GROUP,
            )  # fmt: skip
        got: list[bytes] = []
        async with ShareConsumer(broker.bootstrap, group_id="queue-workers") as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                got += [r.value or b"" for r in await consumer.poll(1000)]
            await consumer.commit()
        return got

    assert sorted(asyncio.run(consume())) == values
