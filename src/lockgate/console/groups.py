# console/groups.py — what the console's group pages show and do: every group (classic,
# consumer protocol KIP-848, share KIP-932) a page at a time, one group's members, committed
# offsets and lag, its total lag for the lag chart, and resetting or deleting a group.
#
# Invariants: a list page costs one ListGroups per broker and one describe of at most a page of
# groups, however many groups exist. A reset is planned first (plan_reset) and applied only as
# planned (apply_reset) to a group without members, the CLI's rule (tools/group_resets.py).
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.admin_groups import GroupDescription, GroupListing
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError
from lockgate.console.paging import PAGE_SIZE, page_of
from lockgate.tools import group_resets
from lockgate.tools.common import ToolError
from lockgate.tools.group_lag import PartitionLag, partition_lags
from lockgate.tools.group_resets import ResetKind, ResetTarget
from lockgate.tools.offset_lookup import scoped_partitions
from lockgate.tools.offset_specs import parse_datetime_ms

SHARE = "share"


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    group_type: str  # classic, consumer or share ("" from a broker before ListGroups v5)
    state: str
    protocol_type: str
    assignor: str  # "" when the group could not be described
    members: int | None  # None when the group could not be described
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupPage:
    rows: tuple[GroupRow, ...]
    page: int  # 1-based
    pages: int
    matching: int  # groups matching the filter, on every page
    total: int  # groups in the cluster
    name_filter: str


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDetail:
    group_id: str
    group_type: str
    state: str
    protocol_type: str
    assignor: str
    coordinator_id: int
    group_epoch: int  # -1 for classic groups
    members: tuple[Member, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None and p.lag > 0)


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic_partition: TopicPartition
    current: int | None  # the committed offset now (None: none committed)
    new: int


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group_id: str
    state: str
    target: ResetTarget
    topic: str | None  # None: every topic the group has offsets for
    offsets: tuple[PlannedOffset, ...]
    warnings: tuple[str, ...]

    def as_offsets(self) -> dict[TopicPartition, int]:
        return {p.topic_partition: p.new for p in self.offsets}


def _type_of(listing: GroupListing) -> str:
    if listing.group_type:
        return listing.group_type
    return "share" if listing.protocol_type == SHARE else "classic"


async def list_groups(
    admin: Admin, *, name_filter: str = "", page: int = 1, page_size: int = PAGE_SIZE
) -> GroupPage:
    """Groups whose id contains `name_filter` (case-insensitive), sorted by id, one page of
    them described (assignor and member count). A page past the end shows the last page."""
    listings = await admin.list_groups()
    wanted = name_filter.strip().lower()
    matching = [g for g in listings if wanted in g.group_id.lower()]
    shown, page, pages = page_of(matching, page, page_size)
    described = await _describe_page(admin, shown)
    rows = []
    for listing in shown:
        group_type = _type_of(listing)
        found = described.get(listing.group_id)
        rows.append(
            GroupRow(
                listing.group_id,
                group_type,
                listing.state or (found[0] if found else ""),
                listing.protocol_type,
                found[1] if found else "",
                found[2] if found else None,
                listing.coordinator_id,
            )
        )
    return GroupPage(tuple(rows), page, pages, len(matching), len(listings), name_filter)


async def _describe_page(
    admin: Admin, shown: Sequence[GroupListing]
) -> dict[str, tuple[str, str, int]]:
    """(state, assignor, member count) of the groups shown. Classic and consumer groups are
    described in one batch per coordinator; share groups one by one. A group deleted since
    the listing is left out (its row shows what ListGroups said)."""
    found: dict[str, tuple[str, str, int]] = {}
    others = [g.group_id for g in shown if _type_of(g) != SHARE]
    if others:
        try:
            for group_id, description in (await admin.describe_groups(others)).items():
                found[group_id] = (
                    description.state,
                    description.protocol,
                    len(description.members),
                )
        except KafkaError as exc:
            if exc.code != ErrorCode.group_id_not_found:
                raise
    for listing in shown:
        if _type_of(listing) != SHARE:
            continue
        try:
            share = (await admin.describe_share_groups([listing.group_id]))[listing.group_id]
        except KafkaError as exc:
            if exc.code != ErrorCode.group_id_not_found:
                raise
            continue
        found[listing.group_id] = (share.state, share.assignor, len(share.members))
    return found


async def describe_group(admin: Admin, group_id: str) -> GroupDetail:
    """Members, assignments, committed offsets and lag. A group nobody knows raises
    GROUP_ID_NOT_FOUND; a share group shows its share-partition start offsets and lag."""
    listings = {g.group_id: g for g in await admin.list_groups()}
    listing = listings.get(group_id)
    if listing is not None and _type_of(listing) == SHARE:
        return await _describe_share_group(admin, group_id)
    description = (await admin.describe_groups([group_id]))[group_id]
    lags = await partition_lags(admin, group_id, description.members)
    return _detail(description, tuple(lags))


def _detail(description: GroupDescription, lags: tuple[PartitionLag, ...]) -> GroupDetail:
    return GroupDetail(
        description.group_id,
        description.group_type,
        description.state,
        description.protocol_type,
        description.protocol,
        description.coordinator_id,
        description.group_epoch,
        tuple(
            Member(m.member_id, m.group_instance_id, m.client_id, m.host, m.assignment)
            for m in description.members
        ),
        lags,
    )


async def _describe_share_group(admin: Admin, group_id: str) -> GroupDetail:
    share = (await admin.describe_share_groups([group_id]))[group_id]
    owner = {tp: m.member_id for m in share.members for tp in m.assignment}
    offsets = await admin.describe_share_group_offsets(group_id)
    partitions = sorted(set(offsets) | set(owner))
    lags = []
    for tp in partitions:
        offset = offsets.get(tp)
        start = None if offset is None else offset.start_offset
        lag = None if offset is None else offset.lag
        # the end offset is what the start offset and lag imply (DescribeShareGroupOffsets v1)
        end = -1 if start is None or lag is None else start + lag
        lags.append(PartitionLag(tp, start, end, owner.get(tp)))
    return GroupDetail(
        share.group_id,
        SHARE,
        share.state,
        SHARE,
        share.assignor,
        share.coordinator_id,
        share.group_epoch,
        tuple(Member(m.member_id, None, m.client_id, m.host, m.assignment) for m in share.members),
        tuple(lags),
    )


async def total_lag(admin: Admin, group_id: str) -> int:
    """The group's lag summed over its partitions: one sample of the lag chart."""
    return (await describe_group(admin, group_id)).total_lag


def parse_target(kind: str, value: str) -> ResetTarget:
    """A reset target from the form: kind earliest/latest/current (no value), offset (N ≥ 0),
    shift (±N), timestamp (ms since the epoch, or an ISO-8601 date-time). ValueError with a
    message for the operator otherwise."""
    try:
        chosen = ResetKind(kind)
    except ValueError:
        raise ValueError(f"unknown reset target {kind!r}") from None
    if chosen in (ResetKind.EARLIEST, ResetKind.LATEST, ResetKind.CURRENT):
        return ResetTarget(chosen)
    text = value.strip()
    if chosen is ResetKind.TIMESTAMP:
        return ResetTarget(chosen, _parse_time(text))
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{chosen.value} needs an integer, got {text!r}") from None
    if chosen is ResetKind.OFFSET and number < 0:
        raise ValueError(f"an offset cannot be negative, got {number}")
    return ResetTarget(chosen, number)


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return parse_datetime_ms(text)
    except ToolError:
        raise ValueError(
            f"a time is milliseconds since the epoch or YYYY-MM-DDTHH:mm:SS[Z|+HH:MM], got {text!r}"
        ) from None


async def plan_reset(
    admin: Admin, group_id: str, target: ResetTarget, topic: str | None = None
) -> ResetPlan:
    """The dry run: the new offset of each partition of `topic` (TOPIC or TOPIC:P,P as the
    CLI's --topic; None: every topic the group has offsets for), nothing changed. A group with
    members raises GroupNotInactiveError with Kafka's message."""
    state = await group_resets.check_inactive(admin, group_id)
    committed = await admin.list_group_offsets(group_id)
    partitions = await scoped_partitions(admin, [topic] if topic else [], committed)
    planned = await group_resets.plan_reset(admin, group_id, committed, partitions, target)
    return ResetPlan(
        group_id,
        state,
        target,
        topic,
        tuple(
            PlannedOffset(tp, committed.get(tp), offset)
            for tp, offset in sorted(planned.offsets.items())
        ),
        planned.warnings,
    )


async def apply_reset(admin: Admin, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Commits the offsets of a confirmed plan, after checking again that the group has no
    members (it may have gained some since the dry run)."""
    await group_resets.check_inactive(admin, group_id)
    await group_resets.apply_reset(admin, group_id, offsets)


async def delete_group(admin: Admin, group_id: str, group_type: str = "") -> None:
    """Deletes a group without members (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if
    unknown); share groups through DeleteShareGroups' path of the admin."""
    if group_type == SHARE:
        error = (await admin.delete_share_groups([group_id])).get(group_id)
        if error is not None:
            raise error
        return
    await admin.delete_groups([group_id])
