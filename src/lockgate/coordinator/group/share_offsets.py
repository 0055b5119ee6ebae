# The share offsets admin APIs on the group coordinator (KIP-932, Kafka 4.4):
# DescribeShareGroupOffsets reads each share partition's start offset through the persister's
# read_summary and computes its lag (high watermark - start offset - delivery complete count);
# AlterShareGroupOffsets (an Empty or missing share group: it is created) marks the partitions
# initializing, then initializes them with the given start offsets; DeleteShareGroupOffsets (an
# Empty share group) moves a topic's initialized partitions to deleting, deletes their state,
# then forgets them. Authorization and the topics a caller may see are the handlers'.
#
# Invariant: the records of a step are durable before the persister is called, and the
# persister's outcome is recorded after it (as Kafka: a failure leaves Alter's partitions
# initializing, to be asked again by a heartbeat, and Delete's topics deleting).
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from lockgate.coordinator import writes
from lockgate.coordinator.group.share_group import (
    ShareGroup,
    TopicInit,
    add_initializing,
    finish_deleting,
    initialized,
    start_deleting,
)
from lockgate.coordinator.group.share_runtime import ShareProtocol
from lockgate.coordinator.share.results import UNINITIALIZED_START_OFFSET, SummaryResult
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UNINITIALIZED_LAG = -1
NO_OFFSETS_TO_DELETE = "There is no offset information to delete."
TOPIC_DENIED = "Topic authorization failed."  # (the handlers authorize: the coordinator never)
_MESSAGES = {
    ErrorCode.topic_authorization_failed: TOPIC_DENIED,
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.non_empty_group: "The group is not empty.",
}


def message(code: ErrorCode) -> str | None:
    """Kafka's default message of the codes these APIs answer with one."""
    return _MESSAGES.get(code)


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = UNINITIALIZED_START_OFFSET
    leader_epoch: int = 0
    lag: int = UNINITIALIZED_LAG
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    name: str
    topic_id: uuid.UUID | None  # None: the zero uuid (the topic does not exist)
    partitions: tuple[PartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class PartitionError:
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionError] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AlterResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topics: tuple[AlterTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str
    topic_id: uuid.UUID | None
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topics: tuple[DeleteTopic, ...] = ()


# (topic, partition) → the high watermark, or the error reading it (from its leader, which may
# be another broker: cluster/latest_offsets.py)
LatestOffset = Callable[[str, int], Awaitable[int | ErrorCode]]


class ShareOffsets:
    def __init__(self, share: ShareProtocol, latest: LatestOffset) -> None:
        """`share`: the share groups and their persister; `latest`: a partition's latest
        offset (the high watermark), for the lag."""
        self._share = share
        self.latest = latest

    def _group(self, group_id: str) -> ShareGroup | ErrorCode | str:
        """The share group; a coordinator error; or GROUP_ID_NOT_FOUND's message."""
        if unavailable := self._share.unavailable(group_id):
            return unavailable
        container = self._share.groups.get(group_id)
        if container is None:
            return f"Group {group_id} not found."
        if container.share is None:
            return f"Group {group_id} is not a share group."
        return container.share

    # -- DescribeShareGroupOffsets ---------------------------------------------------------------

    async def describe(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None
    ) -> tuple[ErrorCode, list[TopicOffsets]]:
        """The start offsets (and lags) of the named partitions, or (None) of every initialized
        share partition of the group. A topic that does not exist answers -1 and no error; the
        group need not exist (it simply has no state)."""
        if unavailable := self._share.unavailable(group_id):
            return unavailable, []
        meta = self._share.topic_meta()
        wanted: list[tuple[str, uuid.UUID, list[int]]] = []
        missing: list[TopicOffsets] = []
        if topics is None:
            container = self._share.groups.get(group_id)
            state = container.share.partitions if container and container.share else None
            names = {topic_id: name for name, (topic_id, _c) in meta.items()}
            for topic_id, entry in (state.initialized if state else {}).items():
                if topic_id in names:
                    wanted.append((names[topic_id], topic_id, sorted(entry.partitions)))
        else:
            for name, partitions in topics:
                if name in meta:
                    wanted.append((name, meta[name][0], list(partitions)))
                else:
                    missing.append(
                        TopicOffsets(name, None, tuple(PartitionOffset(p) for p in partitions))
                    )
        answered = []
        for name, topic_id, parts in wanted:
            summaries = await self._summaries(group_id, name, topic_id, parts)
            answered.append(TopicOffsets(name, topic_id, tuple(summaries)))
        return ErrorCode.none, answered + missing

    async def _summaries(
        self, group_id: str, topic: str, topic_id: uuid.UUID, partitions: list[int]
    ) -> list[PartitionOffset]:
        persister = self._share.persister
        if persister is None:
            return [PartitionOffset(p) for p in partitions]
        results = await asyncio.gather(
            *(persister.read_summary(group_id, topic_id, p, 0) for p in partitions)
        )
        lagging = [p for p, result in zip(partitions, results, strict=True) if _has_lag(result)]
        ends = await asyncio.gather(*(self.latest(topic, p) for p in lagging))
        latest = dict(zip(lagging, ends, strict=True))
        answers = []
        for partition, result in zip(partitions, results, strict=True):
            ok = result.error == ErrorCode.none
            if not _has_lag(result):
                answers.append(
                    PartitionOffset(
                        partition,
                        result.start_offset if ok else UNINITIALIZED_START_OFFSET,
                        result.leader_epoch if ok else 0,
                    )
                )
                continue
            end = latest[partition]
            if isinstance(end, ErrorCode):
                answers.append(PartitionOffset(partition, 0, 0, 0, end))
                continue
            lag = end - result.start_offset - result.delivery_complete_count
            answers.append(
                PartitionOffset(partition, result.start_offset, result.leader_epoch, lag)
            )
        return answers

    # -- AlterShareGroupOffsets ------------------------------------------------------------------

    async def alter(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[tuple[int, int]]]]
    ) -> AlterResult:
        """Resets start offsets: the group must be Empty (a missing one is created)."""
        if unavailable := self._share.unavailable(group_id):
            return AlterResult(unavailable)
        if not group_id:
            return AlterResult(ErrorCode.invalid_group_id)
        container = self._share.groups.get(group_id)
        if container is not None and container.share is None:
            return AlterResult(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
            )
        group = container.share if container is not None else None
        group = group or ShareGroup(group_id)
        if group.members:
            return AlterResult(ErrorCode.non_empty_group, message(ErrorCode.non_empty_group))
        meta = self._share.topic_meta()
        now = self._share.clock()
        answers: list[AlterTopic] = []
        change: dict[uuid.UUID, TopicInit] = {}
        offsets: dict[uuid.UUID, dict[int, int]] = {}
        unknown = ErrorCode.unknown_topic_or_partition
        for name, partitions in topics:
            if name not in meta:
                answers.append(AlterTopic(name, None, [PartitionError(p, unknown, message(unknown))
                                                       for p, _o in partitions]))  # fmt: skip
                continue
            topic_id, count = meta[name]
            answer = AlterTopic(name, topic_id)
            for partition, start in partitions:
                if partition < count:
                    answer.partitions.append(PartitionError(partition))
                    offsets.setdefault(topic_id, {})[partition] = start
                else:
                    answer.partitions.append(PartitionError(partition, unknown, message(unknown)))
            answers.append(answer)
            valid = frozenset(p for p, _o in partitions if p < count)
            change[topic_id] = TopicInit(
                name, valid | change.get(topic_id, TopicInit(name, frozenset())).partitions, now
            )
        group, records = add_initializing(group, change, now)
        if records:
            container = self._share.install(group)
            try:
                await self._share.append(group_id, tuple(records))
            except writes.WriteFailure as exc:
                return AlterResult(writes.write_error(exc, ErrorCode.coordinator_not_available))
        if not offsets:
            return AlterResult(topics=tuple(answers))
        return await self._initialize(group, offsets, answers)

    async def _initialize(
        self, group: ShareGroup, offsets: dict[uuid.UUID, dict[int, int]], answers: list[AlterTopic]
    ) -> AlterResult:
        persister = self._share.persister
        keys = [(t, p, o) for t, parts in sorted(offsets.items(), key=lambda i: i[0].bytes)
                for p, o in sorted(parts.items())]  # fmt: skip
        if persister is None:
            errors = {(t, p): ErrorCode.coordinator_not_available for t, p, _o in keys}
        else:
            results = await asyncio.gather(
                *(persister.initialize(group.group_id, t, p, group.group_epoch, o)
                  for t, p, o in keys)
            )  # fmt: skip
            errors = {
                (t, p): r.error for (t, p, _o), r in zip(keys, results, strict=True) if r.error
            }
        if errors:  # (the partitions stay initializing: a heartbeat asks again)
            for answer in answers:
                for i, entry in enumerate(answer.partitions):
                    code = (
                        errors.get((answer.topic_id, entry.partition)) if answer.topic_id else None
                    )
                    if code and not entry.error:
                        answer.partitions[i] = PartitionError(entry.partition, code)
            return AlterResult(topics=tuple(answers))
        current = self._share.current(group.group_id)
        if current is not None:
            done = {t: frozenset(parts) for t, parts in offsets.items()}
            updated, records = initialized(
                current, done, self._share.topic_meta(), self._share.clock()
            )
            self._share.install(updated)
            try:
                await self._share.append(group.group_id, tuple(records))
            except writes.WriteFailure as exc:  # (initialized all the same: a heartbeat asks
                # again after the retry interval and records it then)
                log.warning("share group %s: initialization not recorded: %s", group.group_id, exc)
        return AlterResult(topics=tuple(answers))

    # -- DeleteShareGroupOffsets -----------------------------------------------------------------

    async def delete(self, group_id: str, topics: Sequence[str]) -> DeleteResult:
        """Deletes the share state of whole topics: the group must exist, be a share group
        and be Empty."""
        if not group_id:
            return DeleteResult(ErrorCode.invalid_group_id)
        found = self._group(group_id)
        if isinstance(found, ErrorCode):
            return DeleteResult(found)
        if isinstance(found, str):
            return DeleteResult(ErrorCode.group_id_not_found, found)
        if found.members:
            return DeleteResult(ErrorCode.non_empty_group, message(ErrorCode.non_empty_group))
        state = found.partitions
        if state is None:
            return DeleteResult()  # (nothing of the group's is known: no answer per topic)
        meta = self._share.topic_meta()
        errors: list[DeleteTopic] = []
        doomed: dict[uuid.UUID, tuple[str, list[int]]] = {}
        unknown = ErrorCode.unknown_topic_or_partition
        for name in topics:
            if name not in meta:
                errors.append(DeleteTopic(name, None, unknown, message(unknown)))
                continue
            topic_id, count = meta[name]
            if topic_id in state.initialized:
                doomed[topic_id] = (name, sorted(state.initialized[topic_id].partitions))
            elif topic_id in state.deleting:
                doomed[topic_id] = (name, list(range(count)))
            else:
                errors.append(DeleteTopic(name, None, unknown, NO_OFFSETS_TO_DELETE))
        names = {t: name for t, (name, _p) in doomed.items()}
        group, records = start_deleting(found, doomed, names, self._share.clock())
        self._share.install(group)
        try:
            await self._share.append(group_id, tuple(records))
        except writes.WriteFailure as exc:
            return DeleteResult(writes.write_error(exc, ErrorCode.coordinator_not_available))
        if not doomed:
            return DeleteResult(topics=tuple(errors))
        persister = self._share.persister
        succeeded: list[DeleteTopic] = []
        for topic_id, (name, partitions) in doomed.items():
            if persister is None:
                codes = [ErrorCode.coordinator_not_available]
            else:
                results = await asyncio.gather(
                    *(persister.delete(group_id, topic_id, p) for p in partitions)
                )
                codes = [r.error for r in results if r.error]
            if codes:
                errors.append(DeleteTopic(name, topic_id, codes[0], None))
            else:
                succeeded.append(DeleteTopic(name, topic_id))
        current = self._share.current(group_id)
        if succeeded and current is not None:
            updated, more = finish_deleting(
                current, [t.topic_id for t in succeeded if t.topic_id], self._share.clock()
            )
            self._share.install(updated)
            try:
                await self._share.append(group_id, tuple(more))
            except writes.WriteFailure as exc:
                return DeleteResult(writes.write_error(exc, ErrorCode.coordinator_not_available))
        return DeleteResult(topics=tuple(errors + succeeded))


def _has_lag(result: SummaryResult) -> bool:
    """Whether a partition's summary gets a lag (else -1, as Kafka: no state, or an error)."""
    return (
        result.error == ErrorCode.none
        and result.start_offset != UNINITIALIZED_START_OFFSET
        and result.delivery_complete_count >= 0
    )
