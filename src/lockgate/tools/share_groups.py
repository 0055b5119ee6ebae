# tools/share_groups.py — `lockgate share-groups`, kafka-share-groups.sh for any broker that
# serves share groups (KIP-932): --list [--state], --describe (offsets by default, --members,
# --state, --verbose), --delete, --reset-offsets and --delete-offsets, with Kafka 4.4's options,
# option checks, columns and messages.
#
# The option checks and the tables are pure functions (no I/O) so that each has a unit test.
# Differences from Kafka's tool, on purpose: failures go to stderr with a non-zero exit code
# (Kafka prints many of them on stdout and exits 0), error names are Kafka's error codes rather
# than Java exception classes, and --by-duration (as kafka-consumer-groups.sh has it) is
# accepted besides Kafka's reset specifications.
#
# Invariant: offsets are only reset for a group without members (Empty, or one nobody knows:
# AlterShareGroupOffsets creates it), as Kafka's tool insists.
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.admin_share_groups import (
    ShareGroupDescription,
    ShareGroupListing,
    SharePartitionOffset,
)
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError, error_for
from lockgate.tools.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    ToolError,
    connection_options,
    tool,
)
from lockgate.tools.offset_lookup import EARLIEST, LATEST, offsets_at, scoped_partitions
from lockgate.tools.offset_specs import (
    Plan,
    clamp,
    export_csv,
    parse_datetime_ms,
    parse_duration_ms,
    parse_reset_csv,
)

MISSING = "-"  # Kafka's tool's placeholder for a value it does not have
# the states a share group can be in, in the order Kafka's message lists them
SHARE_GROUP_STATES = ("Stable", "Dead", "Empty")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
# in the order Kafka's tool checks them for conflicts (its messages list them sorted)
RESET_SPECS = (
    "to_datetime",
    "by_duration",
    "to_earliest",
    "to_latest",
    "to_offset",
    "to_current",
    "from_file",
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "share-groups",
        parents=[connection_options()],
        help="list, describe, delete share groups and reset their offsets (kafka-share-groups.sh)",
    )
    add = parser.add_argument
    add("--list", action="store_true", help="list share groups (with --state: and their state)")
    add("--describe", action="store_true", help="offsets (default), --members or --state")
    add("--delete", action="store_true", help="delete empty share groups")
    add("--reset-offsets", action="store_true", help="set the start offsets of one empty group")
    add("--delete-offsets", action="store_true", help="delete a group's offsets for topics")
    add("--group", action="append", metavar="GROUP", help="repeatable")
    add("--all-groups", action="store_true")
    add("--topic", action="append", metavar="TOPIC[:P,P...]", help="repeatable")
    add("--all-topics", action="store_true", help="the topics the group has offsets for")
    add("--state", nargs="?", const="", metavar="STATE[,STATE]", help="Empty, Stable or Dead")
    add("--members", action="store_true")
    add("--offsets", action="store_true")
    add("--verbose", action="store_true")
    add("--timeout", type=int, metavar="MS", help="overrides --request-timeout-ms")
    add("--to-earliest", action="store_true")
    add("--to-latest", action="store_true")
    add("--to-current", action="store_true")
    add("--to-offset", type=int, metavar="N", help="kept within the log's offsets")
    add("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[Z|+HH:MM]", help="local time if no zone")
    add("--by-duration", metavar="PnDTnHnMnS", help="now minus the duration (lockgate's addition)")
    add("--from-file", metavar="CSV", help="lines as --export writes them")
    add("--dry-run", action="store_true", help="show the plan")
    add("--execute", action="store_true", help="apply the plan")
    add("--export", action="store_true", help="print the plan as CSV")
    parser.set_defaults(func=tool(_main))


# ----------------------------------------------------------------------------------------------
# Option checks (Kafka's ShareGroupCommandOptions, its order and words)


def _has(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False


def _conflict(first: str, second: str) -> str:
    return f'Option "[{first}]" can\'t be used with option "[{second}]"'


def check_options(args: argparse.Namespace) -> None:
    """Raises ToolError with Kafka's message for a combination its tool refuses."""
    if _has(args, "describe"):
        if not args.group and not args.all_groups:
            raise ToolError("Option [describe] takes one of these options: [all-groups], [group]")
        if sum(_has(args, name) for name in ("members", "offsets", "state")) > 1:
            raise ToolError(
                "Option [describe] takes at most one of these options: [members], [offsets], "
                "[state]"
            )
        if args.state:
            raise ToolError("Option [describe] does not take a value for [state]")
    if args.delete:
        if not args.group and not args.all_groups:
            raise ToolError("Option [delete] takes the options [group] or [all-groups].")
        if args.group and args.all_groups:
            raise ToolError("Option [delete] takes either [group] or [all-groups], not both.")
        if args.topic or args.all_topics:
            raise ToolError("Option [delete] does not take the options [topic] or [all-topics].")
    if args.delete_offsets and (not args.group or not args.topic):
        raise ToolError("Option [delete-offsets] takes the following options: [group], [topic]")
    if args.reset_offsets:
        _check_reset(args)
    unavailable = [
        name
        for name, allowed in (
            ("members", ("describe",)),
            ("offsets", ("describe",)),
            ("verbose", ("describe",)),
            ("state", ("describe", "list")),
        )
        if _has(args, name) and not any(_has(args, action) for action in allowed)
    ]
    if unavailable:
        raise ToolError(
            f"Option(s) [{', '.join(unavailable)}] are unavailable given other options on the "
            "command line"
        )
    if args.group and args.all_groups:
        raise ToolError(_conflict("group", "all-groups"))
    if args.group and args.list:
        raise ToolError(_conflict("group", "list"))
    if args.topic and (args.list or args.describe):
        raise ToolError(_conflict("topic", "list" if args.list else "describe"))
    if sum(_has(args, action) for action in ACTIONS) != 1:
        raise ToolError(
            "Command must include exactly one action: --list, --describe, --delete, "
            "--reset-offsets, --delete-offsets."
        )


def _check_reset(args: argparse.Namespace) -> None:
    if args.dry_run and args.execute:
        raise ToolError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    if not args.dry_run and not args.execute:
        raise ToolError("Option [reset-offsets] takes the option: [execute] or [dry-run]")
    if not args.group:
        raise ToolError("Option [reset-offsets] takes the option: [group]")
    specs = [name for name in RESET_SPECS if _has(args, name)]
    if len(specs) > 1:
        raise ToolError(_conflict(specs[0].replace("_", "-"), specs[1].replace("_", "-")))
    if args.topic and args.all_topics:
        raise ToolError(_conflict("topic", "all-topics"))
    if not args.topic and not args.all_topics and args.from_file is None:
        raise ToolError(
            "Option [reset-offsets] takes one of these options: [all-topics], [from-file], [topic]"
        )
    if not specs:
        listed = ", ".join(f"[{name.replace('_', '-')}]" for name in sorted(RESET_SPECS))
        raise ToolError(f"Option [reset-offsets] takes one of these options: {listed}")
    if len(args.group) > 1:
        raise ToolError("Found multiple arguments for option group, but you asked for only one")


def parse_states(text: str) -> list[str]:
    """`stable,empty` → Kafka's state names; unknown names refused with Kafka's message."""
    by_lower = {state.lower(): state for state in SHARE_GROUP_STATES}
    states = [by_lower.get(part.strip().lower()) for part in text.split(",")]
    if any(state is None for state in states):
        raise ToolError(
            f"Invalid state list '{text}'. Valid states are: {', '.join(SHARE_GROUP_STATES)}"
        )
    return list(dict.fromkeys(state for state in states if state is not None))


# ----------------------------------------------------------------------------------------------
# Tables, as Kafka's tool prints them: each line starts with a newline, columns are
# left-aligned to at least 15 characters (groups, topics, ids), the last one unpadded.


def _line(widths: Sequence[int], cells: Sequence[object]) -> str:
    padded = [f"{cell!s:<{width}}" for cell, width in zip(cells, widths, strict=False)]
    return "\n" + " ".join([*padded, *(str(cell) for cell in cells[len(widths) :])])


def render_listing(listings: Sequence[ShareGroupListing]) -> str:
    """--list --state: GROUP and STATE."""
    width = max([15, *(len(g.group_id) for g in listings)])
    lines = [_line([width], ["GROUP", "STATE"])]
    lines += [_line([width], [g.group_id, g.state or "Unknown"]) for g in listings]
    return "".join(lines)[1:] + "\n"


@dataclass(frozen=True, slots=True)
class OffsetRow:
    topic: str
    partition: int
    offset: SharePartitionOffset


def offset_rows(offsets: Mapping[TopicPartition, SharePartitionOffset]) -> list[OffsetRow]:
    return [OffsetRow(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())]


def _shown(value: int | None) -> str:
    return MISSING if value is None else str(value)


def render_offsets(group: str, rows: Sequence[OffsetRow], verbose: bool) -> str:
    """--describe [--offsets]: a group's start offset and lag per partition."""
    if not rows:
        return f"\nShare group '{group}' has no offset information.\n"
    widths = [max(15, len(group)), max([15, *(len(r.topic) for r in rows)]), 10, 13]
    if verbose:
        widths.append(13)
        header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    else:
        header = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    lines = [_line(widths, header)]
    for r in rows:
        epoch = [_shown(r.offset.leader_epoch)] if verbose else []
        cells = [group, r.topic, r.partition, *epoch, _shown(r.offset.start_offset)]
        lines.append(_line(widths, [*cells, _shown(r.offset.lag)]))
    return "".join(lines) + "\n"


def render_state(description: ShareGroupDescription, coordinator: str, verbose: bool) -> str:
    """--describe --state: the coordinator (`host:port  (id)`), state and member count."""
    d = description
    widths = [max(15, len(d.group_id)), max(25, len(coordinator)), 15]
    if verbose:
        widths += [12, 17]
        header = ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
        row: list[object] = [d.group_id, coordinator, d.state, d.group_epoch, d.assignment_epoch]
    else:
        header = ["GROUP", "COORDINATOR (ID)", "STATE"]
        row = [d.group_id, coordinator, d.state]
    return _line(widths, [*header, "#MEMBERS"]) + _line(widths, [*row, len(d.members)]) + "\n"


def assignment_text(partitions: Iterable[TopicPartition]) -> str:
    """`t1:0,1;t2:3`: topics in order, each with its partitions in order."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(
        sorted(f"{topic}:{','.join(str(p) for p in sorted(ps))}" for topic, ps in by_topic.items())
    )


def render_members(description: ShareGroupDescription, verbose: bool) -> str:
    """--describe --members: one line per member, by member id ("" without members)."""
    d = description
    members = sorted(d.members, key=lambda m: m.member_id)
    if d.state == "Dead" or not members:
        return ""
    widths = [
        max(15, len(d.group_id)),
        max([15, *(len(m.member_id) for m in members)]),
        max([15, *(len(m.host) for m in members)]),
        max([15, *(len(m.client_id) for m in members)]),
        12,
    ]
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        widths.append(13)
        header.append("MEMBER-EPOCH")
    lines = [_line(widths, [*header, "ASSIGNMENT"])]
    for m in members:
        epoch = [m.member_epoch] if verbose else []
        cells = [d.group_id, m.member_id, m.host, m.client_id, len(m.assignment), *epoch]
        lines.append(_line(widths, [*cells, assignment_text(m.assignment)]))
    return "".join(lines) + "\n"


def render_reset(group: str, plan: Plan) -> str:
    """--reset-offsets: the new start offsets (nothing for an empty plan)."""
    if not plan:
        return "\n"
    widths = [max(15, len(group)), max([15, *(len(tp.topic) for tp in plan)]), 10]
    lines = [_line(widths, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])]
    lines += [_line(widths, [group, tp.topic, tp.partition, o]) for tp, o in sorted(plan.items())]
    return "".join(lines) + "\n"


def message(error: KafkaError) -> str:
    """The broker's words alone, as Kafka's tool prints an exception's message."""
    return error.message or str(error)


def render_export(group: str, plan: Plan) -> str:
    """--export: Kafka's CSV, a `topic,partition,offset` line per partition, then a blank line."""
    text = export_csv({group: plan})
    return f"{text}\n\n" if text else "\n"


def render_deleted_offsets(results: Mapping[str, KafkaError | None]) -> str:
    """--delete-offsets: each topic's outcome."""
    width = max([15, *(len(topic) for topic in results)])
    lines = [_line([width], ["TOPIC", "STATUS"])]
    for topic, error in sorted(results.items()):
        status = "Successful" if error is None else f"Error: {message(error)}"
        lines.append(_line([width], [topic, status]))
    return "".join(lines) + "\n"


def render_deleted_groups(results: Mapping[str, KafkaError | None]) -> str:
    """--delete: a success line, or each failure and then the groups that were deleted."""
    deleted = ", ".join(f"'{g}'" for g, error in results.items() if error is None)
    failed = {g: error for g, error in results.items() if error is not None}
    if not failed:
        return f"Deletion of requested share groups ({deleted}) was successful.\n"
    lines = ["\nError: Deletion of some share groups failed:"]
    lines += [f"* Group '{g}' could not be deleted due to: {error}" for g, error in failed.items()]
    if deleted:
        lines.append(f"\nThese share groups were deleted successfully: {deleted}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# The commands


async def _main(args: argparse.Namespace) -> int:
    try:
        check_options(args)
        states = parse_states(args.state) if args.list and args.state else []
    except ToolError as exc:  # bad options: exit 2, as for argparse's own refusals
        print(f"lockgate {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    timeout = args.request_timeout_ms if args.timeout is None else args.timeout
    async with Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=timeout
    ) as admin:
        if args.list:
            return await _list(admin, args, states)
        if args.describe:
            return await _describe(admin, args)
        if args.delete:
            return await _delete(admin, args)
        if args.delete_offsets:
            return await _delete_offsets(admin, args)
        return await _reset(admin, args)


async def _list(admin: Admin, args: argparse.Namespace, states: list[str]) -> int:
    listings = await admin.list_share_groups(states=states)
    if args.state is None:
        print("".join(f"{g.group_id}\n" for g in listings), end="")
    else:
        print(render_listing(listings), end="")
    return EXIT_OK


async def _groups(admin: Admin, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in await admin.list_share_groups()]
    return list(dict.fromkeys(args.group))


async def _describe(admin: Admin, args: argparse.Namespace) -> int:
    groups = sorted(await _groups(admin, args))
    descriptions = await admin.describe_share_groups(groups)
    for group in groups:
        description = descriptions[group]
        if args.members or _has(args, "state"):
            if description.state == "Empty":
                print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
            if args.members:
                print(render_members(description, args.verbose), end="")
            else:
                broker = admin.cluster.metadata.brokers.get(description.coordinator_id)
                where = f"{broker.host}:{broker.port}" if broker else "?"
                coordinator = f"{where}  ({description.coordinator_id})"
                print(render_state(description, coordinator, args.verbose), end="")
            continue
        offsets = await admin.describe_share_group_offsets(group)
        print(render_offsets(group, offset_rows(offsets), args.verbose), end="")
    return EXIT_OK


async def _delete(admin: Admin, args: argparse.Namespace) -> int:
    listings = {g.group_id: g for g in await admin.list_share_groups()}
    wanted = list(listings) if args.all_groups else list(dict.fromkeys(args.group))
    refused: dict[str, KafkaError | None] = {}
    for group in wanted:
        listing = listings.get(group)
        if listing is None:
            refused[group] = error_for(
                ErrorCode.group_id_not_found, f"Group '{group}' is not a share group."
            )
        elif listing.state not in ("", "Empty"):
            refused[group] = error_non_empty(group)
    results = await admin.delete_share_groups(g for g in wanted if g not in refused)
    results = {g: refused[g] if g in refused else results[g] for g in wanted}
    print(render_deleted_groups(results), end="")
    return EXIT_FAILURE if any(error is not None for error in results.values()) else EXIT_OK


def error_non_empty(group: str) -> KafkaError:
    return error_for(ErrorCode.non_empty_group, f"Share group '{group}' is not EMPTY.")


async def _delete_offsets(admin: Admin, args: argparse.Namespace) -> int:
    group: str = args.group[0]
    topics = list(dict.fromkeys(args.topic))
    try:
        results = await admin.delete_share_group_offsets(group, topics)
    except KafkaError as exc:
        # as Kafka's Admin: a group-level error is every topic's error too
        print(f"\nError: {message(exc)}")
        print(render_deleted_offsets(dict.fromkeys(topics, exc)), end="")
        return EXIT_FAILURE
    print(render_deleted_offsets(results), end="")
    return EXIT_FAILURE if any(error is not None for error in results.values()) else EXIT_OK


# ----------------------------------------------------------------------------------------------
# Reset


async def _clamped(admin: Admin, requested: Plan) -> Plan:
    partitions = sorted(requested)
    earliest = await offsets_at(admin, partitions, EARLIEST)
    latest = await offsets_at(admin, partitions, LATEST)
    return {tp: clamp(requested[tp], earliest[tp], latest[tp]) for tp in partitions}


async def _by_timestamp(admin: Admin, partitions: Sequence[TopicPartition], when: int) -> Plan:
    """The first offset at or after the timestamp; the latest offset (with Kafka's warning)
    where no record is that recent."""
    plan = await offsets_at(admin, partitions, when)
    beyond = sorted(tp for tp, offset in plan.items() if offset < 0)
    for tp in beyond:
        print(
            f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to "
            "latest known offset."
        )
    plan.update(await offsets_at(admin, beyond, LATEST))
    return plan


async def _plan(admin: Admin, group: str, args: argparse.Namespace) -> Plan:
    described = await admin.describe_share_group_offsets(group)
    current: Plan = {tp: -1 for tp in described}  # the partitions the group has offsets for
    current.update(
        {tp: o.start_offset for tp, o in described.items() if o.start_offset is not None}
    )
    if args.from_file is not None:
        try:
            with open(args.from_file, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ToolError(f"cannot read {args.from_file}: {exc.strerror}") from None
        return await _clamped(admin, parse_reset_csv(text, [group]).get(group, {}))
    partitions = await scoped_partitions(admin, args.topic or (), current)
    if args.to_earliest:
        return await offsets_at(admin, partitions, EARLIEST)
    if args.to_latest:
        return await offsets_at(admin, partitions, LATEST)
    if args.to_offset is not None:
        return await _clamped(admin, dict.fromkeys(partitions, args.to_offset))
    if args.to_current:
        plan = {tp: current[tp] for tp in partitions if current.get(tp, -1) >= 0}
        missing = [tp for tp in partitions if tp not in plan]
        plan.update(await offsets_at(admin, missing, LATEST))
        return dict(sorted(plan.items()))
    if args.to_datetime is not None:
        return await _by_timestamp(admin, partitions, parse_datetime_ms(args.to_datetime))
    when = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    return await _by_timestamp(admin, partitions, when)


async def _reset(admin: Admin, args: argparse.Namespace) -> int:
    group: str = args.group[0]
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)  # bad input fails before anything is asked
    if args.by_duration is not None:
        parse_duration_ms(args.by_duration)
    try:
        state = (await admin.describe_share_groups([group]))[group].state
    except KafkaError as exc:
        if exc.code != ErrorCode.group_id_not_found:
            raise
        state = "Dead"  # nobody knows it: AlterShareGroupOffsets will create it
    if state not in ("Empty", "Dead"):
        raise ToolError(f"Share group '{group}' is not empty.")
    plan = await _plan(admin, group, args)
    if args.execute and plan:
        await admin.alter_share_group_offsets(group, plan)
    if args.export:
        print(render_export(group, plan), end="")
    else:
        print(render_reset(group, plan), end="")
    return EXIT_OK
