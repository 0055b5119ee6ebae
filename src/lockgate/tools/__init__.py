"""Operator tools behind `lockgate topics|produce|consume|producers|groups|transactions`.

Each command lives in its own module with a `register(commands)` that adds its subparser. The
tools only use lockgate.client, i.e. the Kafka protocol, so they work against any
Kafka-compatible broker.
"""

from __future__ import annotations

import argparse

from lockgate.spark import demo as spark_demo
from lockgate.tools import (
    acls,
    consume,
    devcluster,
    groups,
    produce,
    producers,
    quotas,
    topics,
    transactions,
    users,
)


def register_tools(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the tool subcommands (each module registers its own)."""
    for module in (
        topics,
        produce,
        consume,
        producers,
        groups,
        transactions,
        users,
        quotas,
        acls,
        devcluster,
    ):
        module.register(commands)
    spark_demo.register(commands)
