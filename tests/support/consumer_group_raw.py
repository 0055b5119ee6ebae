# The consumer group protocol (KIP-848) by raw requests, for tests that must choose the member
# epoch each request carries: a member driven heartbeat by heartbeat, KIP-1251's scenario
# (offset commits naming an older member epoch), which the tests run against lockgate alone
# and against lockgate and Apache Kafka side by side, and a static member leaving while it
# revokes (against both). Every wait is bounded.
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey

PARTITIONS = frozenset({0, 1})
COMMIT_VERSION = 10  # by topic id, as the Java consumer 4.4 sends it
FETCH_VERSION = 9  # the last naming topics; v9+ carries the member id and epoch


class RawMember:
    """A member that takes each assignment at once: its next heartbeat reports the partitions
    it was given as owned (so it revokes at once too). Only the test makes it heartbeat."""

    def __init__(
        self,
        connection: BrokerConnection,
        group: str,
        topic: str,
        topic_id: uuid.UUID,
        instance_id: str | None = None,
    ):
        self.connection = connection
        self.group, self.topic, self.topic_id = group, topic, topic_id
        self.instance_id = instance_id  # set: a static member (KIP-345), named on every request
        self.member_id = str(uuid.uuid4())  # KIP-1082: members name themselves
        self.epoch = 0
        self.owned: frozenset[int] = frozenset()

    async def beat(self) -> None:
        joining = self.epoch == 0
        # (a member that joins must say it owns nothing: an empty list, not null)
        owned = [{"topic_id": self.topic_id, "partitions": sorted(self.owned)}]
        if not self.owned:
            owned = []
        answer = await self.connection.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
             "instance_id": self.instance_id, "rack_id": None,
             "rebalance_timeout": 30_000 if joining else -1,
             "subscribed_topic_names": [self.topic] if joining else None,
             "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned},
            version=1,
        )  # fmt: skip
        assert answer.error_code == 0, answer
        self.epoch = int(answer.member_epoch)
        if answer.assignment is not None:
            self.owned = frozenset(
                p
                for t in answer.assignment.topic_partitions
                if t.topic_id == self.topic_id
                for p in t.partitions
            )

    async def leave(self, epoch: int = -1) -> tuple[int, int]:
        """Epoch -1 leaves the group; -2, a static member's, leaves for a restart (it keeps
        its place until its session ends). The answer's error code and member epoch."""
        answer = await self.connection.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
             "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout": -1,
             "subscribed_topic_names": None, "subscribed_topic_regex": None,
             "server_assignor": None, "topic_partitions": None},
            version=1,
        )  # fmt: skip
        assert answer.error_code == 0, answer
        return int(answer.error_code), int(answer.member_epoch)


async def beat_until(
    members: list[RawMember], done: Callable[[], bool], timeout: float = 30
) -> None:
    """Heartbeats until `done()`: Apache Kafka computes assignments in the background (at
    most once a second by default), so a change may take a few heartbeats to show."""
    deadline = time.monotonic() + timeout
    while True:
        for member in members:
            await member.beat()
        if done():
            return
        assert time.monotonic() < deadline, [(m.epoch, sorted(m.owned)) for m in members]
        await asyncio.sleep(0.2)


async def topic_id(connection: BrokerConnection, topic: str) -> uuid.UUID:
    response = await connection.request(
        ApiKey.METADATA,
        {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
         "include_topic_authorized_operations": False},
        version=12,
    )  # fmt: skip
    [found] = response.topics
    assert found.error_code == 0, found
    return uuid.UUID(str(found.topic_id))


async def kip1251_observations(
    connection: BrokerConnection,
    group: str,
    topic: str,
    producer: tuple[str, int, int],
) -> dict[str, Any]:
    """KIP-1251 on a topic of two partitions: m1 takes both (epoch 2: a new group is at epoch
    1, as Kafka 4.4), hands one over to m2 (epoch 3) and gets it back when m2 leaves (epoch
    4); OffsetCommit (v10 and v8), TxnOffsetCommit (v3, `producer`: transactional id,
    producer id and epoch, no transaction open) and OffsetFetch (v9) name m1 with each of its
    epochs. Error codes per partition, and m1's epochs."""
    tid = await topic_id(connection, topic)
    m1, m2 = RawMember(connection, group, topic, tid), RawMember(connection, group, topic, tid)

    async def commit(epoch: int, partitions: frozenset[int], version: int = COMMIT_VERSION,
                     member: str | None = None) -> list[int]:  # fmt: skip
        response = await connection.request(
            ApiKey.OFFSET_COMMIT,
            {"group_id": group, "generation_id_or_member_epoch": epoch,
             "member_id": m1.member_id if member is None else member, "group_instance_id": None,
             "retention_time": -1,
             "topics": [{"name": topic, "topic_id": tid, "partitions": [
                 {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
                  "committed_metadata": ""} for p in sorted(partitions)]}]},
            version=version,
        )  # fmt: skip
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    async def fetch(epoch: int) -> int:
        response = await connection.request(
            ApiKey.OFFSET_FETCH,
            {"require_stable": False, "groups": [
                {"group_id": group, "member_id": m1.member_id, "member_epoch": epoch,
                 "topics": [{"name": topic, "partition_indexes": sorted(PARTITIONS)}]}]},
            version=FETCH_VERSION,
        )  # fmt: skip
        return int(response.groups[0].error_code)

    transactional_id, producer_id, producer_epoch = producer
    txn = {"transactional_id": transactional_id, "producer_id": producer_id,
           "producer_epoch": producer_epoch}  # fmt: skip

    async def txn_commit(epoch: int, partitions: frozenset[int]) -> list[int]:
        response = await connection.request(
            ApiKey.TXN_OFFSET_COMMIT,
            {**txn, "group_id": group, "generation_id": epoch, "member_id": m1.member_id,
             "group_instance_id": None,
             "topics": [{"name": topic, "partitions": [
                 {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                  "committed_metadata": ""} for p in sorted(partitions)]}]},
            version=3,
        )  # fmt: skip
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    found: dict[str, Any] = {}
    await beat_until([m1], lambda: m1.owned == PARTITIONS)
    first = m1.epoch
    found["m1 alone"] = sorted(m1.owned)
    found["commit at the member's epoch"] = await commit(first, PARTITIONS)
    await beat_until([m2, m1], lambda: len(m1.owned) == len(m2.owned) == 1)
    second = m1.epoch
    kept, moved = m1.owned, m2.owned
    found["split"] = (second > first, m2.epoch == second)
    found["older epoch, partition kept"] = await commit(first, kept)
    found["older epoch, partition handed over"] = await commit(first, moved)
    await m2.leave()
    await beat_until([m1], lambda: m1.owned == PARTITIONS and m1.epoch > second)
    third = m1.epoch
    found["m1's epochs"] = (first, second, third)
    found["previous epoch, partition kept"] = await commit(second, kept)
    found["previous epoch, partition given back in the new epoch"] = await commit(second, moved)
    found["previous epoch, both"] = await commit(second, PARTITIONS)
    found["first epoch, partition kept"] = await commit(first, kept)
    found["epoch before the first, partition kept"] = await commit(first - 1, kept)
    found["newer epoch"] = await commit(third + 1, kept)
    found["unknown member, older epoch"] = await commit(second, kept, member="ghost")
    found["v8, older epoch"] = await commit(second, kept, version=8)
    found["fetch at the previous epoch"] = await fetch(second)
    found["fetch at the member's epoch"] = await fetch(third)
    added = await connection.request(
        ApiKey.ADD_OFFSETS_TO_TXN, {**txn, "group_id": group}, version=4
    )
    found["add offsets"] = int(added.error_code)
    found["txn, previous epoch, partition kept"] = await txn_commit(second, kept)
    found["txn, previous epoch, partition given back"] = await txn_commit(second, moved)
    found["txn, newer epoch"] = await txn_commit(third + 1, kept)
    ended = await connection.request(ApiKey.END_TXN, {**txn, "committed": False}, version=5)
    found["abort"] = int(ended.error_code)
    found["commit at the member's epoch, after"] = await commit(third, PARTITIONS)
    await m1.leave()
    return found


async def static_leave_observations(
    connection: BrokerConnection, group: str, topic: str
) -> dict[str, Any]:
    """A static member leaving (epoch -2) while it revokes, on a topic of two partitions: s1
    (static) holds both and is asked to give one to m2, which waits for it; s1 leaves before
    it has revoked it. Kafka 4.4 releases the partition at once (m2's next heartbeat gets it)
    and s1's restart, with a new member id, gets the partition it kept without a rebalance."""
    tid = await topic_id(connection, topic)
    instance = f"{group}-instance"
    s1 = RawMember(connection, group, topic, tid, instance)
    m2 = RawMember(connection, group, topic, tid)
    found: dict[str, Any] = {}
    await beat_until([s1], lambda: s1.owned == PARTITIONS)
    joined = s1.epoch
    # s1's answer gives it one partition (the other is to be revoked); it has not yet
    # heartbeated that it let it go
    await beat_until([m2, s1], lambda: len(s1.owned) == 1)
    kept, moved = s1.owned, PARTITIONS - s1.owned
    await m2.beat()
    # (s1 stays at its epoch until it has revoked)
    found["m2 waits for the partition s1 revokes"] = (sorted(m2.owned), m2.epoch > s1.epoch)
    waiting_epoch = m2.epoch
    found["s1 leaves with epoch -2"] = await s1.leave(-2)
    await m2.beat()
    found["m2 gets the partition s1 was revoking, no rebalance"] = (
        m2.owned == moved,
        m2.epoch == waiting_epoch,
    )
    restarted = RawMember(connection, group, topic, tid, instance)
    await beat_until([restarted], lambda: restarted.owned == kept)
    found["s1 restarted gets what it kept, no rebalance"] = restarted.epoch == m2.epoch
    await m2.beat()
    found["m2 keeps its partition"] = (m2.owned == moved, m2.epoch == restarted.epoch)
    # s1's first epoch (a new group is at epoch 1), m2's when it joined, the restarted s1's
    found["epochs"] = (joined, waiting_epoch, restarted.epoch)
    found["restarted s1 leaves"] = await restarted.leave()
    await m2.leave()
    return found


# What Apache Kafka 4.4 answers (the differential test checks lockgate against it): 113
# STALE_MEMBER_EPOCH, 22 ILLEGAL_GENERATION, 25 UNKNOWN_MEMBER_ID, 35 UNSUPPORTED_VERSION
EXPECTED: dict[str, Any] = {
    "m1 alone": [0, 1],
    "commit at the member's epoch": [0, 0],
    "split": (True, True),
    "m1's epochs": (2, 3, 4),
    "older epoch, partition kept": [0],
    "older epoch, partition handed over": [113],
    "previous epoch, partition kept": [0],
    "previous epoch, partition given back in the new epoch": [113],
    "previous epoch, both": [113, 113],
    "first epoch, partition kept": [0],
    "epoch before the first, partition kept": [113],
    "newer epoch": [113],
    "unknown member, older epoch": [25],
    "v8, older epoch": [35],
    "fetch at the previous epoch": 113,
    "fetch at the member's epoch": 0,
    "add offsets": 0,
    "txn, previous epoch, partition kept": [0],
    "txn, previous epoch, partition given back": [22],
    "txn, newer epoch": [22],
    "abort": 0,
    "commit at the member's epoch, after": [0, 0],
}
