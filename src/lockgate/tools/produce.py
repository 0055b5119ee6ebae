# tools/produce.py — `lockgate produce`: one record per line of stdin, like
# kafka-console-producer.sh. Quiet on success; the first failed record stops reading, and the
# tool says how many records failed and why, exiting 1.
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import BinaryIO

from lockgate.client.producer import Producer, RecordMetadata
from lockgate.protocol.records import COMPRESSION_CODECS
from lockgate.tools.common import (
    EXIT_FAILURE,
    EXIT_OK,
    ToolError,
    connection_options,
    non_negative_int,
    positive_int,
    tool,
)

_READ_CHUNK = 1 << 16
_ACKS = {"0": 0, "1": 1, "-1": -1, "all": -1}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "produce",
        parents=[connection_options()],
        help="send stdin to a topic, one record per line",
        description="Sends each line of stdin as one record. Without --partition, keyed "
        "records go where the Java client's default partitioner puts them (murmur2 of the "
        "key) and the others round robin.",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without SEP fails)",
    )
    parser.add_argument(
        "--compression", choices=list(COMPRESSION_CODECS), default="none", help="batch codec"
    )
    parser.add_argument("--partition", type=non_negative_int, help="send every record here")
    parser.add_argument(
        "--acks", choices=list(_ACKS), default="all", help="acknowledgements (default all)"
    )
    parser.add_argument(
        "--linger-ms", type=non_negative_int, default=5, help="batching delay (default 5)"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=1_000_000,
        help="bytes per batch (default 1000000)",
    )
    parser.set_defaults(func=tool(_produce))


async def _produce(args: argparse.Namespace) -> int:
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise ToolError("--key-separator cannot be empty")
    sent = 0
    failures: list[BaseException] = []

    def note_failure(future: asyncio.Future[RecordMetadata]) -> None:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            failures.append(error)

    async with Producer(
        args.bootstrap_server,
        client_id=args.client_id,
        request_timeout_ms=args.request_timeout_ms,
        acks=_ACKS[args.acks],
        compression=args.compression,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        # Retries are for a broker restarting or a leader moving, not for waiting out a
        # dead cluster: give up after about two request timeouts.
        delivery_timeout_ms=2 * args.request_timeout_ms + args.linger_ms,
    ) as producer:
        line_number = 0
        async for line in _lines(sys.stdin.buffer):
            line_number += 1
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise ToolError(
                        f"line {line_number} has no key separator {args.key_separator!r}"
                    )
            future = await producer.send(args.topic, value, key, partition=args.partition)
            future.add_done_callback(note_failure)
            sent += 1
            if failures:
                break  # later records would most likely fail the same way
        await producer.flush()
    if failures:
        print(
            f"lockgate produce: error: {len(failures)} of {sent} records failed: {failures[0]}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK


async def _lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of a blocking stream without blocking the event loop (reads run in a thread).
    A trailing '\\r' is dropped, like Java's readLine; so is the newline itself."""
    loop = asyncio.get_running_loop()
    read = getattr(stream, "read1", stream.read)
    pending = b""
    while True:
        chunk: bytes = await loop.run_in_executor(None, read, _READ_CHUNK)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.removesuffix(b"\r")
    if pending:
        yield pending.removesuffix(b"\r")
