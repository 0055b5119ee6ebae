# What the five share-state APIs (InitializeShareGroupState 83, ReadShareGroupState 84,
# WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) have in
# common, as Kafka's KafkaApis and ShareCoordinatorService answer them:
# - CLUSTER_ACTION on the cluster (brokers send them), else CLUSTER_AUTHORIZATION_FAILED for
#   every partition of the request;
# - no topics, a topic with no partitions, or an empty group id: an empty answer (no results);
# - each (group, topic, partition) is its own operation on its own state partition, all run
#   at once; the results are grouped by topic in the request's order.
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from lockgate.coordinator.share.results import Result
from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

CLUSTER_DENIED = "Cluster authorization failed."


async def answer(
    ctx: RequestContext,
    request: Any,
    kind: type[Result],
    run: Callable[[Any, Any], Awaitable[Result]],
    shape: Callable[[Result], dict[str, Any]],
) -> dict[str, Any]:
    """The response body: `run(topic, partition)` per partition of the request, each result
    (of type `kind`) shaped by `shape` into the API's partition fields; or the refusals."""
    if not authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        denied = kind(error=ErrorCode.cluster_authorization_failed, message=CLUSTER_DENIED)
        done: list[Result] = [denied for topic in request.topics for _ in topic.partitions]
    elif (
        not request.topics
        or any(not topic.partitions for topic in request.topics)
        or not request.group_id
    ):
        return {"results": []}
    else:
        jobs = [run(topic, each) for topic in request.topics for each in topic.partitions]
        done = list(await asyncio.gather(*jobs))
    results = iter(done)
    return {
        "results": [
            {
                "topic_id": topic.topic_id,
                "partitions": [
                    {**shape(next(results)), "partition": each.partition}
                    for each in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


def error_fields(result: Result) -> dict[str, Any]:
    return {"error_code": result.error, "error_message": result.message}
