# tools/configs.py — `lockgate configs` like kafka-configs.sh: --describe or --alter
# (--add-config k=v,k2=v2 / --delete-config k) of one entity: --entity-type topics|brokers|
# clients|users with --entity-name NAME or --entity-default. Topics and brokers go through
# DescribeConfigs / IncrementalAlterConfigs (a broker's default is the cluster-wide dynamic
# default); clients and users are the client quotas `lockgate quotas` manages, through the same
# admin calls. Output lines are kafka-configs.sh's.
from __future__ import annotations

import argparse

from lockgate.client.admin import Admin, ConfigEntry, ConfigSource, ResourceType
from lockgate.client.admin_quotas import ClientQuotaAlteration, QuotaFilterComponent
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, tool
from lockgate.tools.quotas import CLIENT_ID, USER

ENTITY_TYPES = ("topics", "brokers", "clients", "users")
# kafka-configs.sh --describe without --all shows only the values set on the entity itself
_OWN_SOURCE = {
    "topics": ConfigSource.DYNAMIC_TOPIC_CONFIG,
    "brokers": ConfigSource.DYNAMIC_BROKER_CONFIG,
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "configs",
        parents=[connection_options()],
        help="describe or alter topic, broker, client and user configs (like kafka-configs.sh)",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    parser.add_argument("--entity-type", required=True, choices=ENTITY_TYPES)
    name = parser.add_mutually_exclusive_group()
    name.add_argument(
        "--entity-name", metavar="NAME", help="topic name, broker id, client id, user"
    )
    name.add_argument(
        "--entity-default",
        action="store_true",
        help="the default: the cluster-wide broker default, or every client's / user's quota",
    )
    parser.add_argument(
        "--all", action="store_true", help="--describe: every config, not only those set on it"
    )
    parser.add_argument(
        "--add-config", default="", metavar="KEY=VALUE[,KEY=VALUE]", help="values to set"
    )
    parser.add_argument("--delete-config", default="", metavar="KEY[,KEY]", help="keys to remove")
    parser.set_defaults(func=tool(_run))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


def _pairs(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ToolError(f"--add-config expects KEY=VALUE, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _keys(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]


async def _run(args: argparse.Namespace) -> int:
    if args.entity_type == "topics" and args.entity_default:
        raise ToolError("topics have no --entity-default; name one with --entity-name")
    if args.entity_type in ("topics",) and args.entity_name is None:
        raise ToolError("--entity-name is required for topics")
    if args.alter and args.entity_name is None and not args.entity_default:
        raise ToolError("--alter needs --entity-name or --entity-default")
    if args.entity_type in ("clients", "users"):
        return await _quotas(args)
    return await _configs(args)


def _label(args: argparse.Namespace, name: str) -> str:
    if args.entity_type == "topics":
        return f"topic {name}"
    return "default config for brokers in the cluster" if name == "" else f"broker {name}"


async def _configs(args: argparse.Namespace) -> int:
    resource = ResourceType.TOPIC if args.entity_type == "topics" else ResourceType.BROKER
    async with _admin(args) as admin:
        if args.alter:
            add, delete = _pairs(args.add_config), _keys(args.delete_config)
            if not add and not delete:
                raise ToolError("nothing to alter: give --add-config or --delete-config")
            name = "" if args.entity_default else args.entity_name
            await admin.alter_configs(
                name, set_configs=add, delete_configs=delete, resource_type=resource
            )
            label = _label(args, name)
            if name == "" and resource == ResourceType.BROKER:
                print(f"Completed updating {label}.")
            else:
                print(f"Completed updating config for {label}.")
            return EXIT_OK
        if args.entity_default or resource == ResourceType.TOPIC:
            names = ["" if args.entity_default else args.entity_name]
        elif args.entity_name is not None:
            names = [args.entity_name]
        else:  # every broker, as kafka-configs.sh --describe --entity-type brokers
            await admin.cluster.refresh_metadata(())
            names = [str(node) for node in sorted(admin.cluster.metadata.brokers)]
        for name in names:
            entries = await admin.describe_configs(name, resource, include_synonyms=True)
            if name == "" and resource == ResourceType.BROKER:
                print("Default configs for brokers in the cluster are:")
                shown = list(entries.values())
            else:
                own = _OWN_SOURCE[args.entity_type]
                heading = "All" if args.all else "Dynamic"
                print(f"{heading} configs for {_label(args, name)} are:")
                shown = [e for e in entries.values() if args.all or e.source == own]
            for entry in sorted(shown, key=lambda e: e.name):
                print(f"  {_line(entry)}")
    return EXIT_OK


def _line(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{source.name}:{name}={value}" for name, value, source in entry.synonyms)
    value = "null" if entry.value is None else entry.value
    return f"{entry.name}={value} sensitive={str(entry.sensitive).lower()} synonyms={{{synonyms}}}"


def _number(value: float) -> str:
    return str(float(value))


async def _quotas(args: argparse.Namespace) -> int:
    kind = USER if args.entity_type == "users" else CLIENT_ID
    singular = "user" if kind == USER else "client"
    name = None if args.entity_default else args.entity_name
    async with _admin(args) as admin:
        if args.alter:
            add: dict[str, float] = {}
            for key, value in _pairs(args.add_config).items():
                try:
                    add[key] = float(value)
                except ValueError:
                    raise ToolError(f"--add-config: {key} needs a number, got {value!r}") from None
            delete = _keys(args.delete_config)
            if not add and not delete:
                raise ToolError("nothing to alter: give --add-config or --delete-config")
            await admin.alter_client_quotas([ClientQuotaAlteration({kind: name}, add, delete)])
            target = "<default>" if name is None else name
            print(f"Completed updating config for {singular} {target}.")
            return EXIT_OK
        if args.entity_default:
            components = [QuotaFilterComponent.default(kind)]
        elif name is not None:
            components = [QuotaFilterComponent.exact(kind, name)]
        else:
            components = [QuotaFilterComponent.any(kind)]
        entries = await admin.describe_client_quotas(components, strict=True)
    label = "user-principal" if kind == USER else "client-id"
    for entry in entries:
        shown = entry.entity.get(kind)
        target = shown if shown is not None else "<default>"
        values = ", ".join(f"{k}={_number(v)}" for k, v in sorted(entry.values.items()))
        print(f"Quota configs for {label} '{target}' are {values}")
    return EXIT_OK
