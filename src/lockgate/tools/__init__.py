"""Operator tools behind `lockgate topics|produce|consume|producers|groups|share-groups|
transactions|...`.

Each command lives in its own module with a `register(commands)` that adds its subparser. The
tools only use lockgate.client, i.e. the Kafka protocol, so they work against any
Kafka-compatible broker; `dump-log` alone reads a data directory's files, offline.
"""

from __future__ import annotations

import argparse

from lockgate.tools import (
    acls,
    configs,
    consume,
    delete_records,
    devcluster,
    dump_log,
    get_offsets,
    groups,
    host,
    log_dirs,
    produce,
    producers,
    quotas,
    share_groups,
    spark_demo,
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
        share_groups,
        transactions,
        users,
        quotas,
        configs,
        log_dirs,
        acls,
        delete_records,
        get_offsets,
        dump_log,
        devcluster,
        host,
    ):
        module.register(commands)
    spark_demo.register(commands)
