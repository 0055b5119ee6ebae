"""Differential tests: the same scripted requests to lockgate and to Apache Kafka, the answers
compared field by field (after leaving out what legitimately differs: node ids, topic ids,
producer ids, throttle times, messages). A scenario in KNOWN_DIFFERENCES must differ as
docs/deviations.md says; any other difference fails. The corpus: errors for bad requests,
Metadata, the last stable offset and ListOffsets, the idempotence rules of Produce, the
classic transaction requests and transaction version 2 (Produce's implicit add, EndTxn's
epoch bump, delayed and retried requests), transactional offsets (KIP-447, require_stable),
aborted reads (Fetch's aborted transactions and LSO), a classic group's requests (its
membership checks with unknown and foreign instance ids too), OffsetCommit into a group that
does not exist, a consumer-protocol member's commits with older member epochs (KIP-1251) and
after its group is gone, a static member leaving while it revokes, and a share group's
membership (KIP-932); it grows with each protocol change."""

from __future__ import annotations

import asyncio
import functools
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
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    control_type,
    parse_header,
    read_records,
)
from tests.support.broker import running_broker
from tests.support.clients import create_topic
from tests.support.consumer_group_raw import (
    PARTITIONS,
    RawMember,
    beat_until,
    kip1251_observations,
    static_leave_observations,
    topic_id,
)
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

Scenario = Callable[[BrokerConnection, str], Awaitable[Any]]
SCENARIOS: dict[str, Scenario] = {}
# (scenario, observation) → why the answers differ; each one is in docs/deviations.md
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    ("idempotent_sequences", "unknown producer mid-sequence"): (
        "UNKNOWN_PRODUCER_ID (KIP-360): without state the broker cannot tell a duplicate from "
        "a new batch, so the producer bumps its epoch"
    ),
}


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS
RETRIABLE = (14, 15, 51)


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


async def create_ready(connection: BrokerConnection, bootstrap: str, topic: str) -> None:
    """Creates a 1-partition topic and waits until its leader serves it: Kafka may answer
    CreateTopics before it leads the partition (NOT_LEADER_OR_FOLLOWER meanwhile)."""
    await asyncio.to_thread(create_topic, bootstrap, topic, 1)
    for _ in range(100):
        if (await list_offsets(connection, topic, 0, -1, 0))[0] == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{topic}-0 has no leader after 10 s")


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
    await create_ready(connection, bootstrap, "diff-lso")
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
        # no tiered storage on either broker: -4 is the log start, -5 has no offset (-1)
        "earliest local": await list_offsets(connection, "diff-lso", 0, -4, 0),
        "latest tiered": await list_offsets(connection, "diff-lso", 0, -5, 0),
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
    await create_ready(connection, bootstrap, "diff-idem")
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
    await create_ready(connection, bootstrap, "diff-txn")
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


async def find_coordinator(connection: BrokerConnection, key: str, key_type: int) -> None:
    """Waits, as clients do, until the broker coordinates `key` (a group: 0, a transactional
    id: 1): Apache Kafka creates its internal topic on the first FindCoordinator and answers
    NOT_COORDINATOR to coordinator requests before that."""
    for _ in range(100):
        response = await connection.request(
            ApiKey.FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": [key]}, version=4
        )
        if response.coordinators[0].error_code == 0:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"no coordinator for {key!r}")


async def init_producer(connection: BrokerConnection, transactional_id: str) -> tuple[int, int]:
    await find_coordinator(connection, transactional_id, 1)
    for _ in range(100):  # retried while the coordinator loads, as clients do
        response = await connection.request(
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": transactional_id, "transaction_timeout": 60_000,
             "producer_id": -1, "producer_epoch": -1, "enable2_pc": False,
             "keep_prepared_txn": False},
        )  # fmt: skip
        if response.error_code not in RETRIABLE:
            break
        await asyncio.sleep(0.2)
    assert response.error_code == 0, response
    return int(response.producer_id), int(response.producer_epoch)


async def end_txn_v5(
    connection: BrokerConnection, tid: str, pid: int, epoch: int, commit: bool
) -> tuple[int, int | None]:
    """EndTxn v5 (transaction version 2): the error and how far the answer moved the epoch."""
    response = await connection.request(
        ApiKey.END_TXN,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
         "committed": commit},
        version=5,
    )  # fmt: skip
    await asyncio.sleep(1)  # the markers are written after the answer
    moved = int(response.producer_epoch) - epoch if response.producer_id == pid else None
    return int(response.error_code), moved


@scenario
async def transactions_tv2(connection: BrokerConnection, bootstrap: str) -> Any:
    """Transaction version 2: Produce v12 adds the partition itself, EndTxn v5 bumps the epoch;
    a retried EndTxn, a delayed Produce of the ended transaction and a stale or future epoch."""
    await create_ready(connection, bootstrap, "diff-tv2")
    tid = "diff-tv2-id"
    pid, epoch = await init_producer(connection, tid)

    async def send(producer_epoch: int, sequence: int) -> int:
        batch = build_batch([(None, b"v")], producer_id=pid, producer_epoch=producer_epoch,
                            base_sequence=sequence, attributes=TRANSACTIONAL_BIT)  # fmt: skip
        data = [{"name": "diff-tv2", "partition_data": [{"index": 0, "records": batch}]}]
        response = await connection.request(
            ApiKey.PRODUCE,
            {"transactional_id": tid, "acks": -1, "timeout": 30_000,
             "topic_data": data},
            version=12,
        )  # fmt: skip
        return int(response.responses[0].partition_responses[0].error_code)

    found: dict[str, Any] = {
        "end with nothing sent": await end_txn_v5(connection, tid, pid, epoch, True)
    }
    epoch += found["end with nothing sent"][1] or 0
    found["produce"] = await send(epoch, 0)
    found["commit"] = await end_txn_v5(connection, tid, pid, epoch, True)
    ended, epoch = epoch, epoch + (found["commit"][1] or 0)
    found["commit retried"] = await end_txn_v5(connection, tid, pid, ended, True)
    found["abort with the ended epoch"] = await end_txn_v5(connection, tid, pid, ended, False)
    found["delayed produce of the ended transaction"] = await send(ended, 1)
    found["produce in the next"] = await send(epoch, 0)
    found["end with a future epoch"] = await end_txn_v5(connection, tid, pid, epoch + 5, False)
    found["abort"] = await end_txn_v5(connection, tid, pid, epoch, False)
    return found


@scenario
async def transactional_offsets(connection: BrokerConnection, bootstrap: str) -> Any:
    """AddOffsetsToTxn and TxnOffsetCommit (v5, transaction version 2), the pending offset
    under OffsetFetch with and without require_stable, a stale epoch, an unknown member of a
    group that has none, a group that does not exist (a generation, then generation -1 with a
    member id, which creates it), and the offset after the commit."""
    await create_ready(connection, bootstrap, "diff-tog")
    tid, group, absent = "diff-tog-id", "diff-tog-group", "diff-tog-absent"
    pid, epoch = await init_producer(connection, tid)
    await find_coordinator(connection, group, 0)

    async def add_offsets(producer_epoch: int, group_id: str = group) -> int:
        response = await connection.request(
            ApiKey.ADD_OFFSETS_TO_TXN,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": producer_epoch,
             "group_id": group_id},
            version=4,
        )  # fmt: skip
        return int(response.error_code)

    async def commit_offset(
        producer_epoch: int, offset: int, generation: int = -1, member: str = "",
        version: int = 5, group_id: str = group,
    ) -> list[int]:  # fmt: skip
        response = await connection.request(
            ApiKey.TXN_OFFSET_COMMIT,
            {"transactional_id": tid, "group_id": group_id, "producer_id": pid,
             "producer_epoch": producer_epoch, "generation_id": generation, "member_id": member,
             "group_instance_id": None,
             "topics": [{"name": "diff-tog", "partitions": [
                 {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                  "committed_metadata": "m"}]}]},
            version=version,
        )  # fmt: skip
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    async def fetch_offset(require_stable: bool) -> tuple[int, list[tuple[int, int, str | None]]]:
        response = await connection.request(
            ApiKey.OFFSET_FETCH,
            {"require_stable": require_stable, "groups": [
                {"group_id": group, "topics": [{"name": "diff-tog", "partition_indexes": [0]}]}]},
            version=8,
        )  # fmt: skip
        [answer] = response.groups
        return int(answer.error_code), [
            (int(p.error_code), int(p.committed_offset), p.metadata)
            for t in answer.topics for p in t.partitions
        ]  # fmt: skip

    return {
        "v3 offsets before AddOffsetsToTxn": await commit_offset(epoch, 5, version=3),
        "v3 stale epoch before AddOffsetsToTxn": await commit_offset(epoch - 1, 5, version=3),
        "stale epoch before AddOffsetsToTxn": await commit_offset(epoch - 1, 5),
        "offsets before AddOffsetsToTxn": await commit_offset(epoch, 5),
        "add offsets": await add_offsets(epoch),
        "add offsets, stale epoch": await add_offsets(epoch - 1),
        "commit offset": await commit_offset(epoch, 5),
        "commit offset, stale epoch": await commit_offset(epoch - 1, 6),
        "v3 commit offset, stale epoch": await commit_offset(epoch - 1, 6, version=3),
        "commit offset, unknown member": await commit_offset(epoch, 6, 3, "ghost"),
        "add offsets of a group that does not exist": await add_offsets(epoch, absent),
        "v3 commit offset, no such group, a generation": await commit_offset(
            epoch, 6, 3, "ghost", version=3, group_id=absent
        ),
        "commit offset, no such group, generation 0": await commit_offset(
            epoch, 6, 0, "", group_id=absent
        ),
        "commit offset, no such group, generation -1 and a member": await commit_offset(
            epoch, 6, -1, "ghost", group_id=absent
        ),
        "commit offset, that group now empty, a generation": await commit_offset(
            epoch, 6, 3, "ghost", group_id=absent
        ),
        "fetch, pending, require_stable": await fetch_offset(True),
        "fetch, pending": await fetch_offset(False),
        "end": await end_txn_v5(connection, tid, pid, epoch, True),
        "fetch after the commit": await fetch_offset(True),
    }


# A classic group's requests by hand (JoinGroup v9, SyncGroup v5, Heartbeat v4).


async def join_classic(
    connection: BrokerConnection, group: str, member: str, instance_id: str | None = None
) -> Any:
    return await connection.request(
        ApiKey.JOIN_GROUP,
        {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
         "member_id": member, "group_instance_id": instance_id, "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b""}], "reason": None},
        version=9,
    )  # fmt: skip


async def sync_classic(
    connection: BrokerConnection,
    group: str,
    generation: int,
    member: str,
    instance_id: str | None = None,
) -> int:
    response = await connection.request(
        ApiKey.SYNC_GROUP,
        {"group_id": group, "generation_id": generation, "member_id": member,
         "group_instance_id": instance_id, "protocol_type": "consumer",
         "protocol_name": "range", "assignments": [{"member_id": member, "assignment": b"x"}]},
        version=5,
    )  # fmt: skip
    return int(response.error_code)


async def heartbeat_classic(
    connection: BrokerConnection,
    group: str,
    generation: int,
    member: str,
    instance_id: str | None = None,
) -> int:
    response = await connection.request(
        ApiKey.HEARTBEAT,
        {"group_id": group, "generation_id": generation, "member_id": member,
         "group_instance_id": instance_id},
        version=4,
    )  # fmt: skip
    return int(response.error_code)


@scenario
async def classic_group(connection: BrokerConnection, bootstrap: str) -> Any:
    """A classic group's life by hand: KIP-394's member id, join, sync and heartbeat with
    wrong generations and members, offsets committed by a member and by an outsider, describe,
    leave, delete."""
    await create_ready(connection, bootstrap, "diff-group-topic")
    group = "diff-group"
    await find_coordinator(connection, group, 0)

    join = functools.partial(join_classic, connection, group)
    sync = functools.partial(sync_classic, connection, group)
    heartbeat = functools.partial(heartbeat_classic, connection, group)

    async def commit(generation: int, member: str, offset: int) -> list[int]:
        response = await connection.request(
            ApiKey.OFFSET_COMMIT,
            {"group_id": group, "generation_id_or_member_epoch": generation,
             "member_id": member, "group_instance_id": None, "retention_time": -1,
             "topics": [{"name": "diff-group-topic", "topic_id": None, "partitions": [
                 {"partition_index": 0, "committed_offset": offset,
                  "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
            version=8,
        )  # fmt: skip
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    async def describe() -> Any:
        response = await connection.request(
            ApiKey.DESCRIBE_GROUPS,
            {"groups": [group], "include_authorized_operations": False},
            version=5,
        )
        [answer] = response.groups
        return (int(answer.error_code), answer.group_state, answer.protocol_type,
                answer.protocol_data, len(answer.members))  # fmt: skip

    async def leave(member: str) -> tuple[int, list[int]]:
        response = await connection.request(
            ApiKey.LEAVE_GROUP,
            {"group_id": group, "member_id": "", "members": [
                {"member_id": member, "group_instance_id": None, "reason": None}]},
            version=5,
        )  # fmt: skip
        return int(response.error_code), [int(m.error_code) for m in response.members]

    async def delete(name: str) -> list[int]:
        response = await connection.request(
            ApiKey.DELETE_GROUPS, {"groups_names": [name]}, version=2
        )
        return [int(r.error_code) for r in response.results]

    first = await join("")
    member = first.member_id
    joined = await join(member)
    generation = int(joined.generation_id)
    return {
        "join without a member id": (int(first.error_code), bool(member)),
        "join": (
            int(joined.error_code),
            generation,
            joined.leader == member,
            [m.member_id == member for m in joined.members],
        ),
        "sync, wrong generation": await sync(generation + 1, member),
        "sync, unknown member": await sync(generation, "ghost"),
        "sync": await sync(generation, member),
        "heartbeat": await heartbeat(generation, member),
        "heartbeat, wrong generation": await heartbeat(generation + 1, member),
        "heartbeat, unknown member": await heartbeat(generation, "ghost"),
        "commit by the member": await commit(generation, member, 7),
        "commit, stale generation": await commit(generation - 1, member, 8),
        "commit, unknown member": await commit(generation, "ghost", 8),
        "commit by an outsider": await commit(-1, "", 8),
        "describe": await describe(),
        "leave, unknown member": await leave("ghost"),
        "delete, not empty": await delete(group),
        "leave": await leave(member),
        "describe, empty": await describe(),
        "delete": await delete(group),
        "delete, unknown": await delete("diff-nobody"),
    }


async def offset_commit(
    connection: BrokerConnection, group: str, topic: str, generation: int, member: str,
    instance: str | None, version: int, offset: int = 0, topic_uuid: Any = None,
) -> list[int]:  # fmt: skip
    """OffsetCommit of partition 0 of `topic` (v10 names it by `topic_uuid`): per-partition
    error codes."""
    response = await connection.request(
        ApiKey.OFFSET_COMMIT,
        {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
         "group_instance_id": instance, "retention_time": -1,
         "topics": [{"name": topic, "topic_id": topic_uuid, "partitions": [
             {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
              "committed_metadata": ""}]}]},
        version=version,
    )  # fmt: skip
    return [int(p.error_code) for t in response.topics for p in t.partitions]


async def committed(connection: BrokerConnection, group: str, topic: str) -> tuple[int, int]:
    """OffsetFetch v8 of partition 0 of `topic`: the group's error code and the offset."""
    response = await connection.request(
        ApiKey.OFFSET_FETCH,
        {"require_stable": False, "groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}]},
        version=8,
    )  # fmt: skip
    [answer] = response.groups
    [offset] = [int(p.committed_offset) for t in answer.topics for p in t.partitions]
    return int(answer.error_code), offset


@scenario
async def offset_commit_missing_group(connection: BrokerConnection, bootstrap: str) -> Any:
    """OffsetCommit into a group that does not exist: a generation at v8, v9 and v10 (no
    group to match: GROUP_ID_NOT_FOUND from v9), generation -1 with a member id (creates the
    group), then into that empty group generation -1 with member and instance ids, and a
    generation."""
    topic, group = "diff-ocm", "diff-ocm-group"
    await create_ready(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    uuid_ = await topic_id(connection, topic)

    async def commit(
        generation: int, member: str, version: int, offset: int, instance: str | None = None
    ) -> list[int]:
        return await offset_commit(
            connection, group, topic, generation, member, instance, version, offset, uuid_
        )

    return {
        "v8, generation 3": await commit(3, "ghost", 8, 1),
        "v9, generation 3": await commit(3, "ghost", 9, 1),
        "v10, generation 0, no member": await commit(0, "", 10, 1),
        "fetch, no group": await committed(connection, group, topic),
        "v9, generation -1 and a member": await commit(-1, "ghost", 9, 2),
        "fetch": await committed(connection, group, topic),
        "empty group, v8, generation -1, member and instance": await commit(
            -1, "other", 8, 3, "diff-ocm-instance"
        ),
        "empty group, v10, a generation": await commit(1, "ghost", 10, 4),
        "fetch, after": await committed(connection, group, topic),
    }


@scenario
async def classic_group_instance_ids(connection: BrokerConnection, bootstrap: str) -> Any:
    """A static member of a classic group, then requests naming its member id with an instance
    id the group does not know (UNKNOWN_MEMBER_ID) and another member id with its instance id
    (FENCED_INSTANCE_ID): JoinGroup, SyncGroup, Heartbeat, OffsetCommit, TxnOffsetCommit and
    LeaveGroup; a pending member (told MEMBER_ID_REQUIRED) leaving, and an administrator's
    removal of the static member by instance id."""
    topic, group, tid = "diff-instances", "diff-instances-group", "diff-instances-txn"
    instance, unknown = "diff-instance-1", "diff-instance-9"
    await create_ready(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    pid, epoch = await init_producer(connection, tid)

    join = functools.partial(join_classic, connection, group)
    sync = functools.partial(sync_classic, connection, group)
    heartbeat = functools.partial(heartbeat_classic, connection, group)

    async def txn_commit(generation: int, member: str, instance_id: str | None) -> list[int]:
        response = await connection.request(
            ApiKey.TXN_OFFSET_COMMIT,
            {"transactional_id": tid, "group_id": group, "producer_id": pid,
             "producer_epoch": epoch, "generation_id": generation, "member_id": member,
             "group_instance_id": instance_id,
             "topics": [{"name": topic, "partitions": [
                 {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                  "committed_metadata": ""}]}]},
            version=3,
        )  # fmt: skip
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    async def leave(member: str, instance_id: str | None) -> Any:
        response = await connection.request(
            ApiKey.LEAVE_GROUP,
            {"group_id": group, "member_id": "", "members": [
                {"member_id": member, "group_instance_id": instance_id, "reason": None}]},
            version=5,
        )  # fmt: skip
        return int(response.error_code), [
            (m.member_id == member, m.group_instance_id, int(m.error_code))
            for m in response.members
        ]

    joined = await join("", instance)
    static, generation = joined.member_id, int(joined.generation_id)
    found: dict[str, Any] = {
        "static member joins": (int(joined.error_code), joined.leader == static),
        "sync": await sync(generation, static, instance),
    }
    for name, member, instance_id in (
        ("unknown instance id", static, unknown),
        ("another member's instance id", "diff-zombie", instance),
    ):
        found[f"heartbeat, {name}"] = await heartbeat(generation, member, instance_id)
        found[f"sync, {name}"] = await sync(generation, member, instance_id)
        found[f"join, {name}"] = int((await join(member, instance_id)).error_code)
        found[f"commit, {name}"] = await offset_commit(
            connection, group, topic, generation, member, instance_id, 8
        )
        found[f"leave, {name}"] = await leave(member, instance_id)
    added = await connection.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
        version=4,
    )  # fmt: skip
    found["add offsets"] = int(added.error_code)
    found["txn commit, unknown instance id"] = await txn_commit(generation, static, unknown)
    found["txn commit, another member's instance id"] = await txn_commit(
        generation, "diff-zombie", instance
    )
    found["txn commit, the static member"] = await txn_commit(generation, static, instance)
    found["abort"] = await end_txn_v5(connection, tid, pid, epoch, False)
    found["heartbeat, the static member"] = await heartbeat(generation, static, instance)
    pending = await join("", None)
    found["a new dynamic member"] = (int(pending.error_code), bool(pending.member_id))
    found["the pending member leaves"] = await leave(pending.member_id, None)
    found["heartbeat, after the pending member left"] = await heartbeat(
        generation, static, instance
    )
    found["leave by instance id"] = await leave("", instance)
    return found


@scenario
async def consumer_group_commit_after_deletion(connection: BrokerConnection, bootstrap: str) -> Any:
    """A consumer-protocol member commits with its member epoch after it left and its group
    was deleted (as after the group expired): GROUP_ID_NOT_FOUND at v10, ILLEGAL_GENERATION
    at v8; generation -1 with its member id creates the group (a classic one) again."""
    topic, group = "diff-848-gone", "diff-848-gone-group"
    await create_with_leaders(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    uuid_ = await topic_id(connection, topic)
    member = RawMember(connection, group, topic, uuid_)
    await beat_until([member], lambda: member.owned == PARTITIONS)

    async def commit(generation: int, version: int) -> list[int]:
        return await offset_commit(
            connection, group, topic, generation, member.member_id, None, version, 5, uuid_
        )

    found: dict[str, Any] = {"commit at its epoch": await commit(member.epoch, 10)}
    found["leaves"] = await member.leave()
    deleted = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, version=2)
    found["group deleted"] = [int(r.error_code) for r in deleted.results]
    found["v10 commit at its last epoch"] = await commit(member.epoch, 10)
    found["v8 commit at its last epoch"] = await commit(member.epoch, 8)
    found["v10 commit, generation -1"] = await commit(-1, 10)
    found["fetch"] = await committed(connection, group, topic)
    return found


@scenario
async def share_group_membership(connection: BrokerConnection, bootstrap: str) -> Any:
    """A share group (KIP-932) over raw ShareGroupHeartbeat: the request checks, a join whose
    partitions are assigned only once their share state is initialized (a later heartbeat,
    after the assignment interval), the epoch checks, ShareGroupDescribe, the other group APIs
    against a share group (and a share heartbeat against a consumer group), the share offsets
    admin APIs, DeleteGroups of a non-empty then an empty share group."""
    topic, group, other = "diff-share", "diff-share-group", "diff-share-848-group"
    await create_with_leaders(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    member = "diffShareMember000000A"  # (the Java client's ids: 22 characters)

    async def beat(
        epoch: int, topics: list[str] | None = None, member_id: str = member, group_id: str = group
    ) -> tuple[int, int, list[int] | None]:
        answer = await connection.request(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            {"group_id": group_id, "member_id": member_id, "member_epoch": epoch,
             "rack_id": None, "subscribed_topic_names": topics},
            version=1,
        )  # fmt: skip
        parts = None
        if answer.assignment is not None:
            parts = sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)
        return int(answer.error_code), int(answer.member_epoch), parts

    for _ in range(100):  # as clients do: until the coordinator has loaded the group's partition
        unknown = (await beat(1, [topic]))[0]
        if unknown not in (*RETRIABLE, 16):
            break
        await asyncio.sleep(0.1)
    found: dict[str, Any] = {
        "unknown group at epoch 1": unknown,
        "member id of 37 characters": (await beat(0, [topic], member_id="x" * 37))[0],
        "join without topics": (await beat(0, None))[0],
        "leave an unknown group": (await beat(-1))[0],
    }
    joined = await beat(0, [topic])
    found["join"] = joined
    answer, epoch = joined, joined[1]
    for _ in range(80):  # initialized after the join, assigned once the interval (1 s) passed
        answer = await beat(epoch)
        epoch = answer[1]
        if answer[2]:
            break
        await asyncio.sleep(0.2)
    found["assigned"] = answer
    found["again"] = await beat(epoch)
    found["epoch ahead"] = (await beat(epoch + 5))[0]
    found["unknown member"] = (await beat(epoch, member_id="stranger"))[0]
    described = await connection.request(
        ApiKey.SHARE_GROUP_DESCRIBE,
        {"group_ids": [group, "diff-share-none", ""], "include_authorized_operations": False},
        version=1,
    )
    found["describe"] = [
        (int(g.error_code), g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
         [(m.member_id, m.member_epoch, sorted(p for t in m.assignment.topic_partitions
                                               for p in t.partitions)) for m in g.members])
        for g in described.groups
    ]  # fmt: skip
    listed = await connection.request(
        ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": ["Share"]}, version=5
    )
    found["listed as share"] = sorted(
        (g.group_id, g.protocol_type, g.group_state, g.group_type)
        for g in listed.groups
        if g.group_id.startswith("diff-share")
    )
    classic = await connection.request(
        ApiKey.DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False},
        version=6,
    )  # fmt: skip
    found["DescribeGroups v6"] = [(int(g.error_code), g.group_state) for g in classic.groups]
    consumer = await connection.request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        {"group_id": group, "member_id": "diffConsumerMember0000A", "member_epoch": 0,
         "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
         "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
         "server_assignor": None, "topic_partitions": []},
        version=1,
    )  # fmt: skip
    found["ConsumerGroupHeartbeat on it"] = int(consumer.error_code)
    other_member = RawMember(connection, other, topic, await topic_id(connection, topic))
    await other_member.beat()
    found["share heartbeat on a consumer group"] = (await beat(0, [topic], group_id=other))[0]
    deleted = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, version=2)
    found["delete while a member is in"] = [int(r.error_code) for r in deleted.results]
    found["leave"] = await beat(-1)
    found.update(await share_offsets_observations(connection, group, topic, other))
    deleted = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, version=2)
    found["delete once empty"] = [int(r.error_code) for r in deleted.results]
    found["heartbeat after deletion"] = (await beat(epoch))[0]
    await other_member.leave()
    return found


async def share_offsets_observations(
    connection: BrokerConnection, group: str, topic: str, other: str
) -> dict[str, Any]:
    """The share offsets admin APIs (90-92) on an Empty share group whose partitions are
    initialized: alter (with a partition past the count and a missing topic), describe (named
    and all), delete (with a missing topic), and on a consumer group."""
    missing = "diff-share-missing"

    async def describe(topics: list[tuple[str, list[int]]] | None) -> Any:
        named = None if topics is None else [
            {"topic_name": t, "partitions": p} for t, p in topics]  # fmt: skip
        answer = await connection.request(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            {"groups": [{"group_id": group, "topics": named}]},
            version=1,
        )
        (found,) = answer.groups
        return int(found.error_code), sorted(
            (t.topic_name, p.partition_index, p.start_offset, p.lag, int(p.error_code))
            for t in found.topics for p in t.partitions
        )  # fmt: skip

    async def delete(group_id: str, topics: list[str]) -> Any:
        answer = await connection.request(
            ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            {"group_id": group_id, "topics": [{"topic_name": t} for t in topics]},
            version=0,
        )
        return int(answer.error_code), sorted(
            (t.topic_name, int(t.error_code), t.error_message) for t in answer.responses
        )

    found: dict[str, Any] = {"offsets before the alter": await describe(None)}
    altered = await connection.request(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        {"group_id": group, "topics": [
            {"topic_name": topic, "partitions": [
                {"partition_index": 0, "start_offset": 3},
                {"partition_index": 1, "start_offset": 4},
                {"partition_index": 7, "start_offset": 0}]},
            {"topic_name": missing, "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
        version=0,
    )  # fmt: skip
    found["alter"] = (int(altered.error_code), sorted(
        (t.topic_name, p.partition_index, int(p.error_code))
        for t in altered.responses for p in t.partitions))  # fmt: skip
    found["offsets named"] = await describe([(topic, [0, 1]), (missing, [0])])
    found["offsets of all"] = await describe(None)
    found["delete offsets"] = await delete(group, [topic, missing])
    found["delete offsets again"] = await delete(group, [topic])
    found["offsets after delete"] = await describe(None)
    found["delete offsets of a consumer group"] = (await delete(other, [topic]))[0]
    return found


async def create_with_leaders(connection: BrokerConnection, bootstrap: str, topic: str) -> None:
    """A topic of len(PARTITIONS) partitions, once each answers ListOffsets (has a leader)."""
    await asyncio.to_thread(create_topic, bootstrap, topic, len(PARTITIONS))
    for partition in sorted(PARTITIONS):
        for _ in range(100):
            if (await list_offsets(connection, topic, partition, -1, 0))[0] == 0:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{topic}-{partition} has no leader after 10 s")


@scenario
async def consumer_group_commits(connection: BrokerConnection, bootstrap: str) -> Any:
    """A consumer-protocol member's offset commits with each of its member epochs (KIP-1251):
    an older epoch commits the partitions it held then, nothing else; OffsetFetch wants the
    exact epoch (tests/support/consumer_group_raw.py)."""
    topic, group, tid = "diff-848", "diff-848-group", "diff-848-txn"
    await create_with_leaders(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    producer = (tid, *await init_producer(connection, tid))
    return await kip1251_observations(connection, group, topic, producer)


@scenario
async def consumer_group_static_leave(connection: BrokerConnection, bootstrap: str) -> Any:
    """A static consumer-protocol member leaving (epoch -2) while it revokes a partition: the
    partition goes to the member waiting for it, the restarted instance gets back what it kept
    (tests/support/consumer_group_raw.py)."""
    topic, group = "diff-848-static", "diff-848-static-group"
    await create_with_leaders(connection, bootstrap, topic)
    await find_coordinator(connection, group, 0)
    return await static_leave_observations(connection, group, topic)


async def fetch_records(
    connection: BrokerConnection, topic: str, offset: int, read_committed: bool
) -> dict[str, Any]:
    """Fetch v12 of one partition: its offsets, the aborted transactions it lists (their first
    offsets) and every record returned as (offset, value, control) (batching left out)."""
    response = await connection.request(
        ApiKey.FETCH,
        {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
         "isolation_level": int(read_committed), "session_id": 0, "session_epoch": -1,
         "topics": [{"topic": topic, "topic_id": None, "partitions": [
             {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
              "last_fetched_epoch": -1, "log_start_offset": -1,
              "partition_max_bytes": 1 << 20}]}],
         "forgotten_topics_data": [], "rack_id": ""},
        version=12,
    )  # fmt: skip
    [data] = response.responses[0].partitions
    records: list[tuple[int, bytes | str | None]] = []
    position, raw = 0, bytes(data.records or b"")
    while position < len(raw):
        header = parse_header(raw, position)
        batch = raw[position : position + header.size]
        if header.is_control:
            records.append((header.base_offset, "ABORT" if control_type(batch) == 0 else "COMMIT"))
        else:
            records += [(r.offset, r.value) for r in read_records(batch)]
        position += header.size
    aborted = data.aborted_transactions
    return {
        "error": int(data.error_code),
        "high watermark": int(data.high_watermark),
        "last stable offset": int(data.last_stable_offset),
        "aborted": None if aborted is None else [int(a.first_offset) for a in aborted],
        "records": records,
    }


@scenario
async def aborted_reads(connection: BrokerConnection, bootstrap: str) -> Any:
    """Committed, aborted and open transactions beside plain records, fetched read_committed
    and read_uncommitted from the start and from the middle."""
    await create_ready(connection, bootstrap, "diff-aborted")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "diff-aborted"})
    await asyncio.to_thread(producer.init_transactions, 60)
    for values, commit in (((b"a", b"b"), True), ((b"c", b"d"), False), ((b"e",), True)):
        producer.begin_transaction()
        for value in values:
            producer.produce("diff-aborted", value, partition=0)
        await asyncio.to_thread(producer.flush, 60)
        plain.produce("diff-aborted", b"plain-" + value, partition=0)
        await asyncio.to_thread(plain.flush, 60)
        if commit:
            await asyncio.to_thread(producer.commit_transaction, 60)
        else:
            await asyncio.to_thread(producer.abort_transaction, 60)
        await asyncio.sleep(0.5)  # the marker lands before the next transaction's data
    producer.begin_transaction()
    producer.produce("diff-aborted", b"open", partition=0)
    await asyncio.to_thread(producer.flush, 60)
    found = {
        "read_committed from 0": await fetch_records(connection, "diff-aborted", 0, True),
        "read_committed from 5": await fetch_records(connection, "diff-aborted", 5, True),
        "read_uncommitted from 0": await fetch_records(connection, "diff-aborted", 0, False),
    }
    await asyncio.to_thread(producer.abort_transaction, 60)
    return found


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
    # the reference broker's setting too: a new group's first join is answered at once
    with running_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"}) as lockgate:
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
