"""DeleteShareGroupState (key 86), version 0.

Behaviour (the group coordinator deletes share offsets and share groups; handlers/share_state.py
for what the five share-state APIs share):
- Writes a ShareSnapshot tombstone for each share partition with state, and answers once
  durable; one with no state: nothing written, no error.
- Null topic id or negative partition: INVALID_REQUEST. Topic id unknown or partition past its
  count: UNKNOWN_TOPIC_OR_PARTITION. NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
  COORDINATOR_NOT_AVAILABLE as the coordinator is.
- Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 flexible (the only version).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.share.results import Result, StateResult
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_state import answer, error_fields
from lockgate.protocol.api import ApiKey


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    shares = ctx.services.shares

    async def run(topic: Any, partition: Any) -> Result:
        return await shares.delete(request.group_id, topic.topic_id, partition.partition)

    return await answer(ctx, request, StateResult, run, error_fields)
