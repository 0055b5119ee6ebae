# The persister every broker uses (Kafka's DefaultStatePersister with its PersisterStateManager):
# each call goes to the share coordinator of its share partition, wherever that is. The
# coordinator is the leader of the share partition's __share_group_state partition
# (FindCoordinator key type 2's answer, from this broker's own view): this broker's share
# coordinator is called in-process, another broker's through its share-state API (83-87) over
# this broker's inter-broker connection to it. A single node coordinates every share partition.
#
# A state initialized (reset) or deleted successfully is told to `on_reset` (the share-partition
# leader of this broker forgets what it had loaded of it and reads it again; a leader on another
# broker learns it from the new state epoch, which fences its next write).
#
# Passing answers are retried here, as Kafka's persister does, so that callers see them only once
# the coordinator has stayed unavailable for `timeout_ms`: a coordinator that moved, is loading,
# is not elected yet, cannot be reached, or whose topic is still being made. Every other answer
# (fences, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, ...) goes to the caller at once.
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lockgate.client.errors import KafkaError
from lockgate.cluster.metadata import BrokerRegistration
from lockgate.cluster.peers import PeerConnections
from lockgate.coordinator.share.records import ShareKey, StateBatch
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.coordinator.share.routing import coordinator_key
from lockgate.coordinator.share.service import ShareCoordinator
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

R = TypeVar("R", StateResult, ReadResult, SummaryResult)

PASSING = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
    }
)
BACKOFF_INITIAL_S = 0.05
BACKOFF_MAX_S = 1.0
_EMPTY = "the share coordinator answered no partition"
WRITE_VERSION = 1  # WriteShareGroupState v1 carries the delivery complete count (KIP-1226)
SUMMARY_VERSION = 1

Locate = Callable[[str], BrokerRegistration | ErrorCode]


class RoutedPersister:
    def __init__(
        self,
        local: ShareCoordinator,
        node_id: int,
        locate: Locate,
        peers: PeerConnections | None,
        timeout_ms: int,
        on_reset: Callable[[str, uuid.UUID], object] | None = None,
    ) -> None:
        """`locate` answers the coordinator of a routing key ("group:topicId:partition", the
        locator's SHARE lookup); `peers` reaches the other brokers (None: a single node,
        where everything is `local`)."""
        self._local = local
        self._node_id = node_id
        self._locate = locate
        self._peers = peers
        self._timeout_s = timeout_ms / 1000
        self._on_reset = on_reset

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
        start_offset: int,
    ) -> StateResult:  # fmt: skip
        result = await self._call(
            _INITIALIZE, ShareKey(group_id, topic_id, partition),
            {"state_epoch": state_epoch, "start_offset": start_offset},
            lambda: self._local.initialize(group_id, topic_id, partition, state_epoch,
                                           start_offset),
        )  # fmt: skip
        return self._reset(group_id, topic_id, result)

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ReadResult:
        return await self._call(
            _READ, ShareKey(group_id, topic_id, partition), {"leader_epoch": leader_epoch},
            lambda: self._local.read(group_id, topic_id, partition, leader_epoch),
        )  # fmt: skip

    async def write(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
        leader_epoch: int, start_offset: int, delivery_complete_count: int,
        state_batches: Sequence[StateBatch],
    ) -> StateResult:  # fmt: skip
        fields = {
            "state_epoch": state_epoch,
            "leader_epoch": leader_epoch,
            "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count,
            "state_batches": [
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": b.delivery_state,
                    "delivery_count": b.delivery_count,
                }
                for b in state_batches
            ],
        }
        return await self._call(
            _WRITE, ShareKey(group_id, topic_id, partition), fields,
            lambda: self._local.write(group_id, topic_id, partition, state_epoch, leader_epoch,
                                      start_offset, delivery_complete_count, state_batches),
        )  # fmt: skip

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateResult:
        result = await self._call(
            _DELETE, ShareKey(group_id, topic_id, partition), {},
            lambda: self._local.delete(group_id, topic_id, partition),
        )  # fmt: skip
        return self._reset(group_id, topic_id, result)

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> SummaryResult:
        return await self._call(
            _SUMMARY, ShareKey(group_id, topic_id, partition), {"leader_epoch": leader_epoch},
            lambda: self._local.read_summary(group_id, topic_id, partition, leader_epoch),
        )  # fmt: skip

    def _reset(self, group_id: str, topic_id: uuid.UUID, result: StateResult) -> StateResult:
        if result.error == ErrorCode.none and self._on_reset is not None:
            self._on_reset(group_id, topic_id)
        return result

    async def close(self) -> None:
        if self._peers is not None:
            await self._peers.close()

    # -- routing and retries -------------------------------------------------------------------

    async def _call(
        self,
        api: _Api[R],
        key: ShareKey,
        fields: dict[str, Any],
        local: Callable[[], Awaitable[R]],
    ) -> R:
        """One share partition's call at its coordinator (`local`, or `api` with `fields` for
        the partition over the wire), passing answers retried with backoff until `timeout_ms`
        has gone by (then the last one is the answer)."""
        deadline = time.monotonic() + self._timeout_s
        backoff = BACKOFF_INITIAL_S
        while True:
            result = await self._once(api, key, fields, local)
            if result.error not in PASSING or time.monotonic() + backoff > deadline:
                return result
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _once(
        self,
        api: _Api[R],
        key: ShareKey,
        fields: dict[str, Any],
        local: Callable[[], Awaitable[R]],
    ) -> R:
        if self._peers is None:
            return await local()
        found = self._locate(coordinator_key(key))
        if isinstance(found, ErrorCode):
            return api.kind(error=found, message=found.name)
        if found.node_id == self._node_id:
            return await local()
        body = {
            "group_id": key.group_id,
            "topics": [
                {"topic_id": key.topic_id, "partitions": [{"partition": key.partition, **fields}]}
            ],
        }
        try:
            connection = await self._peers.get(found.node_id)
            response = await connection.request(api.key, body, version=api.version)
        except (TimeoutError, KafkaError, OSError) as exc:
            log.info("cannot reach share coordinator %d for %s: %s", found.node_id,
                     coordinator_key(key), exc)  # fmt: skip
            return api.kind(error=ErrorCode.coordinator_not_available, message=str(exc))
        if not response.results or not response.results[0].partitions:
            return api.kind(error=ErrorCode.unknown_server_error, message=_EMPTY)
        return api.parse(response.results[0].partitions[0])


def _state(answer: Any) -> StateResult:
    return StateResult(ErrorCode(answer.error_code), answer.error_message)


def _read(answer: Any) -> ReadResult:
    batches = tuple(
        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        for b in answer.state_batches
    )
    return ReadResult(ErrorCode(answer.error_code), answer.error_message, answer.state_epoch,
                      answer.start_offset, batches)  # fmt: skip


def _summary(answer: Any) -> SummaryResult:
    return SummaryResult(ErrorCode(answer.error_code), answer.error_message, answer.state_epoch,
                         answer.leader_epoch, answer.start_offset,
                         answer.delivery_complete_count)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Api(Generic[R]):
    """A share-state API as this persister calls it on another broker: its result type, key,
    version, and the parse of the one partition's answer."""

    kind: type[R]
    key: ApiKey
    version: int
    parse: Callable[[Any], R]


_INITIALIZE = _Api(StateResult, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, _state)
_READ = _Api(ReadResult, ApiKey.READ_SHARE_GROUP_STATE, 0, _read)
_WRITE = _Api(StateResult, ApiKey.WRITE_SHARE_GROUP_STATE, WRITE_VERSION, _state)
_DELETE = _Api(StateResult, ApiKey.DELETE_SHARE_GROUP_STATE, 0, _state)
_SUMMARY = _Api(SummaryResult, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, SUMMARY_VERSION, _summary)
