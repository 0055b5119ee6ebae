"""A partition's latest offset for a share group's lag, as Kafka 4.4's
NetworkPartitionMetadataClient finds it: read here when this broker leads the partition, else
asked of its leader with ListOffsets; no leader LEADER_NOT_AVAILABLE, an unreachable leader
NETWORK_EXCEPTION or REQUEST_TIMED_OUT, the leader's error as it answered it."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from lockgate.client.errors import KafkaError
from lockgate.cluster.latest_offsets import LatestOffsets
from lockgate.cluster.metadata import NO_LEADER, BrokerRegistration, PartitionState
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode

HERE = 1


@dataclass
class Held:
    is_leader: bool
    high_watermark: int


class Partitions:
    def __init__(self, held: dict[tuple[str, int], Held]) -> None:
        self.held = held

    def get(self, topic: str, index: int) -> Held | None:
        return self.held.get((topic, index))


class Members:
    def __init__(self, leaders: dict[tuple[str, int], int]) -> None:
        self.leaders = leaders

    def cluster_id(self) -> str:
        return "c"

    def brokers(self) -> list[BrokerRegistration]:
        return []

    def controller_id(self) -> int:
        return HERE

    def partition(self, topic: str, index: int) -> PartitionState | None:
        leader = self.leaders.get((topic, index))
        return None if leader is None else PartitionState((1, 2, 3), leader, 4, (1, 2, 3))


class Peer:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[int, dict[str, Any], int]] = []

    async def request(self, api: int, body: dict[str, Any], version: int = -1) -> Any:
        self.asked.append((api, body, version))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class Peers:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.nodes: list[int] = []

    async def get(self, node_id: int) -> Peer:
        self.nodes.append(node_id)
        return self.peer


def answered(offset: int, error: int = 0, topic: str = "t", index: int = 0) -> Any:
    partition = SimpleNamespace(partition_index=index, error_code=error, offset=offset)
    return SimpleNamespace(topics=[SimpleNamespace(name=topic, partitions=[partition])])


def latest(held: dict[tuple[str, int], Held], leaders: dict[tuple[str, int], int],
           peer: Peer | None) -> tuple[LatestOffsets, Peers | None]:  # fmt: skip
    peers = None if peer is None else Peers(peer)
    return LatestOffsets(Partitions(held), Members(leaders), HERE, peers), peers  # type: ignore[arg-type]


async def test_a_partition_led_here_is_read_here() -> None:
    offsets, _ = latest({("t", 0): Held(True, 42)}, {("t", 0): HERE}, Peer(answered(7)))
    assert await offsets("t", 0) == 42


async def test_a_partition_led_elsewhere_is_asked_of_its_leader() -> None:
    peer = Peer(answered(7))
    offsets, peers = latest({("t", 0): Held(False, 3)}, {("t", 0): 2}, peer)
    assert await offsets("t", 0) == 7
    assert peers is not None and peers.nodes == [2]
    ((api, body, _version),) = peer.asked
    assert api == ApiKey.LIST_OFFSETS and body["isolation_level"] == 0
    assert body["topics"] == [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}
    ]


async def test_errors_as_kafka_sets_them() -> None:
    follower = {("t", 0): Held(False, 3)}
    no_leader, _ = latest(follower, {("t", 0): NO_LEADER}, Peer(answered(7)))
    assert await no_leader("t", 0) == ErrorCode.leader_not_available
    unknown, _ = latest({}, {}, Peer(answered(7)))
    assert await unknown("t", 0) == ErrorCode.leader_not_available
    single, _ = latest({}, {("t", 0): 2}, None)  # (a single node has no peers)
    assert await single("t", 0) == ErrorCode.leader_not_available
    refused, _ = latest(
        follower, {("t", 0): 2}, Peer(answered(-1, ErrorCode.not_leader_or_follower))
    )
    assert await refused("t", 0) == ErrorCode.not_leader_or_follower
    down, _ = latest(follower, {("t", 0): 2}, Peer(KafkaError("cannot connect")))
    assert await down("t", 0) == ErrorCode.network_exception
    slow, _ = latest(follower, {("t", 0): 2}, Peer(TimeoutError()))
    assert await slow("t", 0) == ErrorCode.request_timed_out
    missing, _ = latest(follower, {("t", 0): 2}, Peer(answered(7, index=1)))
    assert await missing("t", 0) == ErrorCode.unknown_topic_or_partition
