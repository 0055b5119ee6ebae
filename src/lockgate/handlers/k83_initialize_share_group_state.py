"""InitializeShareGroupState (key 83), version 0.

Behaviour (the group coordinator asks the share coordinator; handlers/share_state.py for what
the five share-state APIs share):
- Writes a fresh ShareSnapshot for each share partition: snapshot epoch 0 (next one when it
  had state), the request's state epoch and start offset (-1: resolved by the leader with
  share.auto.offset.reset), no batches. The same state epoch and start offset again: nothing
  written, no error.
- Null topic id, negative partition or state epoch: INVALID_REQUEST. A state epoch older than
  the recorded one: FENCED_STATE_EPOCH. Topic id unknown or partition past its count:
  UNKNOWN_TOPIC_OR_PARTITION. State partition not coordinated here: NOT_COORDINATOR; loading:
  COORDINATOR_LOAD_IN_PROGRESS; a failed write: COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR.
- Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 flexible (the only version).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.share.results import Result, StateResult
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_state import answer, error_fields
from lockgate.protocol.api import ApiKey


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    shares = ctx.services.shares

    async def run(topic: Any, partition: Any) -> Result:
        return await shares.initialize(
            request.group_id, topic.topic_id, partition.partition, partition.state_epoch,
            partition.start_offset,
        )  # fmt: skip

    return await answer(ctx, request, StateResult, run, error_fields)
