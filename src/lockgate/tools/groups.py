# tools/groups.py — `lockgate groups list|describe|delete|reset-offsets`, a
# kafka-consumer-groups.sh for any Kafka-compatible broker: membership, assignments, committed
# offsets and lag, and offset resets for groups without members.
from __future__ import annotations

import argparse

from lockgate.client.admin import Admin
from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError, raise_for
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, non_negative_int, tool
from lockgate.tools.table import render

LIST_OFFSETS = 2
EARLIEST, LATEST = -2, -1


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
        "reset-offsets", parents=[common], help="move a group's committed offsets (no members)"
    )
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=non_negative_int)
    reset.add_argument("--execute", action="store_true", help="apply (default: show the plan)")
    reset.set_defaults(func=tool(_reset))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


async def _end_offsets(
    cluster: Cluster, partitions: list[tuple[str, int]], when: int
) -> dict[tuple[str, int], int]:
    offsets = {}
    for topic, index in partitions:
        connection, info = await cluster.leader_connection(TopicPartition(topic, index))
        answer = await connection.request(
            LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout": 30_000,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": index,
                                "current_leader_epoch": info.leader_epoch,
                                "timestamp": when,
                                "max_num_offsets": 1,
                            }
                        ],
                    }
                ],
            },
        )
        partition = answer.topics[0].partitions[0]
        raise_for(partition.error_code, None, f"{topic}-{index}")
        offsets[(topic, index)] = partition.offset
    return offsets


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        listings = await admin.list_groups()
    rows = [[g.group_id, g.state, g.protocol_type] for g in listings]
    print(render(["GROUP", "STATE", "PROTOCOL-TYPE"], rows))
    return EXIT_OK


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        group = (await admin.describe_groups([args.group]))[args.group]
        owner: dict[tuple[str, int], str] = {}
        members = []
        for m in group.members:
            for assigned in m.assignment:
                owner[(assigned.topic, assigned.partition)] = m.member_id
            members.append(
                [
                    m.member_id,
                    m.group_instance_id or "-",
                    m.client_id,
                    m.host,
                    ", ".join(str(assigned) for assigned in m.assignment) or "-",
                ]
            )
        committed = {
            (found.topic, found.partition): offset
            for found, offset in (await admin.list_group_offsets(args.group)).items()
        }
        partitions = sorted(set(committed) | set(owner))
        ends = await _end_offsets(admin.cluster, partitions, LATEST)
    print(f"group {args.group}: state {group.state}, protocol {group.protocol or '-'}")
    print(render(["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], members))
    rows = []
    for tp in partitions:
        offset = committed.get(tp)
        lag = "-" if offset is None else str(ends[tp] - offset)
        rows.append(
            [
                tp[0],
                str(tp[1]),
                "-" if offset is None else str(offset),
                str(ends[tp]),
                lag,
                owner.get(tp, "-"),
            ]
        )
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


async def _reset(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        cluster = admin.cluster
        topic = await cluster.topic(args.topic)
        partitions = [(args.topic, p.partition) for p in topic.partitions]
        if args.to_offset is not None:
            earliest = await _end_offsets(cluster, partitions, EARLIEST)
            latest = await _end_offsets(cluster, partitions, LATEST)
            plan = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}
        else:
            plan = await _end_offsets(cluster, partitions, EARLIEST if args.to_earliest else LATEST)
        rows = [[t, str(p), str(o)] for (t, p), o in sorted(plan.items())]
        if args.execute:
            try:
                await admin.alter_group_offsets(
                    args.group, {TopicPartition(t, p): o for (t, p), o in plan.items()}
                )
            except KafkaError as exc:
                if exc.code not in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                    raise
                raise ToolError(
                    f"{exc} (a group with members cannot be reset: stop its consumers first)"
                ) from exc
    print(render(["TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not args.execute:
        print("(dry run: add --execute to apply)")
    return EXIT_OK
