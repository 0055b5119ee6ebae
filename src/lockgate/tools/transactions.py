# tools/transactions.py — `lockgate transactions list|describe|describe-producers|find-hanging|
# abort|force-terminate`, kafka-transactions.sh for any Kafka-compatible broker (same commands and
# flags where they exist). Every command prints an aligned table, or JSON with --json.
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.admin_transactions import DEFAULT_FORCE_TIMEOUT_MS, ProducerState
from lockgate.client.cluster import TopicPartition
from lockgate.tools.common import (
    EXIT_OK,
    ToolError,
    connection_options,
    non_negative_int,
    positive_int,
    tool,
)
from lockgate.tools.table import render

# kafka-transactions.sh find-hanging's default: the broker's transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "transactions", help="list, describe, find hanging and terminate transactions"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = connection_options()
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--json", action="store_true", help="print JSON instead of a table")

    listing = actions.add_parser("list", parents=[common, output], help="every transactional id")
    listing.add_argument(
        "--running-longer-than-ms",
        "--duration-filter",
        dest="running_longer_than_ms",
        type=non_negative_int,
        metavar="MS",
        help="only transactions open for longer than this",
    )
    listing.add_argument(
        "--state", action="append", default=[], help="only this state (Ongoing, ...); repeatable"
    )
    listing.add_argument("--producer-id", type=int, action="append", default=[])
    listing.set_defaults(func=tool(_list))

    describe = actions.add_parser(
        "describe", parents=[common, output], help="one transactional id's state"
    )
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(func=tool(_describe))

    producers = actions.add_parser(
        "describe-producers", parents=[common, output], help="producer state of a partition"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument(
        "--partition", type=non_negative_int, help="one partition (default: all)"
    )
    producers.set_defaults(func=tool(describe_producers))

    hanging = actions.add_parser(
        "find-hanging",
        parents=[common, output],
        help="open transactions the coordinator does not know (they block read_committed)",
    )
    scope = hanging.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic")
    scope.add_argument("--broker-id", type=non_negative_int)
    hanging.add_argument("--partition", type=non_negative_int, help="with --topic: one partition")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=non_negative_int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
        metavar="MINUTES",
        help="the largest transaction timeout in use (default 15; 0: every open transaction "
        "its coordinator does not know)",
    )
    hanging.set_defaults(func=tool(_find_hanging))

    abort = actions.add_parser(
        "abort", parents=[common], help="write an abort marker for a hanging transaction"
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=non_negative_int, required=True)
    abort.add_argument("--start-offset", type=non_negative_int)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    abort.set_defaults(func=tool(_abort))

    terminate = actions.add_parser(
        "force-terminate",
        parents=[common],
        help="fence a transactional id and abort its open (even prepared) transaction",
    )
    terminate.add_argument("--transactional-id", required=True)
    terminate.add_argument(
        "--timeout-ms", type=positive_int, default=DEFAULT_FORCE_TIMEOUT_MS, metavar="MS"
    )
    terminate.set_defaults(func=tool(_force_terminate))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


def _print(args: argparse.Namespace, header: Sequence[str], rows: list[list[Any]]) -> None:
    if args.json:
        print(json.dumps([dict(zip(header, row, strict=True)) for row in rows], indent=2))
    else:
        print(render(header, [["" if cell is None else str(cell) for cell in row] for row in rows]))


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        listings = await admin.list_transactions(
            states=args.state,
            producer_ids=args.producer_id,
            running_longer_than_ms=args.running_longer_than_ms,
        )
    _print(
        args,
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        [[t.transactional_id, t.coordinator_id, t.producer_id, t.state] for t in listings],
    )
    return EXIT_OK


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        found = await admin.describe_transactions([args.transactional_id])
    txn = found[args.transactional_id]
    now_ms = int(time.time() * 1000)
    _print(
        args,
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                txn.coordinator_id,
                txn.transactional_id,
                txn.producer_id,
                txn.producer_epoch,
                txn.state,
                txn.timeout_ms,
                txn.start_time_ms,
                txn.duration_ms(now_ms),
                ",".join(str(tp) for tp in txn.partitions),
            ]
        ],
    )
    return EXIT_OK


async def describe_producers(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        partitions = await topic_partitions(admin, args.topic, args.partition)
        states = await admin.describe_producers(partitions)
    rows = [
        [tp.partition, *_producer_cells(producer)]
        for tp, producers in states.items()
        for producer in producers
    ]
    _print(
        args,
        [
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        rows,
    )
    return EXIT_OK


def _producer_cells(producer: ProducerState) -> list[Any]:
    return [
        producer.producer_id,
        producer.producer_epoch,
        producer.coordinator_epoch,
        producer.last_sequence,
        producer.last_timestamp,
        producer.current_txn_start_offset,
    ]


async def topic_partitions(admin: Admin, topic: str, partition: int | None) -> list[TopicPartition]:
    """One partition of the topic, or all of them; raises for an unknown topic or partition."""
    info = await admin.cluster.topic(topic)
    if partition is not None:
        info.partition(partition)  # raises for a partition the topic lacks
        return [TopicPartition(topic, partition)]
    return [p.topic_partition for p in info.partitions]


async def _find_hanging(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        if args.topic is not None:
            partitions = await topic_partitions(admin, args.topic, args.partition)
        else:
            if args.partition is not None:
                raise ToolError("--partition goes with --topic")
            metadata = await admin.cluster.refresh_metadata(None)
            partitions = [
                p.topic_partition
                for info in metadata.topics.values()
                for p in info.partitions
                if p.leader_id == args.broker_id
            ]
        hanging = await admin.find_hanging_transactions(
            partitions, max_transaction_timeout_ms=args.max_transaction_timeout * 60_000
        )
    now_ms = int(time.time() * 1000)
    _print(
        args,
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
            "Reason",
        ],
        [
            [
                h.topic_partition.topic,
                h.topic_partition.partition,
                h.producer.producer_id,
                h.producer.producer_epoch,
                h.producer.coordinator_epoch,
                h.producer.current_txn_start_offset,
                h.producer.last_timestamp,
                (now_ms - h.producer.last_timestamp) // 60_000,
                h.reason,
            ]
            for h in hanging
        ],
    )
    return EXIT_OK


async def _abort(args: argparse.Namespace) -> int:
    topic_partition = TopicPartition(args.topic, args.partition)
    explicit = [args.producer_id, args.producer_epoch, args.coordinator_epoch]
    async with _admin(args) as admin:
        if args.start_offset is not None:
            if any(value is not None for value in explicit):
                raise ToolError("give --start-offset or the producer id/epoch, not both")
            found = await open_transaction_at(admin, topic_partition, args.start_offset)
            explicit = [found.producer_id, found.producer_epoch, found.coordinator_epoch]
        producer_id, producer_epoch, coordinator_epoch = explicit
        if producer_id is None or producer_epoch is None or coordinator_epoch is None:
            raise ToolError(
                "give --start-offset, or all of --producer-id, --producer-epoch and "
                "--coordinator-epoch"
            )
        await admin.abort_transaction(
            topic_partition, producer_id, producer_epoch, coordinator_epoch
        )
    print(f"aborted the transaction of producer {producer_id} on {topic_partition}")
    return EXIT_OK


async def open_transaction_at(
    admin: Admin, topic_partition: TopicPartition, start_offset: int
) -> ProducerState:
    """The producer whose open transaction on the partition starts at `start_offset` (what
    kafka-transactions.sh abort --start-offset looks up); ToolError if none."""
    states = await admin.describe_producers([topic_partition])
    for producer in states.get(topic_partition, []):
        if producer.current_txn_start_offset == start_offset:
            return producer
    raise ToolError(f"no open transaction starts at offset {start_offset} of {topic_partition}")


async def _force_terminate(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        await admin.force_terminate_transaction(args.transactional_id, timeout_ms=args.timeout_ms)
    print(f"terminated transactional id {args.transactional_id!r}: its open transaction is aborted")
    return EXIT_OK
