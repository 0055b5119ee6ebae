# tools/group_resets.py — planning and applying a consumer group's offset reset, shared by
# `lockgate groups reset-offsets` and the console's group page: the new offsets (earliest,
# latest, current, an offset, a shift, a time), clamped to the log as Kafka's tool does, with
# the warnings Kafka's tool prints, and the refusal of groups that still have members.
#
# Invariant: offsets are only reset for groups without members (Empty, or Dead: unknown), as
# Kafka's tool insists: a live member would overwrite them with its next commit.
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError
from lockgate.tools.common import ToolError
from lockgate.tools.offset_lookup import EARLIEST, LATEST, offsets_at
from lockgate.tools.offset_specs import Plan, clamp

INACTIVE_STATES = frozenset({"Empty", "Dead"})


class ResetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    CURRENT = "current"
    OFFSET = "offset"
    SHIFT = "shift"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    kind: ResetKind
    value: int = 0  # the offset (OFFSET), the shift (SHIFT) or ms since the epoch (TIMESTAMP)


@dataclass(frozen=True, slots=True)
class PlannedReset:
    offsets: Mapping[TopicPartition, int]
    warnings: tuple[str, ...]  # targets moved to the log's ends, as Kafka's tool warns


class GroupNotInactiveError(ToolError):
    """The group has members: its offsets cannot be reset (Kafka's message)."""

    def __init__(self, group: str, state: str) -> None:
        super().__init__(
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {state}."
        )
        self.group = group
        self.state = state


async def group_state(admin: Admin, group: str) -> str:
    try:
        return (await admin.describe_groups([group]))[group].state
    except KafkaError as exc:
        if exc.code == ErrorCode.group_id_not_found:
            return "Dead"  # what Kafka's tool calls a group nobody knows: resettable
        raise


async def check_inactive(admin: Admin, group: str) -> str:
    """The group's state; GroupNotInactiveError unless it is Empty or Dead."""
    state = await group_state(admin, group)
    if state not in INACTIVE_STATES:
        raise GroupNotInactiveError(group, state)
    return state


async def clamped(admin: Admin, requested: Plan) -> PlannedReset:
    partitions = sorted(requested)
    earliest = await offsets_at(admin, partitions, EARLIEST)
    latest = await offsets_at(admin, partitions, LATEST)
    plan: Plan = {}
    warnings = []
    for tp in partitions:
        plan[tp] = clamp(requested[tp], earliest[tp], latest[tp])
        if plan[tp] != requested[tp]:
            side = (
                "higher than the latest"
                if requested[tp] > latest[tp]
                else "lower than the earliest"
            )
            warnings.append(
                f"new offset {requested[tp]} is {side} offset of {tp}; using {plan[tp]}"
            )
    return PlannedReset(plan, tuple(warnings))


async def _at_timestamp(admin: Admin, partitions: list[TopicPartition], when: int) -> PlannedReset:
    """The first offset at or after the timestamp; the latest offset where no record is that
    recent (Kafka's tool does the same, with a warning)."""
    plan = await offsets_at(admin, partitions, when)
    beyond = [tp for tp, offset in plan.items() if offset < 0]
    if beyond:
        plan.update(await offsets_at(admin, beyond, LATEST))
    return PlannedReset(
        plan,
        tuple(f"{tp} has no record at or after {when}: using its latest offset" for tp in beyond),
    )


async def plan_reset(
    admin: Admin,
    group: str,
    committed: Mapping[TopicPartition, int],
    partitions: Sequence[TopicPartition],
    target: ResetTarget,
) -> PlannedReset:
    """The new offset of each partition in scope (none: an empty plan). A shift needs a
    committed offset for every partition (ToolError otherwise)."""
    partitions = list(partitions)
    if not partitions:
        return PlannedReset({}, ())
    if target.kind is ResetKind.EARLIEST:
        return PlannedReset(await offsets_at(admin, partitions, EARLIEST), ())
    if target.kind is ResetKind.LATEST:
        return PlannedReset(await offsets_at(admin, partitions, LATEST), ())
    if target.kind is ResetKind.CURRENT:
        plan = {tp: committed[tp] for tp in partitions if tp in committed}
        missing = [tp for tp in partitions if tp not in committed]
        plan.update(await offsets_at(admin, missing, LATEST) if missing else {})
        return PlannedReset(plan, ())
    if target.kind is ResetKind.OFFSET:
        return await clamped(admin, {tp: target.value for tp in partitions})
    if target.kind is ResetKind.SHIFT:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise ToolError(
                f"cannot shift the offset of {missing[0]}: group {group} has no committed "
                "offset for it"
            )
        return await clamped(admin, {tp: committed[tp] + target.value for tp in partitions})
    return await _at_timestamp(admin, partitions, target.value)


async def apply_reset(admin: Admin, group: str, plan: Mapping[TopicPartition, int]) -> None:
    """Commits the plan; a group that gained members since it was checked is refused with a
    ToolError saying so."""
    try:
        await admin.alter_group_offsets(group, plan)
    except KafkaError as exc:
        if exc.code not in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            raise
        raise ToolError(
            f"{exc} (a group with members cannot be reset: stop its consumers first)"
        ) from exc
