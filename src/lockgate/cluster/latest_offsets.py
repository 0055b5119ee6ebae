# A partition's latest offset (its high watermark) wherever it is led, for a share group's lag
# (DescribeShareGroupOffsets v1), as Kafka 4.4's NetworkPartitionMetadataClient finds it: read
# here when this broker leads the partition, else asked of its leader with ListOffsets (latest,
# read_uncommitted) over this broker's inter-broker connection to it. Errors come back as codes
# for the partition's answer, as Kafka sets them: no leader LEADER_NOT_AVAILABLE, a leader that
# cannot be reached NETWORK_EXCEPTION or REQUEST_TIMED_OUT, the leader's own answer as it is.
from __future__ import annotations

import logging
from typing import Protocol

from lockgate.client.errors import KafkaError
from lockgate.cluster.membership import Membership
from lockgate.cluster.metadata import NO_LEADER
from lockgate.cluster.peers import PeerConnections
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

LATEST = -1
CONSUMER_REPLICA_ID = -1
LIST_OFFSETS_VERSION = 1  # enough for the latest offset; every broker serves it


class _Held(Protocol):
    is_leader: bool
    high_watermark: int


class _Partitions(Protocol):
    def get(self, topic: str, index: int) -> _Held | None: ...


class LatestOffsets:
    def __init__(
        self,
        partitions: _Partitions,
        membership: Membership,
        node_id: int,
        peers: PeerConnections | None,
    ) -> None:
        """`peers` reaches the other brokers (None: a single node, where every partition is
        led here or does not exist)."""
        self._partitions = partitions
        self._membership = membership
        self._node_id = node_id
        self._peers = peers

    async def __call__(self, topic: str, index: int) -> int | ErrorCode:
        held = self._partitions.get(topic, index)
        if held is not None and held.is_leader:
            return held.high_watermark
        state = self._membership.partition(topic, index)
        if state is None or state.leader == NO_LEADER or self._peers is None:
            return ErrorCode.leader_not_available
        if state.leader == self._node_id:  # (its leadership is being taken up or given up)
            return ErrorCode.not_leader_or_follower
        body = {
            "replica_id": CONSUMER_REPLICA_ID,
            "isolation_level": 0,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": index, "timestamp": LATEST}]}
            ],
        }
        try:
            connection = await self._peers.get(state.leader)
            answer = await connection.request(
                ApiKey.LIST_OFFSETS, body, version=LIST_OFFSETS_VERSION
            )
        except TimeoutError:
            return ErrorCode.request_timed_out
        except (KafkaError, OSError) as exc:
            log.debug("latest offset of %s-%d from broker %d: %s", topic, index, state.leader, exc)
            return ErrorCode.network_exception
        for answered in answer.topics:
            for partition in answered.partitions:
                if str(answered.name) == topic and int(partition.partition_index) == index:
                    if partition.error_code:
                        return ErrorCode(partition.error_code)
                    return int(partition.offset)
        return ErrorCode.unknown_topic_or_partition
