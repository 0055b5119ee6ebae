# tools/groups.py — `lockgate groups list|describe|delete|reset-offsets`, a
# kafka-consumer-groups.sh for any Kafka-compatible broker: membership, assignments, committed
# offsets and lag, and offset resets for groups without members.
from __future__ import annotations

import argparse
import struct
from typing import Any

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import raise_for
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, non_negative_int, tool
from lockgate.tools.table import render

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 2, 8, 9, 10
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
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


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


async def _coordinator(cluster: Cluster, group: str) -> BrokerConnection:
    connection = await cluster.any_connection()
    answer = await connection.request(
        FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]}
    )
    found = answer.coordinators[0] if hasattr(answer, "coordinators") else answer
    raise_for(found.error_code, found.error_message, f"coordinator of group {group}")
    return await cluster.connection(found.node_id)


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a consumer-protocol assignment (version, [topic, [partition]], ...)."""
    if len(data) < 6:
        return []
    pos = 2
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    result = []
    for _ in range(max(topics, 0)):
        (size,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + size].decode()
        pos += 2 + size
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            result.append((topic, struct.unpack_from(">i", data, pos)[0]))
            pos += 4
    return result


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


async def _committed(connection: BrokerConnection, group: str) -> dict[tuple[str, int], int]:
    # v10 names topics by id only; v9 keeps the names this tool prints
    version = connection.version_for(OFFSET_FETCH, max_version=9)
    answer = await connection.request(
        OFFSET_FETCH,
        {
            "group_id": group,
            "topics": None,
            "require_stable": False,
            "groups": [{"group_id": group, "topics": None}],
        },
        version=version,
    )
    groups = getattr(answer, "groups", None)
    entry: Any = groups[0] if groups else answer
    raise_for(entry.error_code, None, f"group {group}")
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in entry.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


async def _list(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        connection = await cluster.any_connection()
        answer = await connection.request(LIST_GROUPS, {"states_filter": [], "types_filter": []})
        raise_for(answer.error_code, None, "ListGroups")
        rows = [[g.group_id, getattr(g, "group_state", ""), g.protocol_type] for g in answer.groups]
    print(render(["GROUP", "STATE", "PROTOCOL-TYPE"], sorted(rows)))
    return EXIT_OK


async def _describe(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        coordinator = await _coordinator(cluster, args.group)
        answer = await coordinator.request(
            DESCRIBE_GROUPS, {"groups": [args.group], "include_authorized_operations": False}
        )
        group = answer.groups[0]
        raise_for(group.error_code, getattr(group, "error_message", None), f"group {args.group}")
        owner: dict[tuple[str, int], str] = {}
        members = []
        for m in group.members:
            assigned = (
                decode_assignment(m.member_assignment) if group.protocol_type == "consumer" else []
            )
            for tp in assigned:
                owner[tp] = m.member_id
            members.append(
                [
                    m.member_id,
                    m.group_instance_id or "-",
                    m.client_id,
                    m.client_host,
                    ", ".join(f"{t}-{p}" for t, p in assigned) or "-",
                ]
            )
        committed = await _committed(coordinator, args.group)
        partitions = sorted(set(committed) | set(owner))
        ends = await _end_offsets(cluster, partitions, LATEST)
    print(f"group {args.group}: state {group.group_state}, protocol {group.protocol_data or '-'}")
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
    async with _cluster(args) as cluster:
        coordinator = await _coordinator(cluster, args.group)
        answer = await coordinator.request(DELETE_GROUPS, {"groups_names": [args.group]})
        result = answer.results[0]
        raise_for(result.error_code, None, f"group {args.group}")
    print(f"deleted group {args.group}")
    return EXIT_OK


async def _reset(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
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
            coordinator = await _coordinator(cluster, args.group)
            answer = await coordinator.request(
                OFFSET_COMMIT,
                {
                    "group_id": args.group,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "retention_time": -1,
                    "topics": [
                        {
                            "name": args.topic,
                            "topic_id": topic.topic_id,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "committed_offset": o,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                                for (_t, p), o in sorted(plan.items())
                            ],
                        }
                    ],
                },
            )
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise ToolError(
                            f"{args.topic}-{p.partition_index}: {p.error_code.name} "
                            "(a group with members cannot be reset: stop its consumers first)"
                        )
    print(render(["TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not args.execute:
        print("(dry run: add --execute to apply)")
    return EXIT_OK
