"""Client quotas through real clients. AlterClientQuotas/DescribeClientQuotas through lockgate's
admin client and `lockgate quotas` (kafka-python's admin has no client-quota calls; neither has
confluent-kafka's), persisted across a restart; a producer limited by producer_byte_rate for
its client id and a consumer limited by consumer_byte_rate are throttled, as confluent-kafka's
throttle callback and statistics and kafka-python's metrics report, and every record arrives
exactly once; a client without a quota is not throttled. Nothing here measures time: the
assertions are that throttling was reported, and what was delivered."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from lockgate.client.admin import Admin
from lockgate.client.admin_quotas import ClientQuotaAlteration, QuotaFilterComponent
from lockgate.client.errors import InvalidRequestError
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

RECORDS = 60
RECORD_BYTES = 500
RATE = 4000  # bytes per second: the records are several seconds' worth


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # two windows of a second: the first requests are already over the rate
    data = tmp_path_factory.mktemp("quotas") / "data"
    process = BrokerProcess(data, {"quota.window.num": "2"}).start()
    try:
        yield process
    finally:
        process.kill()


def set_quota(bootstrap: str, entity: dict[str, str | None], **quotas: float) -> None:
    async def run() -> None:
        async with Admin(bootstrap) as admin:
            await admin.alter_client_quotas([ClientQuotaAlteration(entity, quotas)])

    asyncio.run(run())


def describe(bootstrap: str, *components: QuotaFilterComponent, strict: bool = False) -> Any:
    async def run() -> Any:
        async with Admin(bootstrap) as admin:
            return await admin.describe_client_quotas(components, strict=strict)

    return asyncio.run(run())


def values(n: int = RECORDS) -> list[bytes]:
    return [f"{i:05d}".encode().ljust(RECORD_BYTES, b".") for i in range(n)]


def consume_all(
    bootstrap: str, topic: str, expected: int, client_id: str
) -> tuple[list[bytes], list[float]]:
    """Every value of the topic (read by a consumer with `client_id`) and the throttle times
    its throttle callback reported."""
    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 4 * RECORD_BYTES,
            "message.max.bytes": 4 * RECORD_BYTES,
            "max.partition.fetch.bytes": 4 * RECORD_BYTES,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(600):  # bounded
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.value() is not None:
                got.append(message.value() or b"")
            if len(got) >= expected:
                consumer.poll(0.2)  # a last throttle callback, if one is pending
                break
    finally:
        consumer.close()
    return got, throttles


def confluent_produce(bootstrap: str, topic: str, client_id: str) -> tuple[list[float], int]:
    """Produces the records; returns the throttle callback's times and the largest throttle
    the statistics reported."""
    throttles: list[float] = []
    stats_max = 0

    def on_stats(text: str) -> None:
        nonlocal stats_max
        for broker in json.loads(text)["brokers"].values():
            stats_max = max(stats_max, int(broker["throttle"]["max"]))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 0,
            "batch.num.messages": 4,
            "statistics.interval.ms": 100,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            "stats_cb": on_stats,
        }
    )
    for value in values():
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(120) == 0
    for _ in range(3):  # statistics cover the last responses
        producer.poll(0.2)
    return throttles, stats_max


def throttle_max(metrics: dict[str, dict[str, float]]) -> float:
    """kafka-python's largest throttle time: produce-/fetch-throttle-time-max in older
    releases, throttle-time-max of its network metrics in 3.x."""
    return max(
        (
            v
            for group in metrics.values()
            for k, v in group.items()
            if k.endswith("throttle-time-max")
        ),
        default=0.0,
    )


def new_topic(bootstrap: str) -> str:
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    return topic


def test_admin_sets_describes_and_removes_quotas(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    set_quota(bootstrap, {"user": "alice", "client-id": None}, producer_byte_rate=1024)
    set_quota(bootstrap, {"user": None}, request_percentage=50.5)
    found = describe(bootstrap, QuotaFilterComponent.exact("user", "alice"))
    assert [(e.entity, e.values) for e in found] == [
        ({"user": "alice", "client-id": None}, {"producer_byte_rate": 1024.0})
    ]
    defaults = describe(bootstrap, QuotaFilterComponent.default("user"), strict=True)
    assert [e.values for e in defaults] == [{"request_percentage": 50.5}]

    async def remove() -> None:
        async with Admin(bootstrap) as admin:
            await admin.alter_client_quotas(
                [
                    ClientQuotaAlteration(
                        {"user": "alice", "client-id": None}, remove_quotas=["producer_byte_rate"]
                    ),
                    ClientQuotaAlteration({"user": None}, remove_quotas=["request_percentage"]),
                ]
            )

    asyncio.run(remove())
    assert describe(bootstrap, QuotaFilterComponent.any("user")) == []


def test_admin_refuses_what_kafka_refuses(broker: BrokerProcess) -> None:
    for quotas in (
        {"producer_byte_rte": 10.0},
        {"producer_byte_rate": 0.5},
        {"consumer_byte_rate": -1.0},
    ):
        with pytest.raises(InvalidRequestError):
            set_quota(broker.bootstrap, {"client-id": "refused"}, **quotas)
    assert describe(broker.bootstrap, QuotaFilterComponent.exact("client-id", "refused")) == []


def lockgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "quotas", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_alters_and_describes(broker: BrokerProcess) -> None:
    server = ["--bootstrap-server", broker.bootstrap]
    rates = "producer_byte_rate=2048,consumer_byte_rate=4096"
    changed = lockgate("alter", *server, "--client", "cli-app", "--add-config", rates)
    assert changed.returncode == 0, changed.stderr
    shown = lockgate("describe", *server, "--client", "cli-app")
    assert shown.returncode == 0, shown.stderr
    assert "client-id 'cli-app'" in shown.stdout
    assert "consumer_byte_rate=4096,producer_byte_rate=2048" in shown.stdout
    removed = lockgate(
        "alter", *server, "--client", "cli-app", "--delete-config", "consumer_byte_rate"
    )
    assert removed.returncode == 0, removed.stderr
    listed = json.loads(lockgate("describe", *server, "--client", "cli-app", "--json").stdout)
    assert listed == [
        {"entity": {"client-id": "cli-app"}, "quotas": {"producer_byte_rate": 2048.0}}
    ]
    refused = lockgate(
        "alter", *server, "--user-defaults", "--add-config", "controller_mutation_rate=5"
    )
    assert refused.returncode != 0 and "controller_mutation_rate" in refused.stderr


def test_quotas_survive_a_restart(broker_process: BrokerProcess) -> None:
    set_quota(broker_process.bootstrap, {"client-id": "durable"}, consumer_byte_rate=777)
    broker_process.restart(clean=False)
    found = describe(broker_process.bootstrap, QuotaFilterComponent.exact("client-id", "durable"))
    assert [e.values for e in found] == [{"consumer_byte_rate": 777.0}]


def test_confluent_producer_over_its_client_quota_is_throttled(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    set_quota(broker.bootstrap, {"client-id": "slow-producer"}, producer_byte_rate=RATE)
    throttles, stats_max = confluent_produce(broker.bootstrap, topic, "slow-producer")
    assert throttles and max(throttles) > 0
    assert stats_max > 0
    got, _ = consume_all(broker.bootstrap, topic, RECORDS, "reader")
    assert sorted(got) == values()  # each record once


def test_kafka_python_producer_reports_produce_throttle_time(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    set_quota(broker.bootstrap, {"client-id": "kp-slow-producer"}, producer_byte_rate=RATE)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        client_id="kp-slow-producer",
        linger_ms=0,
        batch_size=2048,
    )
    try:
        for value in values():
            producer.send(topic, value)
        producer.flush(120)
        metrics = producer.metrics()
    finally:
        producer.close(10)
    assert throttle_max(metrics) > 0
    got, _ = consume_all(broker.bootstrap, topic, RECORDS, "reader")
    assert sorted(got) == values()


def test_confluent_consumer_over_its_client_quota_is_throttled(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, "unlimited-writer")
    set_quota(broker.bootstrap, {"client-id": "slow-consumer"}, consumer_byte_rate=RATE)
    got, throttles = consume_all(broker.bootstrap, topic, RECORDS, "slow-consumer")
    assert sorted(got) == values()
    assert throttles and max(throttles) > 0


def test_kafka_python_consumer_reports_fetch_throttle_time(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, "unlimited-writer")
    set_quota(broker.bootstrap, {"client-id": "kp-slow-consumer"}, consumer_byte_rate=RATE)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        client_id="kp-slow-consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * RECORD_BYTES,
        fetch_max_bytes=4 * RECORD_BYTES,
        consumer_timeout_ms=60_000,
    )
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) >= RECORDS:
                break
        metrics = consumer.metrics()
    finally:
        consumer.close()
    assert sorted(got) == values()
    assert throttle_max(metrics) > 0


def test_a_client_without_a_quota_is_not_throttled(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    set_quota(
        broker.bootstrap,
        {"client-id": "someone-else"},
        producer_byte_rate=RATE,
        consumer_byte_rate=RATE,
    )
    throttles, stats_max = confluent_produce(broker.bootstrap, topic, "free-producer")
    assert throttles == [] and stats_max == 0
    got, consumer_throttles = consume_all(broker.bootstrap, topic, RECORDS, "free-consumer")
    assert sorted(got) == values()
    assert consumer_throttles == []
