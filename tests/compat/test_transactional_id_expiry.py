"""transactional.id.expiration.ms end to end: an idle transactional id (confluent-kafka
producer) is removed by its coordinator, as kafka-python's admin client sees; one in use is
not; the removal survives a crash (its tombstone is replayed); the old producer's next
transaction fails (INVALID_PRODUCER_ID_MAPPING, as in Kafka) and a new producer with the same
id starts afresh and commits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError as KafkaPythonError

from tests.support.broker import BrokerProcess, running_broker
from tests.support.clients import confluent_consumer, create_topic

pytestmark = pytest.mark.compat

SETTINGS = {
    "transactional.id.expiration.ms": "2000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", SETTINGS) as process:
        yield process


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(20)
    return producer


def commit_one(producer: Producer, value: bytes) -> None:
    producer.begin_transaction()
    producer.produce("expiry", value, partition=0)
    producer.commit_transaction(20)


def listed(bootstrap: str) -> dict[str, str]:
    """transactional id → state, from every broker, retrying while coordinators load."""
    deadline = time.monotonic() + 20
    while True:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        try:
            return {
                listing.transactional_id: str(listing.state)
                for per_broker in admin.list_transactions().values()
                for listing in per_broker
            }
        except KafkaPythonError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            admin.close()


def test_an_idle_transactional_id_expires_and_stays_expired(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "expiry", 1)
    idle = transactional(broker.bootstrap, "idle-writer")
    commit_one(idle, b"first")
    busy = transactional(broker.bootstrap, "busy-writer")
    assert {"idle-writer", "busy-writer"} <= set(listed(broker.bootstrap))

    deadline = time.monotonic() + 20
    while "idle-writer" in listed(broker.bootstrap):
        assert time.monotonic() < deadline, "the idle id never expired"
        commit_one(busy, b"busy")  # keeps its id alive meanwhile
        time.sleep(0.3)
    assert "busy-writer" in listed(broker.bootstrap)
    assert "expired" in broker.log()

    # the old producer's id is gone: its next transaction is refused
    with pytest.raises(KafkaException) as raised:
        commit_one(idle, b"after expiry")
    assert "INVALID_PRODUCER_ID_MAPPING" in str(raised.value) or raised.value.args[0].fatal()

    broker.restart(clean=False)
    assert "idle-writer" not in listed(broker.bootstrap)

    fresh = transactional(broker.bootstrap, "idle-writer")
    commit_one(fresh, b"fresh start")
    # EndTxn is answered once PrepareCommit is logged; the markers and CompleteCommit follow
    deadline = time.monotonic() + 20
    while not listed(broker.bootstrap)["idle-writer"].endswith("COMPLETE_COMMIT"):
        assert time.monotonic() < deadline, "the commit never completed"
        time.sleep(0.1)
    consumer = confluent_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    consumer.subscribe(["expiry"])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while b"fresh start" not in values and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert b"first" in values and b"fresh start" in values and b"after expiry" not in values
