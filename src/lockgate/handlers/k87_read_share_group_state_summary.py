"""ReadShareGroupStateSummary (key 87), versions 0–1.

Behaviour (the group coordinator describes share offsets; handlers/share_state.py for what the
five share-state APIs share):
- Answers each share partition's state epoch, leader epoch, start offset and (v1) delivery
  complete count; nothing is written. A share partition with no state: start offset -1,
  delivery complete count -1, epochs 0, no error.
- Null topic id or negative partition: INVALID_REQUEST. Topic id unknown or partition past its
  count: UNKNOWN_TOPIC_OR_PARTITION. NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
  COORDINATOR_NOT_AVAILABLE as the coordinator is.
- Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 flexible; v1 DeliveryCompleteCount in the answer (KIP-1226).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.share.results import Result, SummaryResult
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_state import answer, error_fields
from lockgate.protocol.api import ApiKey


def _shape(result: Result) -> dict[str, Any]:
    assert isinstance(result, SummaryResult)
    return {
        **error_fields(result),
        "state_epoch": result.state_epoch,
        "leader_epoch": result.leader_epoch,
        "start_offset": result.start_offset,
        "delivery_complete_count": result.delivery_complete_count,
    }


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    shares = ctx.services.shares

    async def run(topic: Any, partition: Any) -> Result:
        return await shares.read_summary(
            request.group_id, topic.topic_id, partition.partition, partition.leader_epoch
        )

    return await answer(ctx, request, SummaryResult, run, _shape)
