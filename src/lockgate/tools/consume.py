# tools/consume.py — `lockgate consume`: print a topic's records, like
# kafka-console-consumer.sh, with kcat-style --format strings. Stops after --max-messages, after
# --timeout-ms without a new message, or on Ctrl-C; says how many it printed on stderr.
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, IsolationLevel, Message
from lockgate.tools.common import (
    EXIT_OK,
    ToolError,
    connection_options,
    non_negative_int,
    positive_int,
    tool,
)

NULL_TEXT = b"null"  # what kafka-console-consumer prints for a null key or value
_POLL_MS = 1000

Formatter = Callable[[Message], bytes]

_FIELDS: dict[str, Callable[[Message], bytes]] = {
    "t": lambda m: m.topic.encode(),
    "p": lambda m: str(m.partition).encode(),
    "o": lambda m: str(m.offset).encode(),
    "T": lambda m: str(m.timestamp).encode(),
    "k": lambda m: NULL_TEXT if m.key is None else m.key,
    "v": lambda m: NULL_TEXT if m.value is None else m.value,
    "K": lambda m: str(-1 if m.key is None else len(m.key)).encode(),
    "S": lambda m: str(-1 if m.value is None else len(m.value)).encode(),
    "h": lambda m: b",".join(
        name.encode() + b"=" + (NULL_TEXT if value is None else value) for name, value in m.headers
    ),
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consume",
        parents=[connection_options()],
        help="print a topic's records",
        description="Prints records from every partition of a topic (or one with "
        "--partition), starting at the end unless told otherwise.",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=non_negative_int, help="only this partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument(
        "--offset",
        type=_offset,
        metavar="N|earliest|latest",
        help="start at this offset (in every partition read)",
    )
    parser.add_argument("--max-messages", type=positive_int, help="stop after N messages")
    parser.add_argument(
        "--timeout-ms", type=positive_int, help="stop after this long without a new message"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--format",
        help="kcat-style output per message: %%t topic, %%p partition, %%o offset, %%k key, "
        "%%v value, %%T timestamp (ms), %%h headers, %%K/%%S key/value length, %%%% a "
        "percent sign; \\n \\t \\r \\\\ escapes. Ends with a newline unless it contains \\n.",
    )
    output.add_argument(
        "--print-key", action="store_true", help="print the key, --key-separator, the value"
    )
    parser.add_argument(
        "--key-separator", default="\t", help="between key and value with --print-key (tab)"
    )
    parser.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
    )
    parser.set_defaults(func=tool(_consume))


def _offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    return non_negative_int(text)


def compile_format(text: str) -> Formatter:
    """A kcat-style format string → a function from a message to its output bytes."""
    parts: list[bytes | Callable[[Message], bytes]] = []
    literal = ""
    index = 0
    while index < len(text):
        char = text[index]
        nxt = text[index + 1] if index + 1 < len(text) else ""
        if char == "%":
            if nxt == "%":
                literal += "%"
            elif nxt in _FIELDS:
                if literal:
                    parts.append(literal.encode())
                    literal = ""
                parts.append(_FIELDS[nxt])
            else:
                raise ToolError(f"--format: unknown field %{nxt or '(end)'}")
            index += 2
        elif char == "\\" and nxt in _ESCAPES:
            literal += _ESCAPES[nxt]
            index += 2
        else:
            literal += char
            index += 1
    if "\\n" not in text:
        literal += "\n"
    if literal:
        parts.append(literal.encode())

    def render(message: Message) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(message) for part in parts)

    return render


def _formatter(args: argparse.Namespace) -> Formatter:
    if args.format is not None:
        return compile_format(args.format)
    if args.print_key:
        separator = args.key_separator.encode()
        return lambda m: (
            (NULL_TEXT if m.key is None else m.key)
            + separator
            + (NULL_TEXT if m.value is None else m.value)
            + b"\n"
        )
    return lambda m: (NULL_TEXT if m.value is None else m.value) + b"\n"


async def _consume(args: argparse.Namespace) -> int:
    render = _formatter(args)
    async with Consumer(
        args.bootstrap_server,
        client_id=args.client_id,
        request_timeout_ms=args.request_timeout_ms,
        isolation_level=IsolationLevel[args.isolation_level.upper()],
        auto_offset_reset="latest",
    ) as consumer:
        partitions = await consumer.partitions_for(args.topic)
        if args.partition is not None:
            if args.partition not in partitions:
                raise ToolError(
                    f"topic {args.topic} has {len(partitions)} partitions; "
                    f"there is no partition {args.partition}"
                )
            partitions = [args.partition]
        assigned = [TopicPartition(args.topic, p) for p in partitions]
        consumer.assign(assigned)
        await _position(consumer, assigned, args)
        printer = _Printer(render, sys.stdout.buffer)
        try:
            await _print_messages(consumer, printer, args.max_messages, args.timeout_ms)
        finally:
            # like kafka-console-consumer, also after Ctrl-C or an error mid-way
            print(f"Processed a total of {printer.printed} messages", file=sys.stderr)
    return EXIT_OK


@dataclass(slots=True)
class _Printer:
    render: Formatter
    out: BinaryIO
    printed: int = 0

    def write(self, messages: list[Message]) -> None:
        self.out.write(b"".join(self.render(m) for m in messages))
        self.out.flush()  # a reader at the other end of a pipe sees each poll's messages
        self.printed += len(messages)


async def _print_messages(
    consumer: Consumer, printer: _Printer, max_messages: int | None, timeout_ms: int | None
) -> None:
    loop = asyncio.get_running_loop()
    idle_timeout = None if timeout_ms is None else timeout_ms / 1000
    last_message = loop.time()
    while max_messages is None or printer.printed < max_messages:
        wait_ms = _POLL_MS
        if idle_timeout is not None:
            remaining = last_message + idle_timeout - loop.time()
            if remaining <= 0:
                return
            wait_ms = max(1, min(wait_ms, int(remaining * 1000)))
        messages = await consumer.poll(wait_ms)
        if not messages:
            continue
        last_message = loop.time()
        if max_messages is not None:
            messages = messages[: max_messages - printer.printed]
        printer.write(messages)


async def _position(
    consumer: Consumer, assigned: list[TopicPartition], args: argparse.Namespace
) -> None:
    if args.from_beginning or args.offset == "earliest":
        await consumer.seek_to_beginning()
    elif args.offset is None or args.offset == "latest":
        await consumer.seek_to_end()
    else:
        for tp in assigned:
            consumer.seek(tp, args.offset)
