# tools/common.py — what every operator tool shares: the connection options (with the caller's
# security settings: a --command-config file of client properties, as Kafka's tools take, or
# flags over it), running an async command, and turning failures into one line on stderr and a
# non-zero exit code.
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from lockgate.client.errors import KafkaError
from lockgate.client.security import ClientSecurity
from lockgate.client.security_options import security_from_properties
from lockgate.config.properties import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
AsyncCommand = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class StopSignals:
    """Notes SIGTERM and SIGINT (from its construction on) for a command that runs until told
    to stop and then stops its children itself."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(signal.SIGTERM, self._note)
        signal.signal(signal.SIGINT, self._note)

    def _note(self, _signum: int, _frame: object) -> None:
        self.received = True


class ToolError(Exception):
    """A failure the user can fix from the message alone (bad input, missing topic...)."""


def connection_options() -> argparse.ArgumentParser:
    """Options of every tool, as a parent parser so that they go after the subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT[,HOST:PORT]",
        help=f"brokers to start from (default {DEFAULT_BOOTSTRAP})",
    )
    parent.add_argument(
        "--request-timeout-ms",
        type=positive_int,
        default=30_000,
        metavar="MS",
        help="how long to wait for each broker response (default 30000)",
    )
    parent.add_argument("--client-id", default="lockgate-cli", help=argparse.SUPPRESS)
    return parent


def security_options() -> argparse.ArgumentParser:
    """The caller's security settings (read by `client_security`), as a parent parser."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--command-config", type=Path, metavar="FILE", help="client properties (security.*)"
    )
    parent.add_argument("--security-protocol", help="PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    parent.add_argument("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    parent.add_argument("--sasl-username")
    parent.add_argument("--sasl-password")
    return parent


def client_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The caller's security settings: the --command-config file, then the flags over it."""
    properties: dict[str, str] = {}
    if args.command_config is not None:
        try:
            properties = parse_properties(args.command_config.read_text())
        except OSError as exc:
            raise ToolError(f"--command-config: {exc}") from None
    flags = {
        "security.protocol": args.security_protocol,
        "sasl.mechanism": args.sasl_mechanism,
        "sasl.username": args.sasl_username,
        "sasl.password": args.sasl_password,
    }
    properties.update({key: value for key, value in flags.items() if value is not None})
    if "sasl.mechanism" in properties and "sasl.mechanisms" not in properties:
        properties["sasl.mechanisms"] = properties["sasl.mechanism"]
    return security_from_properties(properties)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def parse_assignments(items: Iterable[str], option: str) -> dict[str, str]:
    """["k=v", ...] → {k: v}; the value may itself contain '='."""
    result: dict[str, str] = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise ToolError(f"{option} expects NAME=VALUE, got {item!r}")
        result[name.strip()] = value.strip()
    return result


def run(command: AsyncCommand, args: argparse.Namespace) -> int:
    """Runs an async command; client errors become `lockgate <tool>: error: ...` on stderr."""
    prefix = f"lockgate {args.command}"
    try:
        return asyncio.run(command(args))
    except KafkaError as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
    except (ToolError, ValueError) as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
    except BrokenPipeError:
        # The reader of our output went away (`| head`). Point stdout at /dev/null so that
        # the interpreter's final flush does not complain about the pipe a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_FAILURE


def tool(
    command: AsyncCommand,
) -> Callable[[argparse.Namespace], int]:
    """Wraps an async command as an argparse `func`."""

    def entry(args: argparse.Namespace) -> int:
        return run(command, args)

    return entry
