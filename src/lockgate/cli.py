# The `lockgate` command: serve, and the operator tools (topics, produce, consume, ...).
from __future__ import annotations

import argparse
import sys


def _serve(args: argparse.Namespace) -> int:
    from lockgate.config.properties import BrokerConfig, ConfigError, parse_properties
    from lockgate.server.lifecycle import configure_logging, run
    from lockgate.server.log_format import FORMATS

    overrides: dict[str, str] = {}
    if args.config:
        with open(args.config, encoding="utf-8") as handle:
            overrides.update(parse_properties(handle.read()))
    for item in args.set or []:
        if "=" not in item:
            raise ConfigError(f"--set expects name=value, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = value.strip()
    if args.data_dir:
        overrides["log.dirs"] = args.data_dir
    if args.listen:
        overrides["listeners"] = args.listen
    if args.cluster:
        overrides["lockgate.cluster"] = args.cluster
    if args.node_id is not None:
        overrides["node.id"] = str(args.node_id)
    if args.log_format:
        overrides["lockgate.log.format"] = args.log_format
    config = BrokerConfig(overrides)
    log_format = config.get("lockgate.log.format")
    if log_format not in FORMATS:
        raise ConfigError(f"lockgate.log.format={log_format!r}: use {' or '.join(FORMATS)}")
    configure_logging(args.log_level, log_format)
    run(config)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lockgate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="run a single-node broker (127.0.0.1:9092 by default)"
    )
    serve.add_argument("--data-dir", help="where logs and metadata live (log.dirs)")
    serve.add_argument("--listen", help="HOST:PORT to listen on (listeners)")
    serve.add_argument("--config", help="a Java .properties file of broker properties")
    serve.add_argument(
        "--cluster",
        metavar="etcd://HOST:PORT[,...][/NAMESPACE]",
        help="join a cluster whose metadata is in etcd (lockgate.cluster); without it the "
        "broker is a single node",
    )
    serve.add_argument("--node-id", type=int, help="this broker's id in the cluster (node.id)")
    serve.add_argument("--set", action="append", metavar="NAME=VALUE", help="any broker property")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument(
        "--log-format",
        choices=("plain", "json"),
        help="log lines as text (default) or one JSON object per line with the request's "
        "context (lockgate.log.format)",
    )
    serve.set_defaults(func=_serve)
    from lockgate.tools import register_tools

    register_tools(commands)
    from lockgate.console.command import register as register_console

    register_console(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from lockgate.config.properties import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"lockgate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # kio registers hypothesis strategies for its types whenever it can import hypothesis (a
    # test dependency): a third of a second at every start of a broker or a tool, which never
    # use them. Nothing is imported yet here, so nothing of this process loses them.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    sys.exit(main())
