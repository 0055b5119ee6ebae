# client/admin_transactions.py — the admin side of transactions, as Kafka's Admin offers it:
# list (every broker), describe (each id's coordinator), describe producers (each partition's
# leader), abort a hanging transaction (WriteTxnMarkers to the leader), force-terminate a
# transactional id (KIP-939: InitProducerId with -1/-1, keep_prepared_txn=false), and finding
# hanging transactions the way kafka-transactions.sh find-hanging does.
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    TransactionalIdNotFoundError,
    UnsupportedVersionError,
    error_for,
    raise_for,
)
from lockgate.protocol.api import ApiKey
from lockgate.protocol.frame import MalformedFrame
from lockgate.protocol.wire import BodyReader

TRANSACTION_KEY_TYPE = 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1
FIRST_DURATION_FILTER = 1  # ListTransactions v1 (KIP-994)
# Transaction states in which the coordinator still counts a partition as part of the open
# transaction; a producer writing there under any other state is hanging.
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
# Errors after which InitProducerId is simply repeated (the coordinator is busy finishing the
# previous transaction, moving, or loading its log).
RETRIABLE_INIT = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
RETRY_BACKOFF_S = 0.1
DEFAULT_FORCE_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None when no transaction is open
    partitions: tuple[TopicPartition, ...]

    def duration_ms(self, now_ms: int) -> int | None:
        return None if self.start_time_ms is None else max(0, now_ms - self.start_time_ms)


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int | None  # None when the producer has no open transaction


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    topic_partition: TopicPartition
    producer: ProducerState
    reason: str  # why it counts as hanging, for the operator


async def list_transactions(
    cluster: Cluster,
    *,
    states: Collection[str] = (),
    producer_ids: Collection[int] = (),
    running_longer_than_ms: int | None = None,
) -> list[TransactionListing]:
    """Every transactional id known to any coordinator, optionally filtered by state name,
    producer id, and (ListTransactions v1+) how long the open transaction has run."""
    await cluster.refresh_metadata(())
    listings: list[TransactionListing] = []
    for node_id in sorted(cluster.metadata.brokers):
        connection = await cluster.connection(node_id)
        if running_longer_than_ms is not None:
            supported = connection.version_range(ApiKey.LIST_TRANSACTIONS)
            if supported is None or supported.max < FIRST_DURATION_FILTER:
                raise UnsupportedVersionError(
                    f"broker {node_id} cannot filter transactions by duration (ListTransactions v1)"
                )
        response = await connection.request(
            ApiKey.LIST_TRANSACTIONS,
            {
                "state_filters": sorted(states),
                "producer_id_filters": sorted(producer_ids),
                "duration_filter": -1 if running_longer_than_ms is None else running_longer_than_ms,
            },
        )
        raise_for(response.error_code, None, f"ListTransactions on broker {node_id}")
        listings.extend(
            TransactionListing(
                str(state.transactional_id),
                int(state.producer_id),
                str(state.transaction_state),
                node_id,
            )
            for state in response.transaction_states
        )
    return sorted(listings, key=lambda listing: listing.transactional_id)


async def describe_transactions(
    cluster: Cluster, transactional_ids: Iterable[str]
) -> dict[str, TransactionDescription]:
    """Each id's state from its coordinator; raises the first id's error
    (TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows)."""
    wanted = list(dict.fromkeys(transactional_ids))
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for transactional_id in wanted:
        node_id = await cluster.find_coordinator(TRANSACTION_KEY_TYPE, transactional_id)
        by_coordinator[node_id].append(transactional_id)
    found: dict[str, TransactionDescription] = {}
    for node_id, ids in by_coordinator.items():
        connection = await cluster.connection(node_id)
        states = await connection.request(
            ApiKey.DESCRIBE_TRANSACTIONS,
            {"transactional_ids": ids},
            version=0,
            decoder=_decode_describe_transactions,
        )
        for error_code, description in states:
            raise_for(error_code, None, f"transactional id {description.transactional_id!r}")
            found[description.transactional_id] = _at(description, node_id)
    return {transactional_id: found[transactional_id] for transactional_id in wanted}


def _at(description: TransactionDescription, node_id: int) -> TransactionDescription:
    return TransactionDescription(
        description.transactional_id,
        node_id,
        description.state,
        description.producer_id,
        description.producer_epoch,
        description.timeout_ms,
        description.start_time_ms,
        description.partitions,
    )


def _decode_describe_transactions(
    payload: bytes, offset: int
) -> list[tuple[int, TransactionDescription]]:
    """DescribeTransactions v0 by hand: kio reads TransactionStartTimeMs as a timestamp and
    cannot represent the -1 that Kafka sends when no transaction is open."""
    reader = BodyReader(payload, offset, flexible=True)
    reader.int32()  # throttle time
    states = []
    for _ in range(reader.array_length()):
        error_code = reader.int16()
        transactional_id = reader.string()
        state = reader.string()
        timeout_ms = reader.int32()
        start_time_ms = reader.int64()
        producer_id = reader.int64()
        producer_epoch = reader.int16()
        partitions: list[TopicPartition] = []
        for _ in range(reader.array_length()):
            topic = reader.string()
            if topic is None:
                raise MalformedFrame("null topic name in DescribeTransactions")
            partitions.extend(
                TopicPartition(topic, reader.int32()) for _ in range(reader.array_length())
            )
            reader.tagged_fields()
        reader.tagged_fields()
        if transactional_id is None:
            raise MalformedFrame("null transactional id in DescribeTransactions")
        states.append(
            (
                error_code,
                TransactionDescription(
                    transactional_id,
                    -1,
                    state or "",
                    producer_id,
                    producer_epoch,
                    timeout_ms,
                    None if start_time_ms < 0 else start_time_ms,
                    tuple(partitions),
                ),
            )
        )
    reader.tagged_fields()
    return states


async def describe_producers(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, list[ProducerState]]:
    """The producer state each partition's leader holds (KAFKA-12207: latest sequence only)."""
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for topic_partition in dict.fromkeys(partitions):
        info = await cluster.partition(topic_partition)
        by_leader[info.leader_id].append(topic_partition)
    result: dict[TopicPartition, list[ProducerState]] = {}
    for leader, wanted in by_leader.items():
        connection = await cluster.connection(leader)
        topics: dict[str, list[int]] = defaultdict(list)
        for topic_partition in wanted:
            topics[topic_partition.topic].append(topic_partition.partition)
        response = await connection.request(
            ApiKey.DESCRIBE_PRODUCERS,
            {"topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()]},
        )
        for topic in response.topics:
            for partition in topic.partitions:
                topic_partition = TopicPartition(topic.name, partition.partition_index)
                raise_for(partition.error_code, partition.error_message, str(topic_partition))
                result[topic_partition] = [_producer(p) for p in partition.active_producers]
    return {tp: result[tp] for tp in dict.fromkeys(partitions) if tp in result}


def _producer(entry: Any) -> ProducerState:
    start = int(entry.current_txn_start_offset)
    return ProducerState(
        int(entry.producer_id),
        int(entry.producer_epoch),
        int(entry.last_sequence),
        int(entry.last_timestamp),
        int(entry.coordinator_epoch),
        None if start < 0 else start,
    )


async def abort_transaction(
    cluster: Cluster,
    topic_partition: TopicPartition,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    """Writes an abort marker for one producer's open transaction on one partition, like
    Kafka's Admin.abortTransaction: the last resort for a hanging transaction whose
    coordinator has forgotten it. The epoch and coordinator epoch come from describe_producers."""
    connection, _info = await cluster.leader_connection(topic_partition)
    response = await connection.request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": False,
                    "topics": [
                        {
                            "name": topic_partition.topic,
                            "partition_indexes": [topic_partition.partition],
                        }
                    ],
                    "coordinator_epoch": coordinator_epoch,
                    "transaction_version": 0,
                }
            ]
        },
    )
    for marker in response.markers:
        for topic in marker.topics:
            for partition in topic.partitions:
                raise_for(partition.error_code, None, f"abort marker on {topic_partition}")


async def force_terminate_transaction(
    cluster: Cluster, transactional_id: str, *, timeout_ms: int = DEFAULT_FORCE_TIMEOUT_MS
) -> None:
    """KIP-939 forceTerminateTransaction: InitProducerId with producer id/epoch -1/-1 and
    keep_prepared_txn=false fences every producer of the id and aborts its open transaction,
    prepared or not. CONCURRENT_TRANSACTIONS (markers of a completion still being written) and
    coordinator moves are retried until `timeout_ms`."""
    deadline = time.monotonic() + timeout_ms / 1000
    last: KafkaError | None = None
    while True:
        try:
            node_id = await cluster.find_coordinator(TRANSACTION_KEY_TYPE, transactional_id)
            connection = await cluster.connection(node_id)
            response = await connection.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": transactional_id,
                    "transaction_timeout": timeout_ms,
                    "producer_id": NO_PRODUCER_ID,
                    "producer_epoch": NO_EPOCH,
                    "enable2_pc": False,
                    "keep_prepared_txn": False,
                },
            )
            if response.error_code == ErrorCode.none:
                return
            error = error_for(response.error_code, None, f"transactional id {transactional_id!r}")
            if response.error_code not in RETRIABLE_INIT:
                raise error
            last = error
        except KafkaError as exc:
            if exc.code not in RETRIABLE_INIT:
                raise
            last = exc
        if time.monotonic() + RETRY_BACKOFF_S > deadline:
            raise KafkaTimeoutError(
                f"force-terminating {transactional_id!r} did not finish in {timeout_ms} ms: {last}"
            )
        await asyncio.sleep(RETRY_BACKOFF_S)


async def find_hanging_transactions(
    cluster: Cluster,
    partitions: Iterable[TopicPartition],
    *,
    max_transaction_timeout_ms: int,
    now_ms: int | None = None,
) -> list[HangingTransaction]:
    """Producers with an open transaction on a partition older than the largest transaction
    timeout in use, whose coordinator does not count that partition in an open transaction of
    that producer (kafka-transactions.sh find-hanging). Such a transaction holds back the
    partition's last stable offset forever; abort_transaction ends it."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    candidates = [
        (topic_partition, producer)
        for topic_partition, producers in (await describe_producers(cluster, partitions)).items()
        for producer in producers
        if producer.current_txn_start_offset is not None
        and now - producer.last_timestamp > max_transaction_timeout_ms
    ]
    if not candidates:
        return []
    listings = await list_transactions(
        cluster, producer_ids={producer.producer_id for _, producer in candidates}
    )
    ids_by_producer: dict[int, list[str]] = defaultdict(list)
    for listing in listings:
        ids_by_producer[listing.producer_id].append(listing.transactional_id)
    descriptions: dict[str, TransactionDescription] = {}
    for transactional_id in {t for ids in ids_by_producer.values() for t in ids}:
        try:
            descriptions.update(await describe_transactions(cluster, [transactional_id]))
        except TransactionalIdNotFoundError:
            continue  # expired between the two calls: it cannot be holding the partition
    hanging = []
    for topic_partition, producer in candidates:
        reason = _hanging_reason(
            topic_partition,
            producer,
            [
                descriptions[t]
                for t in ids_by_producer.get(producer.producer_id, ())
                if t in descriptions
            ],
        )
        if reason is not None:
            hanging.append(HangingTransaction(topic_partition, producer, reason))
    return hanging


def _hanging_reason(
    topic_partition: TopicPartition,
    producer: ProducerState,
    descriptions: list[TransactionDescription],
) -> str | None:
    if not descriptions:
        return "no coordinator knows a transaction of this producer id"
    for description in descriptions:
        if (
            description.producer_id == producer.producer_id
            and description.state in OPEN_STATES
            and topic_partition in description.partitions
        ):
            return None
    states = ", ".join(f"{d.transactional_id} {d.state}" for d in descriptions)
    return f"the coordinator's transaction does not include this partition ({states})"
