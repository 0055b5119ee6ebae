# tools/log_dirs.py — `lockgate log-dirs`: DescribeLogDirs (35) like kafka-log-dirs.sh
# --describe: each broker's log directories and the partitions stored in them (size, offset
# lag, future log). A table by default; --json prints the JSON document kafka-log-dirs.sh
# prints ({"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":..,"error":null,
# "partitions":[..]}]}]}) alone, without the script's two progress lines.
from __future__ import annotations

import argparse
import json
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.admin_log_dirs import LogDirDescription
from lockgate.client.errors import ErrorCode
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, tool
from lockgate.tools.table import render


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "log-dirs",
        parents=[connection_options()],
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
    parser.set_defaults(func=tool(_describe))


def _ids(text: str) -> list[int] | None:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        return None
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ToolError(f"--broker-list expects broker ids, got {text!r}") from None


async def _describe(args: argparse.Namespace) -> int:
    wanted = {t.strip() for t in args.topics.split(",") if t.strip()}
    async with Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    ) as admin:
        topics = None
        if wanted:
            # DescribeLogDirs names partitions: ask for every partition of each named topic
            described = await admin.describe_topics(sorted(wanted))
            topics = {d.name: [p.partition for p in d.partitions] for d in described}
        answer = await admin.describe_log_dirs(_ids(args.broker_list), topics)
    if args.json:
        print(json.dumps(_document(answer), separators=(",", ":")))
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
    print(render(header, rows))
    for broker, directories in sorted(answer.items()):
        for directory in directories:
            if directory.total_bytes is not None and directory.usable_bytes is not None:
                print(
                    f"broker {broker} {directory.path}: {directory.usable_bytes} of "
                    f"{directory.total_bytes} bytes usable"
                )
    return EXIT_OK


def _document(answer: dict[int, list[LogDirDescription]]) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON: errors by exception class name, null when none."""
    return {
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
                            {
                                "partition": f"{topic}-{index}",
                                "size": replica.size,
                                "offsetLag": replica.offset_lag,
                                "isFuture": replica.is_future,
                            }
                            for (topic, index), replica in sorted(directory.replicas.items())
                        ],
                    }
                    for directory in directories
                ],
            }
            for broker, directories in sorted(answer.items())
        ],
    }
