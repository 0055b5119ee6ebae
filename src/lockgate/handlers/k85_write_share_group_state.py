"""WriteShareGroupState (key 85), versions 0–1.

Behaviour (the share-partition leader writes to the share coordinator after acknowledgements,
releases and lock timeouts; handlers/share_state.py for what the five share-state APIs share):
- Merges the written state batches into the share partition's state: where ranges overlap the
  higher delivery count wins, then the higher delivery state; everything below the start
  offset is dropped; the start offset never moves back. Appended as a ShareUpdate, or every
  share.coordinator.snapshot.update.records.per.snapshot updates as a ShareSnapshot of the
  merged state; answered once durable (and replicated).
- Null topic id, negative partition, leader or state epoch, or a share partition never
  initialized: INVALID_REQUEST. A leader epoch older than the recorded one:
  FENCED_LEADER_EPOCH; a state epoch older: FENCED_STATE_EPOCH. Topic id unknown or partition
  past its count: UNKNOWN_TOPIC_OR_PARTITION. NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
  COORDINATOR_NOT_AVAILABLE as the coordinator is.
- Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 flexible; v1 DeliveryCompleteCount (KIP-1226; -1 when absent).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.share.records import StateBatch
from lockgate.coordinator.share.results import Result, StateResult
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_state import answer, error_fields
from lockgate.protocol.api import ApiKey


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    shares = ctx.services.shares

    async def run(topic: Any, partition: Any) -> Result:
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in partition.state_batches
        ]
        return await shares.write(
            request.group_id, topic.topic_id, partition.partition, partition.state_epoch,
            partition.leader_epoch, partition.start_offset,
            field(partition, "delivery_complete_count", -1), batches,
        )  # fmt: skip

    return await answer(ctx, request, StateResult, run, error_fields)
