# The persister: how the share-partition leader (ShareFetch/ShareAcknowledge) and the group
# coordinator (ShareGroupHeartbeat, the share offsets admin APIs, DeleteGroups) keep and read a
# share partition's durable state, whichever broker coordinates it (Kafka's Persister). One call
# per share partition, named by (group id, topic id, partition); each returns a typed result
# (results.py) carrying Kafka's error code, never raises for a protocol error.
#
# Who calls what (Kafka 4.4):
# - the group coordinator: `initialize` when a share partition first joins a group's assignment
#   (state epoch = the group epoch, start offset -1: resolved by share.auto.offset.reset when
#   the leader first reads it) and when AlterShareGroupOffsets resets it (start offset given);
#   `delete` for DeleteShareGroupOffsets and DeleteGroups; `read_summary` for
#   DescribeShareGroupOffsets (lag = log end - start offset - delivery complete count).
# - the share-partition leader: `read` when it first loads a share partition (leader epoch = the
#   topic-partition's leader epoch: a newer one fences the previous leader), then `write` after
#   every acknowledgement, release or lock timeout, with only the changed ranges as batches
#   (acquisitions are never written) and the current start offset.
#
# Errors a caller must handle (per share partition):
# - NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE: passing, already
#   retried by the engine until its timeout (the leader maps them to COORDINATOR_NOT_AVAILABLE
#   for its clients, who retry);
# - FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH: this leader or group epoch is stale: drop the share
#   partition (clients see NOT_LEADER_OR_FOLLOWER) and read again;
# - INVALID_REQUEST: a read or write of a share partition never initialized, a negative epoch or
#   partition, a null topic id; UNKNOWN_TOPIC_OR_PARTITION: not in the metadata.
#
# Engines: the broker's is routed.py's `RoutedPersister`: each call at the share partition's
# coordinator, this broker's in-process or another's over its share-state API (83-87), passing
# answers retried until share.coordinator.write.timeout.ms (on a single node always in-process).
# `coordinator_partition` says where a key's state lives.
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from lockgate.coordinator.share.records import ShareKey, StateBatch
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.coordinator.share.routing import state_partition


class Persister(Protocol):
    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
        start_offset: int,
    ) -> StateResult:  # fmt: skip
        """A fresh state: no batches, `start_offset` (-1: to be resolved by the leader)."""
        ...

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ReadResult:
        """The state epoch, start offset and persisted batches; records `leader_epoch` if newer."""
        ...

    async def write(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
        leader_epoch: int, start_offset: int, delivery_complete_count: int,
        state_batches: Sequence[StateBatch],
    ) -> StateResult:  # fmt: skip
        """Merges the changed ranges in (higher delivery count wins, then the higher state);
        the start offset never moves back. Answered once durable (and replicated)."""
        ...

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateResult:
        """Deletes the state (nothing to delete: no error)."""
        ...

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> SummaryResult:
        """Start offset, delivery complete count and epochs (no state: -1, -1, 0, 0)."""
        ...


def coordinator_partition(
    group_id: str, topic_id: uuid.UUID, partition: int, state_partitions: int
) -> int:
    """The __share_group_state partition whose leader coordinates the share partition (the
    one FindCoordinator key type 2 names for "groupId:topicId:partition")."""
    return state_partition(ShareKey(group_id, topic_id, partition), state_partitions)
