# tools/producers.py — `lockgate producers describe`: the producer state a partition holds
# (DescribeProducers, key 61), like kafka-transactions.sh describe-producers.
from __future__ import annotations

import argparse

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.errors import raise_for
from lockgate.tools.common import EXIT_OK, connection_options, non_negative_int, tool
from lockgate.tools.table import render

DESCRIBE_PRODUCERS = 61


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("producers", help="producer state per partition")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe", parents=[connection_options()], help="active producers of a topic's partitions"
    )
    describe.add_argument("--topic", required=True)
    describe.add_argument("--partition", type=non_negative_int, help="one partition (default: all)")
    describe.set_defaults(func=tool(_describe))


async def _describe(args: argparse.Namespace) -> int:
    async with Cluster(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    ) as cluster:
        topic = await cluster.topic(args.topic)
        wanted = (
            [args.partition]
            if args.partition is not None
            else [p.partition for p in topic.partitions]
        )
        rows: list[list[str]] = []
        for index in wanted:
            connection, _info = await cluster.leader_connection(TopicPartition(args.topic, index))
            response = await connection.request(
                DESCRIBE_PRODUCERS, {"topics": [{"name": args.topic, "partition_indexes": [index]}]}
            )
            for partition in response.topics[0].partitions:
                raise_for(partition.error_code, partition.error_message, f"{args.topic}-{index}")
                rows.extend(
                    [
                        str(partition.partition_index),
                        str(p.producer_id),
                        str(p.producer_epoch),
                        str(p.last_sequence),
                        str(p.last_timestamp),
                        str(p.coordinator_epoch),
                        str(p.current_txn_start_offset),
                    ]
                    for p in partition.active_producers
                )
    print(
        render(
            [
                "PARTITION",
                "PRODUCER-ID",
                "EPOCH",
                "LAST-SEQUENCE",
                "LAST-TIMESTAMP",
                "COORDINATOR-EPOCH",
                "CURRENT-TXN-START-OFFSET",
            ],
            rows,
        )
    )
    return EXIT_OK
