# tools/quotas.py — `lockgate quotas describe|alter`: client quotas (DescribeClientQuotas 48,
# AlterClientQuotas 49) in the manner of kafka-configs.sh: an entity is named by --user NAME /
# --user-defaults and/or --client NAME / --client-defaults; alter takes --add-config
# 'producer_byte_rate=1024,consumer_byte_rate=2048' and --delete-config 'request_percentage'.
from __future__ import annotations

import argparse
import json

from lockgate.client.admin import Admin
from lockgate.client.admin_quotas import ClientQuotaAlteration, QuotaFilterComponent
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, tool
from lockgate.tools.table import render

USER, CLIENT_ID = "user", "client-id"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "quotas", help="client quotas per user and client id (like kafka-configs.sh)"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe",
        parents=[connection_options(), _entity_options()],
        help="quotas of the named entity (all entities when none is named)",
    )
    describe.add_argument("--json", action="store_true", help="print JSON instead of a table")
    describe.set_defaults(func=tool(_describe))
    alter = actions.add_parser(
        "alter",
        parents=[connection_options(), _entity_options()],
        help="set or remove quotas of one entity",
    )
    alter.add_argument(
        "--add-config",
        default="",
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage (%%)",
    )
    alter.add_argument(
        "--delete-config", default="", metavar="KEY[,KEY]", help="quota keys to remove"
    )
    alter.add_argument("--validate-only", action="store_true", help="check, change nothing")
    alter.set_defaults(func=tool(_alter))


def _entity_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    user = parent.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user principal's name")
    user.add_argument("--user-defaults", action="store_true", help="the default of every user")
    client = parent.add_mutually_exclusive_group()
    client.add_argument("--client", metavar="CLIENT_ID", help="a client id")
    client.add_argument(
        "--client-defaults", action="store_true", help="the default of every client id"
    )
    return parent


def _entity(args: argparse.Namespace) -> dict[str, str | None]:
    """The named entity: type → name, None for the type's default."""
    entity: dict[str, str | None] = {}
    if args.user is not None or args.user_defaults:
        entity[USER] = args.user
    if args.client is not None or args.client_defaults:
        entity[CLIENT_ID] = args.client
    return entity


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


def entity_name(entity: dict[str, str | None]) -> str:
    """kafka-configs.sh's form: user-principal 'alice', client-id '<default>'."""
    labels = {USER: "user-principal", CLIENT_ID: "client-id"}
    return ", ".join(
        f"{labels.get(kind, kind)} '{name if name is not None else '<default>'}'"
        for kind, name in sorted(entity.items(), key=lambda item: item[0] != USER)
    )


def quota_number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


async def _describe(args: argparse.Namespace) -> int:
    components = [
        QuotaFilterComponent.exact(kind, name)
        if name is not None
        else QuotaFilterComponent.default(kind)
        for kind, name in _entity(args).items()
    ]
    async with _admin(args) as admin:
        # an entity named: exactly that one (kafka-configs.sh --describe --user alice)
        entries = await admin.describe_client_quotas(components, strict=bool(components))
    if args.json:
        listed = [{"entity": e.entity, "quotas": e.values} for e in entries]
        print(json.dumps(listed, indent=2, sort_keys=True))
        return EXIT_OK
    rows = [
        [
            entity_name(e.entity),
            ",".join(f"{k}={quota_number(v)}" for k, v in sorted(e.values.items())),
        ]
        for e in entries
    ]
    print(render(["Entity", "Quotas"], rows))
    return EXIT_OK


def _parse_configs(text: str) -> dict[str, float]:
    result: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ToolError(f"--add-config expects KEY=VALUE, got {item!r}")
        try:
            result[key.strip()] = float(value)
        except ValueError:
            raise ToolError(f"--add-config: {key.strip()} needs a number, got {value!r}") from None
    return result


async def _alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    if not entity:
        raise ToolError(
            "name an entity: --user NAME, --user-defaults, --client ID or --client-defaults"
        )
    add = _parse_configs(args.add_config)
    delete = [key.strip() for key in args.delete_config.split(",") if key.strip()]
    if not add and not delete:
        raise ToolError("nothing to alter: give --add-config or --delete-config")
    alteration = ClientQuotaAlteration(entity, add, delete)
    async with _admin(args) as admin:
        await admin.alter_client_quotas([alteration], validate_only=args.validate_only)
    verb = "Validated" if args.validate_only else "Completed updating"
    print(f"{verb} quotas of {entity_name(entity)}.")
    return EXIT_OK
