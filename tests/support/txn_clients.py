# Transactional producers of three third-party clients (confluent-kafka, kafka-python,
# aiokafka) running a plan of transactions, and the records they write: unique values, so that
# "exactly once" is a comparison of per-partition lists. Shared by the single-node and the
# cluster tests. Producers flush before aborting: librdkafka purges unsent messages on abort,
# and the aborted records must really be in the log for read_committed checks to mean anything.
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer

PARTITIONS = 3
TIMEOUT = 30.0

# (topic, partition, value)
Record = tuple[str, int, str]
# (topic, partition) -> values in offset order
Log = dict[tuple[str, int], list[str]]


def records(tag: str, topics: tuple[str, ...], per_partition: int = 3) -> list[Record]:
    """Unique values spread over every partition of every topic (partitions interleaved, so a
    transaction adds them in a mixed order)."""
    return [
        (topic, partition, f"{tag}-{topic}-{partition}-{index}")
        for index in range(per_partition)
        for topic in topics
        for partition in range(PARTITIONS)
    ]


def as_log(produced: list[Record]) -> Log:
    """What a consumer must read: the records of each partition in the order produced."""
    out: Log = {}
    for topic, partition, value in produced:
        out.setdefault((topic, partition), []).append(value)
    return out


# -- transactional producers -------------------------------------------------------------------

# A plan is a list of transactions: (records, commit?).
Plan = list[tuple[list[Record], bool]]


def confluent_transactions(bootstrap: str, transactional_id: str, plan: Plan) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    producer.init_transactions(TIMEOUT)
    for batch, commit in plan:
        producer.begin_transaction()
        for topic, partition, value in batch:
            producer.produce(
                topic, value=value.encode(), partition=partition, on_delivery=delivered
            )
        assert producer.flush(TIMEOUT) == 0
        assert failures == []
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)


def kafka_python_transactions(bootstrap: str, transactional_id: str, plan: Plan) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    try:
        producer.init_transactions()
        for batch, commit in plan:
            producer.begin_transaction()
            futures = [
                producer.send(topic, value=value.encode(), partition=partition)
                for topic, partition, value in batch
            ]
            producer.flush(TIMEOUT)
            for future in futures:
                future.get(TIMEOUT)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=5)


def aiokafka_transactions(bootstrap: str, transactional_id: str, plan: Plan) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await asyncio.wait_for(producer.start(), TIMEOUT)
        try:
            for batch, commit in plan:
                await producer.begin_transaction()
                sent = [
                    await producer.send(topic, value=value.encode(), partition=partition)
                    for topic, partition, value in batch
                ]
                await asyncio.wait_for(asyncio.gather(*sent), TIMEOUT)
                if commit:
                    await asyncio.wait_for(producer.commit_transaction(), TIMEOUT)
                else:
                    await asyncio.wait_for(producer.abort_transaction(), TIMEOUT)
        finally:
            await asyncio.wait_for(producer.stop(), TIMEOUT)

    asyncio.run(run())


PRODUCERS: dict[str, Callable[[str, str, Plan], None]] = {
    "confluent-kafka": confluent_transactions,
    "kafka-python": kafka_python_transactions,
    "aiokafka": aiokafka_transactions,
}
