"""Differential tests: the same scripted requests to lockgate and to Apache Kafka, the answers
compared field by field (after leaving out what legitimately differs: node ids, topic ids,
producer ids, throttle times, messages). A scenario in KNOWN_DIFFERENCES must differ as
docs/deviations.md says; any other difference fails. The corpus starts with errors for bad
requests, the last stable offset, ListOffsets, the idempotence rules of Produce and the classic
transaction requests; it grows with each protocol change."""

from __future__ import annotations

import asyncio
import pprint
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate.client.admin_transactions import _decode_describe_transactions
from lockgate.client.cluster import Cluster
from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import build_batch
from tests.support.broker import running_broker
from tests.support.clients import create_topic
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

Scenario = Callable[[BrokerConnection, str], Awaitable[Any]]
SCENARIOS: dict[str, Scenario] = {}
# (scenario, observation) → why the answers differ; each one is in docs/deviations.md
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    ("idempotent_sequences", "retry of an older batch"): (
        "producer state keeps only the latest batch (KAFKA-12207): an older sequence within "
        "1000 is DUPLICATE_SEQUENCE_NUMBER, which clients treat as success"
    ),
    ("idempotent_sequences", "unknown producer mid-sequence"): (
        "UNKNOWN_PRODUCER_ID (KIP-360): without state the broker cannot tell a duplicate from "
        "a new batch, so the producer bumps its epoch"
    ),
}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


async def create(connection: BrokerConnection, topic: dict[str, Any]) -> tuple[int, ...]:
    body = {"name": "x", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": [], **topic}  # fmt: skip
    response = await connection.request(
        ApiKey.CREATE_TOPICS, {"topics": [body], "timeout_ms": 30_000, "validate_only": False}
    )
    return tuple(int(t.error_code) for t in response.topics)


@scenario
async def create_topics_errors(connection: BrokerConnection, bootstrap: str) -> Any:
    return [
        await create(connection, {"name": "diff-created", "num_partitions": 2}),
        await create(connection, {"name": "diff-created"}),  # TOPIC_ALREADY_EXISTS
        await create(connection, {"name": "diff-zero", "num_partitions": 0}),
        await create(connection, {"name": "diff-rf", "replication_factor": 3}),
        await create(connection, {"name": "bad name!"}),
        await create(
            connection, {"name": "diff-config", "configs": [{"name": "retention.ms", "value": "x"}]}
        ),
        await create(
            connection,
            {"name": "diff-unknown-config", "configs": [{"name": "no.such", "value": "1"}]},
        ),
    ]


@scenario
async def metadata_unknown_topic(connection: BrokerConnection, bootstrap: str) -> Any:
    response = await connection.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": "diff-missing", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    return [(t.name, int(t.error_code)) for t in response.topics]


async def list_offsets(
    connection: BrokerConnection, topic: str, partition: int, timestamp: int, isolation: int
) -> tuple[int, int]:
    response = await connection.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "current_leader_epoch": -1,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
            "timeout": 30_000,
        },
    )
    [answer] = response.topics[0].partitions
    return int(answer.error_code), int(answer.offset)


@scenario
async def last_stable_offset_and_list_offsets(connection: BrokerConnection, bootstrap: str) -> Any:
    await asyncio.to_thread(create_topic, bootstrap, "diff-lso", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "diff-lso"})
    await asyncio.to_thread(producer.init_transactions, 60)
    producer.begin_transaction()
    for n in range(3):
        producer.produce("diff-lso", b"%d" % n, partition=0, timestamp=1_000 + n)
    await asyncio.to_thread(producer.commit_transaction, 60)
    producer.begin_transaction()
    producer.produce("diff-lso", b"open", partition=0, timestamp=2_000)
    await asyncio.to_thread(producer.flush, 60)
    found = {
        "earliest": await list_offsets(connection, "diff-lso", 0, -2, 0),
        "latest uncommitted": await list_offsets(connection, "diff-lso", 0, -1, 0),
        "latest committed (LSO)": await list_offsets(connection, "diff-lso", 0, -1, 1),
        "by time 1001": await list_offsets(connection, "diff-lso", 0, 1_001, 0),
        "max timestamp": await list_offsets(connection, "diff-lso", 0, -3, 0),
        "unknown partition": (await list_offsets(connection, "diff-lso", 9, -1, 0))[0],
    }
    await asyncio.to_thread(producer.abort_transaction, 60)
    # the ABORT marker is written after EndTxn is answered: wait for it (both brokers)
    for _ in range(100):
        after = await list_offsets(connection, "diff-lso", 0, -1, 1)
        if after[1] == 6:
            break
        await asyncio.sleep(0.1)
    found["latest committed after the marker"] = after
    return found


@scenario
async def transaction_request_errors(connection: BrokerConnection, bootstrap: str) -> Any:
    init = await connection.request(
        ApiKey.INIT_PRODUCER_ID,
        {
            "transactional_id": "diff-timeout",
            "transaction_timeout": 2**31 - 1,  # above transaction.max.timeout.ms
            "producer_id": -1,
            "producer_epoch": -1,
            "enable2_pc": False,
            "keep_prepared_txn": False,
        },
    )
    # (kio cannot read the -1 start time of an unknown id: the admin client's own decoder)
    described = await connection.request(
        ApiKey.DESCRIBE_TRANSACTIONS,
        {"transactional_ids": ["diff-nobody"]},
        version=0,
        decoder=_decode_describe_transactions,
    )
    return {
        "InitProducerId timeout": int(init.error_code),
        "DescribeTransactions unknown": [int(code) for code, _ in described],
    }


async def produce(connection: BrokerConnection, topic: str, batch: bytes) -> tuple[int, int]:
    response = await connection.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
        version=9,  # names topics (v13 uses ids); both brokers serve it
    )
    [answer] = response.responses[0].partition_responses
    return int(answer.error_code), int(answer.base_offset)


@scenario
async def idempotent_sequences(connection: BrokerConnection, bootstrap: str) -> Any:
    await asyncio.to_thread(create_topic, bootstrap, "diff-idem", 1)
    init = await connection.request(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": None, "transaction_timeout": -1, "producer_id": -1,
         "producer_epoch": -1, "enable2_pc": False, "keep_prepared_txn": False},
    )  # fmt: skip
    pid, epoch = int(init.producer_id), int(init.producer_epoch)

    def batch(sequence: int, producer_epoch: int = epoch, producer_id: int = pid) -> bytes:
        records = [(None, b"%d" % (sequence + i)) for i in range(3)]
        return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=sequence, timestamp_ms=1_000)  # fmt: skip

    found = {}
    for name, data in (
        ("first", batch(0)),
        ("exact retry of the latest", batch(0)),
        ("gap", batch(5)),
        ("next", batch(3)),
        ("retry of an older batch", batch(0)),
        ("bumped epoch from 0", batch(0, epoch + 1)),
        ("older epoch", batch(6, epoch)),
        ("unknown producer mid-sequence", batch(7, 0, pid + 1_000)),
    ):
        found[name] = await produce(connection, "diff-idem", data)
    return found


@scenario
async def transaction_errors_classic(connection: BrokerConnection, bootstrap: str) -> Any:
    """AddPartitionsToTxn v3 and EndTxn v3 (before transaction version 2) misused, then used;
    a second later between steps, so that markers are written (no CONCURRENT_TRANSACTIONS)."""
    await asyncio.to_thread(create_topic, bootstrap, "diff-txn", 1)
    tid = "diff-txn-id"
    init = await connection.request(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
         "producer_epoch": -1, "enable2_pc": False, "keep_prepared_txn": False},
    )  # fmt: skip
    pid, epoch = int(init.producer_id), int(init.producer_epoch)

    async def add(producer_id: int, producer_epoch: int, transactional_id: str = tid) -> Any:
        response = await connection.request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {"v3_and_below_transactional_id": transactional_id,
             "v3_and_below_producer_id": producer_id,
             "v3_and_below_producer_epoch": producer_epoch,
             "v3_and_below_topics": [{"name": "diff-txn", "partitions": [0]}]},
            version=3,
        )  # fmt: skip
        return [int(p.partition_error_code) for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition]  # fmt: skip

    async def end(producer_id: int, producer_epoch: int, commit: bool) -> int:
        response = await connection.request(
            ApiKey.END_TXN,
            {"transactional_id": tid, "producer_id": producer_id,
             "producer_epoch": producer_epoch, "committed": commit},
            version=3,
        )  # fmt: skip
        await asyncio.sleep(1)
        return int(response.error_code)

    return {
        "add, unknown id": await add(pid, epoch, "diff-nobody"),
        "add, a later epoch": await add(pid, epoch + 1),
        "add, another producer id": await add(pid + 1, epoch),
        "end, nothing added": await end(pid, epoch, True),
        "add": await add(pid, epoch),
        "end, a later epoch": await end(pid, epoch + 1, True),
        "end, commit": await end(pid, epoch, True),
        "end, commit retried": await end(pid, epoch, True),
        "end, abort after the commit": await end(pid, epoch, False),
    }


def flatten(observed: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """(scenario, observation) → answer; a scenario that is not a dict is one observation."""
    flat: dict[tuple[str, str], Any] = {}
    for name, answer in observed.items():
        items = answer.items() if isinstance(answer, dict) else [("", answer)]
        flat.update({(name, key): value for key, value in items})
    return flat


async def observe(bootstrap: str) -> dict[str, Any]:
    async with Cluster(bootstrap) as cluster:
        [node] = cluster.metadata.brokers
        connection = await cluster.connection(node)
        return {name: await run(connection, bootstrap) for name, run in SCENARIOS.items()}


def test_lockgate_answers_as_apache_kafka(reference_kafka: ReferenceKafka, tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as lockgate:
        ours = asyncio.run(observe(lockgate.bootstrap))
    theirs = asyncio.run(observe(reference_kafka.bootstrap))
    ours_flat, theirs_flat = flatten(ours), flatten(theirs)
    differing = {key for key in ours_flat.keys() | theirs_flat.keys()
                 if ours_flat.get(key) != theirs_flat.get(key)}  # fmt: skip
    unexplained = {
        key: {"lockgate": ours_flat.get(key), "kafka": theirs_flat.get(key)}
        for key in differing - set(KNOWN_DIFFERENCES)
    }
    assert not unexplained, pprint.pformat(unexplained, width=100)
    assert differing == set(KNOWN_DIFFERENCES), "a known difference is gone: update the list"
