# tools/log_dirs.py — `lockgate log-dirs`: DescribeLogDirs (35) like kafka-log-dirs.sh
# --describe: each broker's log directories and the partitions stored in them (size, offset
# lag, future log). A table by default; --json prints the JSON document kafka-log-dirs.sh
# prints ({"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":..,"error":null,
# "partitions":[..]}]}]}) alone, without the script's two progress lines.
#
# With --remote-config (tiered storage) each partition also shows what the object store holds
# of it, read from its manifests (tools/remote.py): RemoteSize/RemoteSegments columns, or in
# the JSON a "remoteSize" per partition and a top-level "remote" summary; the rest of the
# document stays kafka-log-dirs.sh's. Without the option the output is unchanged.
from __future__ import annotations

import argparse
import json
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.admin_log_dirs import LogDirDescription, ReplicaInfo
from lockgate.client.errors import ErrorCode
from lockgate.storage.object_store import ObjectStore
from lockgate.tools.common import EXIT_OK, ToolError, connection_options
from lockgate.tools.remote import (
    RemotePartition,
    open_store,
    remote_options,
    remote_partitions,
    remote_tool,
    topic_ids,
)
from lockgate.tools.table import render


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "log-dirs",
        parents=[connection_options(), remote_options()],
        help="log directories and the partitions in them (like kafka-log-dirs.sh --describe)",
    )
    parser.add_argument(
        "--describe", action="store_true", help="accepted for kafka-log-dirs.sh's sake"
    )
    parser.add_argument(
        "--topic-list",
        "--topics",
        dest="topics",
        default="",
        metavar="TOPIC[,TOPIC]",
        help="only these topics' partitions (default: all)",
    )
    parser.add_argument(
        "--broker-list",
        default="",
        metavar="ID[,ID]",
        help="only these brokers (default: every broker)",
    )
    parser.add_argument("--json", action="store_true", help="kafka-log-dirs.sh's JSON document")
    parser.set_defaults(func=remote_tool(_describe))


def _ids(text: str) -> list[int] | None:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        return None
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ToolError(f"--broker-list expects broker ids, got {text!r}") from None


async def _describe(args: argparse.Namespace) -> int:
    return await describe(args, open_store(args))


async def describe(args: argparse.Namespace, store: ObjectStore | None) -> int:
    """The command, with the object store of --remote-config (None: without it)."""
    wanted = {t.strip() for t in args.topics.split(",") if t.strip()}
    remote: dict[tuple[str, int], RemotePartition] | None = None
    async with Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    ) as admin:
        topics = None
        if wanted:
            # DescribeLogDirs names partitions: ask for every partition of each named topic
            described = await admin.describe_topics(sorted(wanted))
            topics = {d.name: [p.partition for p in d.partitions] for d in described}
        answer = await admin.describe_log_dirs(_ids(args.broker_list), topics)
        if store is not None:
            names = {t for dirs in answer.values() for d in dirs for t, _p in d.replicas}
            remote = await remote_partitions(store, await topic_ids(admin, names))
    if args.json:
        print(json.dumps(_document(answer, remote), separators=(",", ":")))
        return EXIT_OK
    rows = []
    for broker, directories in sorted(answer.items()):
        for directory in directories:
            error = "" if directory.error == ErrorCode.none else directory.error.name.upper()
            if not directory.replicas:
                rows.append([str(broker), directory.path, error, "", "", "", ""])
            for (topic, index), replica in sorted(directory.replicas.items()):
                rows.append(
                    [
                        str(broker),
                        directory.path,
                        error,
                        f"{topic}-{index}",
                        str(replica.size),
                        str(replica.offset_lag),
                        "yes" if replica.is_future else "no",
                    ]
                )
    header = ["Broker", "LogDir", "Error", "Partition", "Size", "OffsetLag", "IsFuture"]
    if remote is not None:
        header[5:5] = ["RemoteSize", "RemoteSegments"]
        for row in rows:
            held = _remote_of(remote, row[3])
            row[5:5] = ["", ""] if not row[3] else [str(held[0]), str(held[1])]
    print(render(header, rows))
    for broker, directories in sorted(answer.items()):
        for directory in directories:
            if directory.total_bytes is not None and directory.usable_bytes is not None:
                print(
                    f"broker {broker} {directory.path}: {directory.usable_bytes} of "
                    f"{directory.total_bytes} bytes usable"
                )
    if remote is not None:
        _print_remote_summary(remote)
    return EXIT_OK


def _remote_of(remote: dict[tuple[str, int], RemotePartition], name: str) -> tuple[int, int]:
    """(bytes, segments) in the store of the partition named `topic-N` (0, 0: nothing)."""
    topic, _sep, index = name.rpartition("-")
    held = remote.get((topic, int(index)))
    return (0, 0) if held is None else (held.size, len(held.segments))


def _print_remote_summary(remote: dict[tuple[str, int], RemotePartition]) -> None:
    size = sum(p.size for p in remote.values())
    segments = sum(len(p.segments) for p in remote.values())
    print(f"remote: {size} bytes in {segments} segments of {len(remote)} partitions")
    for (topic, index), held in sorted(remote.items()):
        stale = len(held.orphans) + len(held.superseded)
        if stale:
            print(
                f"remote {topic}-{index}: {len(held.orphans)} orphaned objects and "
                f"{len(held.superseded)} superseded segments (its leader deletes them)"
            )


def _document(
    answer: dict[int, list[LogDirDescription]],
    remote: dict[tuple[str, int], RemotePartition] | None = None,
) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON: errors by exception class name, null when none; with the
    object store, "remoteSize" per partition and the "remote" summary besides."""
    document: dict[str, Any] = {
        "version": 1,
        "brokers": [
            {
                "broker": broker,
                "logDirs": [
                    {
                        "error": None
                        if directory.error == ErrorCode.none
                        else "KafkaStorageException"
                        if directory.error == ErrorCode.kafka_storage_error
                        else directory.error.name,
                        "logDir": directory.path,
                        "partitions": [
                            _partition(topic, index, replica, remote)
                            for (topic, index), replica in sorted(directory.replicas.items())
                        ],
                    }
                    for directory in directories
                ],
            }
            for broker, directories in sorted(answer.items())
        ],
    }
    if remote is not None:
        document["remote"] = {
            "size": sum(p.size for p in remote.values()),
            "segments": sum(len(p.segments) for p in remote.values()),
            "partitions": [
                {
                    "partition": f"{topic}-{index}",
                    "size": held.size,
                    "segments": len(held.segments),
                    "startOffset": held.start_offset,
                    "endOffset": held.end_offset,
                    "orphans": len(held.orphans),
                    "superseded": len(held.superseded),
                }
                for (topic, index), held in sorted(remote.items())
            ],
        }
    return document


def _partition(
    topic: str,
    index: int,
    replica: ReplicaInfo,
    remote: dict[tuple[str, int], RemotePartition] | None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "partition": f"{topic}-{index}",
        "size": replica.size,
        "offsetLag": replica.offset_lag,
        "isFuture": replica.is_future,
    }
    if remote is not None:
        held = remote.get((topic, index))
        item["remoteSize"] = 0 if held is None else held.size
    return item
