# tools/delete_records.py — `lockgate delete-records`, kafka-delete-records.sh: moves partitions'
# log start offsets forward (DeleteRecords) from Kafka's offset JSON file or from --topic,
# --partition and --before-offset, and prints each partition's new low watermark or its error.
from __future__ import annotations

import argparse

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.tools.common import EXIT_FAILURE, EXIT_OK, ToolError, connection_options, tool
from lockgate.tools.offset_specs import Plan, parse_delete_records_json

HIGH_WATERMARK = -1  # DeleteRecords' "everything up to the high watermark" (KIP-107)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "delete-records",
        parents=[connection_options()],
        help="delete records before an offset (kafka-delete-records.sh)",
    )
    parser.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='{"partitions": [{"topic": T, "partition": P, "offset": N}], "version": 1}',
    )
    parser.add_argument("--topic")
    parser.add_argument(
        "--partition", type=int, action="append", metavar="P", help="repeatable (default: all)"
    )
    parser.add_argument(
        "--before-offset",
        type=int,
        metavar="N",
        help="records below N are deleted; -1: up to the high watermark",
    )
    parser.set_defaults(func=tool(_delete_records))


async def _requested(admin: Admin, args: argparse.Namespace) -> Plan:
    if args.offset_json_file is not None:
        if args.topic is not None or args.before_offset is not None:
            raise ToolError("give --offset-json-file or --topic/--before-offset, not both")
        try:
            with open(args.offset_json_file, encoding="utf-8") as file:
                return parse_delete_records_json(file.read())
        except OSError as exc:
            raise ToolError(f"cannot read {args.offset_json_file}: {exc.strerror}") from None
    if args.topic is None or args.before_offset is None:
        raise ToolError("give --offset-json-file, or --topic and --before-offset")
    partitions = args.partition
    if not partitions:
        partitions = [p.partition for p in (await admin.cluster.topic(args.topic)).partitions]
    return {TopicPartition(args.topic, p): args.before_offset for p in partitions}


async def _delete_records(args: argparse.Namespace) -> int:
    async with Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    ) as admin:
        requested = await _requested(admin, args)
        print("Executing records delete operation")
        results = await admin.delete_records(requested)
    print("Records delete operation completed:")
    failed = False
    for tp in sorted(results):
        outcome = results[tp]
        if isinstance(outcome, KafkaError):
            failed = True
            print(f"partition: {tp}\terror: {outcome}")
        else:
            print(f"partition: {tp}\tlow_watermark: {outcome}")
    return EXIT_FAILURE if failed else EXIT_OK
