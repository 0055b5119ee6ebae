"""ReadShareGroupState (key 84), version 0.

Behaviour (the share-partition leader asks the share coordinator; handlers/share_state.py for
what the five share-state APIs share):
- Answers each share partition's state epoch, start offset and persisted state batches. A
  leader epoch newer than any recorded is recorded first (a record appended, answered once
  durable): the previous leader's writes are fenced from then on.
- Null topic id, negative partition or leader epoch, or a share partition never initialized:
  INVALID_REQUEST. A leader epoch older than the recorded one: FENCED_LEADER_EPOCH. Topic id
  unknown or partition past its count: UNKNOWN_TOPIC_OR_PARTITION. NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE as the coordinator is.
- Authorization: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 flexible (the only version).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.share.results import ReadResult, Result
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_state import answer, error_fields
from lockgate.protocol.api import ApiKey


def _shape(result: Result) -> dict[str, Any]:
    assert isinstance(result, ReadResult)
    return {
        **error_fields(result),
        "state_epoch": result.state_epoch,
        "start_offset": result.start_offset,
        "state_batches": [
            {
                "first_offset": batch.first_offset,
                "last_offset": batch.last_offset,
                "delivery_state": batch.delivery_state,
                "delivery_count": batch.delivery_count,
            }
            for batch in result.state_batches
        ],
    }


@handles(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    shares = ctx.services.shares

    async def run(topic: Any, partition: Any) -> Result:
        return await shares.read(
            request.group_id, topic.topic_id, partition.partition, partition.leader_epoch
        )

    return await answer(ctx, request, ReadResult, run, _shape)
