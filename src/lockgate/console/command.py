# console/command.py — `lockgate console`: the web console's command line. The cluster
# connection and its TLS/SASL settings are the operator tools' own options (tools/common.py);
# the console listens on loopback unless told otherwise. The web stack is imported only when
# the command runs, so `lockgate` works without the `console` extra installed.
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from lockgate.tools.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ToolError,
    client_security,
    connection_options,
    security_options,
)

PASSWORD_ENV = "LOCKGATE_CONSOLE_PASSWORD"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "console",
        parents=[connection_options(), security_options()],
        help="a web console over the cluster (127.0.0.1:8080 by default)",
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where the console listens (default 127.0.0.1:8080: this machine only)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="refuse every change (POST answers 403)"
    )
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help=f"the console's sign-in password (else ${PASSWORD_ENV}; with neither, "
        "no one can sign in and nothing can be changed)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=run_console)


def _password(args: argparse.Namespace) -> str | None:
    if args.password_file is not None:
        try:
            text = args.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ToolError(f"--password-file: {exc.strerror}") from None
        password: str = text.rstrip("\r\n")
        if not password:
            raise ToolError("--password-file: the file is empty")
        return password
    return os.environ.get(PASSWORD_ENV) or None


def run_console(args: argparse.Namespace) -> int:
    from lockgate.console.settings import ConsoleSettings, parse_listen

    try:
        host, port = parse_listen(args.listen)
        settings = ConsoleSettings(
            bootstrap_servers=args.bootstrap_server,
            security=client_security(args),
            client_id="lockgate-console",
            request_timeout_ms=args.request_timeout_ms,
            listen_host=host,
            listen_port=port,
            read_only=args.read_only,
            password=_password(args),
        )
    except (ToolError, ValueError) as exc:
        print(f"lockgate console: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import uvicorn

        from lockgate.console.app import create_app
    except ImportError as exc:
        print(
            f"lockgate console: error: the console's packages are missing ({exc.name}): "
            "install lockgate with its `console` extra (pip install -e '.[console]')",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("lockgate.console")
    if not settings.loopback_only:
        log.warning("listening on %s: reachable from other machines", host)
    if settings.read_only:
        log.info("read-only: every change is refused")
    elif settings.password is None:
        log.info("no console password set: no one can sign in, nothing can be changed")
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=args.log_level.lower(),
        server_header=False,
    )
    return 0
