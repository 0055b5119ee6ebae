# tools/producers.py — `lockgate producers describe`: the producer state a partition holds
# (DescribeProducers, key 61); the same table as `lockgate transactions describe-producers`.
from __future__ import annotations

import argparse

from lockgate.tools import transactions
from lockgate.tools.common import connection_options, non_negative_int, tool


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("producers", help="producer state per partition")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe", parents=[connection_options()], help="active producers of a topic's partitions"
    )
    describe.add_argument("--topic", required=True)
    describe.add_argument("--partition", type=non_negative_int, help="one partition (default: all)")
    describe.add_argument("--json", action="store_true", help="print JSON instead of a table")
    describe.set_defaults(func=tool(transactions.describe_producers))
