# tools/get_offsets.py — `lockgate get-offsets`, kafka-get-offsets.sh: one ListOffsets answer
# per partition, printed as `topic:partition:offset`, for topics matched by a regular
# expression (whole name) and partition filters like Kafka's (`0,2`, `1-3`, `4-`, `-2`).
#
# `--isolation read_committed` (lockgate's addition) asks for the last stable offset instead of
# the high watermark with --time latest.
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable

from lockgate.client.admin import Admin
from lockgate.client.admin_records import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.tools.common import EXIT_FAILURE, EXIT_OK, ToolError, connection_options, tool

TIME_NAMES = {
    "latest": LATEST_TIMESTAMP,
    "earliest": EARLIEST_TIMESTAMP,
    "max-timestamp": MAX_TIMESTAMP,
    "earliest-local": EARLIEST_LOCAL_TIMESTAMP,
    "latest-tiered": LATEST_TIERED_TIMESTAMP,
    "earliest-pending-upload": EARLIEST_PENDING_UPLOAD_TIMESTAMP,
}
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
PartitionFilter = Callable[[int], bool]


def parse_time(text: str) -> int:
    """--time: a name of TIME_NAMES, its number (-1..-6) or a timestamp in ms (Kafka 4.4's
    names and numbers, passed to the broker as they are)."""
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        value = -100
    if value < EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected {', '.join(TIME_NAMES)}, -1 to -6 or a timestamp in ms"
        )
    return value


def parse_partition_filter(text: str) -> PartitionFilter:
    """`0,2`, `1-3` (upper bound exclusive, as Kafka's), `4-` (4 and above) or `-2` (below 2),
    comma-separated."""
    ranges: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d*)-(\d*)|(\d+)", part)
        if match is None or part == "-":
            raise ToolError(f"invalid partition filter {part!r}")
        if match.group(3) is not None:
            ranges.append((int(match.group(3)), int(match.group(3)) + 1))
        else:
            low = int(match.group(1)) if match.group(1) else 0
            high = int(match.group(2)) if match.group(2) else 2**31
            ranges.append((low, high))
    return lambda partition: any(low <= partition < high for low, high in ranges)


def parse_topic_partitions(text: str) -> list[tuple[re.Pattern[str], PartitionFilter]]:
    """--topic-partitions `t1:1,t2:0-3,t3,:5`: comma-separated `TOPIC-REGEX[:FILTER]` entries,
    each with one partition, range or bound (Kafka's pattern); no regex matches every topic."""
    filters: list[tuple[re.Pattern[str], PartitionFilter]] = []
    for entry in (piece.strip() for piece in text.split(",")):
        if not entry:
            continue
        topic, _sep, partitions = entry.partition(":")
        accepts = parse_partition_filter(partitions) if partitions else _every_partition
        filters.append((re.compile(topic or ".*"), accepts))
    return filters


def _every_partition(_partition: int) -> bool:
    return True


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "get-offsets",
        parents=[connection_options()],
        help="offsets of partitions at a time (kafka-get-offsets.sh)",
    )
    parser.add_argument("--topic", metavar="REGEX", help="whole-name regular expression")
    parser.add_argument("--partitions", metavar="P,P-P", help="partition filter (default all)")
    parser.add_argument(
        "--topic-partitions", metavar="T:P,T2:P-P", help="instead of --topic/--partitions"
    )
    parser.add_argument(
        "--time",
        type=parse_time,
        default=LATEST_TIMESTAMP,
        metavar="TIME",
        help="latest (-1, default), earliest (-2), max-timestamp (-3), earliest-local (-4), "
        "latest-tiered (-5), earliest-pending-upload (-6) or a timestamp in ms",
    )
    parser.add_argument("--exclude-internal-topics", action="store_true")
    parser.add_argument("--isolation", choices=sorted(ISOLATION), default="read_uncommitted")
    parser.set_defaults(func=tool(_get_offsets))


async def _get_offsets(args: argparse.Namespace) -> int:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise ToolError("--topic-partitions cannot be used with --topic or --partitions")
        filters = parse_topic_partitions(args.topic_partitions)
    else:
        filters = [
            (
                re.compile(args.topic or ".*"),
                parse_partition_filter(args.partitions) if args.partitions else _every_partition,
            )
        ]
    async with Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    ) as admin:
        metadata = await admin.cluster.refresh_metadata(None)
        wanted = [
            TopicPartition(name, p.partition)
            for name, info in sorted(metadata.topics.items())
            if not (args.exclude_internal_topics and info.internal)
            for p in info.partitions
            if any(pattern.fullmatch(name) and accepts(p.partition) for pattern, accepts in filters)
        ]
        if not wanted:
            raise ToolError("no topic partition matches")
        answers = await admin.list_offsets(
            {tp: args.time for tp in wanted}, isolation_level=ISOLATION[args.isolation]
        )
    failed = False
    for tp in sorted(answers):
        answer = answers[tp]
        if isinstance(answer, KafkaError):
            failed = True
            print(
                f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} "
                f"due to error: {answer}",
                file=sys.stderr,
            )
        elif answer.offset >= 0:
            # as kafka-get-offsets.sh: a partition without an answer (no record that recent,
            # nothing tiered) is left out rather than printed with -1
            print(f"{tp.topic}:{tp.partition}:{answer.offset}")
    return EXIT_FAILURE if failed else EXIT_OK
