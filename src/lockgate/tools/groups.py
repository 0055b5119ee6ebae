# tools/groups.py — `lockgate groups list|describe|delete|reset-offsets|delete-offsets`, a
# kafka-consumer-groups.sh for any Kafka-compatible broker: membership, assignments, committed
# offsets and lag, offset resets and offset deletion.
#
# The lag table (tools/group_lag.py) and the reset's planning with its rule, only groups without
# members (tools/group_resets.py), are shared with the console.
from __future__ import annotations

import argparse
import sys
import time

from lockgate.client.admin import Admin
from lockgate.client.admin_groups import CONSUMER_PROTOCOL
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError
from lockgate.tools.common import (
    EXIT_FAILURE,
    EXIT_OK,
    ToolError,
    connection_options,
    non_negative_int,
    tool,
)
from lockgate.tools.group_lag import partition_lags
from lockgate.tools.group_resets import (
    GroupNotInactiveError,
    ResetKind,
    ResetTarget,
    apply_reset,
    check_inactive,
    clamped,
    plan_reset,
)
from lockgate.tools.offset_lookup import scoped_partitions
from lockgate.tools.offset_specs import (
    Plan,
    export_csv,
    parse_datetime_ms,
    parse_duration_ms,
    parse_reset_csv,
    parse_topic_scope,
)
from lockgate.tools.table import render


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("groups", help="list, describe, delete and reset consumer groups")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = connection_options()
    actions.add_parser("list", parents=[common], help="every group").set_defaults(func=tool(_list))
    describe = actions.add_parser(
        "describe", parents=[common], help="members, assignments, offsets and lag"
    )
    describe.add_argument("--group", required=True)
    describe.set_defaults(func=tool(_describe))
    delete = actions.add_parser("delete", parents=[common], help="delete an empty group")
    delete.add_argument("--group", required=True)
    delete.set_defaults(func=tool(_delete))
    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="move the committed offsets of groups without members (kafka-consumer-groups.sh)",
    )
    groups_scope = reset.add_mutually_exclusive_group(required=True)
    groups_scope.add_argument("--group", action="append", metavar="GROUP", help="repeatable")
    groups_scope.add_argument("--all-groups", action="store_true")
    topics_scope = reset.add_mutually_exclusive_group()
    topics_scope.add_argument(
        "--topic", action="append", metavar="TOPIC[:P,P...]", help="repeatable"
    )
    topics_scope.add_argument(
        "--all-topics", action="store_true", help="the topics the group has offsets for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-current", action="store_true")
    target.add_argument("--to-offset", type=non_negative_int, metavar="N")
    target.add_argument("--shift-by", type=int, metavar="N", help="may be negative")
    target.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[Z|+HH:MM]", help="local time if no zone"
    )
    target.add_argument("--by-duration", metavar="PnDTnHnMnS", help="now minus the duration")
    target.add_argument("--from-file", metavar="CSV", help="lines as --export writes them")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="apply the plan")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV")
    reset.set_defaults(func=tool(_reset))
    delete_offsets = actions.add_parser(
        "delete-offsets",
        parents=[common],
        help="delete a group's committed offsets for topics it no longer consumes",
    )
    delete_offsets.add_argument("--group", required=True)
    delete_offsets.add_argument(
        "--topic", action="append", required=True, metavar="TOPIC[:P,P...]", help="repeatable"
    )
    delete_offsets.set_defaults(func=tool(_delete_offsets))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        listings = await admin.list_groups()
    # TYPE as kafka-groups.sh names it (Classic, Consumer, Share), where the broker says
    rows = [
        [g.group_id, g.state, g.group_type.capitalize() or "-", g.protocol_type or "-"]
        for g in listings
    ]
    print(render(["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"], rows))
    return EXIT_OK


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        group = (await admin.describe_groups([args.group]))[args.group]
        members = [
            [
                m.member_id,
                m.group_instance_id or "-",
                m.client_id,
                m.host,
                ", ".join(str(assigned) for assigned in m.assignment) or "-",
            ]
            for m in group.members
        ]
        lags = await partition_lags(admin, args.group, group.members)
    print(f"group {args.group}: state {group.state}, protocol {group.protocol or '-'}")
    print(render(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], members))
    rows = [
        [
            p.topic_partition.topic,
            str(p.topic_partition.partition),
            "-" if p.committed is None else str(p.committed),
            str(p.end_offset),
            "-" if p.lag is None else str(p.lag),
            p.member_id or "-",
        ]
        for p in lags
    ]
    print()
    print(
        render(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"], rows)
    )
    return EXIT_OK


async def _delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        await admin.delete_groups([args.group])
    print(f"deleted group {args.group}")
    return EXIT_OK


def _target(args: argparse.Namespace, request: _Request) -> ResetTarget:
    if args.to_earliest:
        return ResetTarget(ResetKind.EARLIEST)
    if args.to_latest:
        return ResetTarget(ResetKind.LATEST)
    if args.to_current:
        return ResetTarget(ResetKind.CURRENT)
    if args.to_offset is not None:
        return ResetTarget(ResetKind.OFFSET, args.to_offset)
    if args.shift_by is not None:
        return ResetTarget(ResetKind.SHIFT, args.shift_by)
    assert request.timestamp is not None
    return ResetTarget(ResetKind.TIMESTAMP, request.timestamp)


async def _plan(admin: Admin, group: str, args: argparse.Namespace, request: _Request) -> Plan:
    if request.from_file is not None:
        if group not in request.from_file:
            raise ToolError(f"no reset plan for group {group} in {args.from_file}")
        planned = await clamped(admin, request.from_file[group])
    else:
        committed = await admin.list_group_offsets(group)
        partitions = await scoped_partitions(admin, args.topic or (), committed)
        planned = await plan_reset(admin, group, committed, partitions, _target(args, request))
    for warning in planned.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return dict(planned.offsets)


class _Request:
    """What the options say, parsed once before any group is touched (bad input fails early)."""

    def __init__(self, args: argparse.Namespace) -> None:
        if args.from_file is None and not args.topic and not args.all_topics:
            raise ToolError("reset-offsets needs --topic, --all-topics or --from-file")
        self.timestamp: int | None = None
        if args.to_datetime is not None:
            self.timestamp = parse_datetime_ms(args.to_datetime)
        elif args.by_duration is not None:
            self.timestamp = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        self.from_file: dict[str, Plan] | None = None
        self.csv = ""
        if args.from_file is not None:
            try:
                with open(args.from_file, encoding="utf-8") as file:
                    self.csv = file.read()
            except OSError as exc:
                raise ToolError(f"cannot read {args.from_file}: {exc.strerror}") from None


async def _reset(args: argparse.Namespace) -> int:
    request = _Request(args)
    failed = False
    plans: dict[str, Plan] = {}
    async with _admin(args) as admin:
        if args.all_groups:
            groups = [
                g.group_id
                for g in await admin.list_groups()
                if g.protocol_type in ("", CONSUMER_PROTOCOL)
            ]
        else:
            groups = list(dict.fromkeys(args.group))
        if args.from_file is not None:
            request.from_file = parse_reset_csv(request.csv, groups)
        for group in groups:
            try:
                await check_inactive(admin, group)
            except GroupNotInactiveError as refusal:
                print(
                    f"lockgate groups: error: {refusal} (stop its consumers first)",
                    file=sys.stderr,
                )
                failed = True
                continue
            plan = await _plan(admin, group, args, request)
            if args.execute and plan:
                await apply_reset(admin, group, plan)
            plans[group] = plan
    if args.export:
        print(export_csv(plans))
    else:
        rows = [
            [group, tp.topic, str(tp.partition), str(offset)]
            for group, plan in plans.items()
            for tp, offset in sorted(plan.items())
        ]
        print(render(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not args.execute:
        print("(dry run: add --execute to apply)", file=sys.stderr if args.export else sys.stdout)
    return EXIT_FAILURE if failed else EXIT_OK


# The messages of Kafka's exceptions for the errors OffsetDelete answers, so that the tool reads
# as kafka-consumer-groups.sh --delete-offsets does.
_DELETE_OFFSETS_MESSAGES = {
    ErrorCode.group_subscribed_to_topic: (
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."
    ),
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.topic_authorization_failed: "Not authorized to access topics",
}


def _status(error: KafkaError | None) -> str:
    if error is None:
        return "Successful"
    return f"Error: {_DELETE_OFFSETS_MESSAGES.get(error.code, str(error))}"


async def _delete_offsets(args: argparse.Namespace) -> int:
    group: str = args.group
    rows: list[list[str]] = []
    failed = False
    async with _admin(args) as admin:
        partitions: list[TopicPartition] = []
        for text in args.topic:
            scope = parse_topic_scope(text)
            if scope.partitions:
                partitions.extend(TopicPartition(scope.topic, p) for p in scope.partitions)
                continue
            try:
                info = await admin.cluster.topic(scope.topic)
            except KafkaError as exc:
                rows.append([scope.topic, "Not Provided", _status(exc)])
                failed = True
                continue
            partitions.extend(p.topic_partition for p in info.partitions)
        results: dict[TopicPartition, KafkaError | None] = {}
        if partitions:
            try:
                results = await admin.delete_group_offsets_by_partition(group, partitions)
            except KafkaError as exc:
                message = {
                    ErrorCode.group_id_not_found: f"'{group}' does not exist.",
                    ErrorCode.non_empty_group: (
                        f"Deleting offsets of a consumer group '{group}' is forbidden if the "
                        "group is not empty."
                    ),
                    ErrorCode.group_authorization_failed: f"Access to '{group}' is not authorized.",
                }.get(exc.code, str(exc))
                raise ToolError(f"{message} ({exc.code.name.upper()})") from exc
    for tp, error in sorted(results.items()):
        rows.append([tp.topic, str(tp.partition), _status(error)])
        failed = failed or error is not None
    topics = ", ".join(args.topic)  # as Kafka's tool: the --topic values as given
    if failed:
        print(
            "lockgate groups: error: Encountered some partition-level error, see the follow-up "
            "details.",
            file=sys.stderr,
        )
    else:
        print(f"Request succeed for deleting offsets with topic {topics} group {group}")
    print()
    print(render(["TOPIC", "PARTITION", "STATUS"], sorted(rows)))
    return EXIT_FAILURE if failed else EXIT_OK
