# tools/acls.py — `lockgate acls add|list|remove`, with kafka-acls.sh's options where they fit:
# --allow-principal/--deny-principal, --allow-host/--deny-host, --operation, --topic, --group,
# --transactional-id, --cluster, --resource-pattern-type and the --producer/--consumer
# conveniences. Against a running broker it uses CreateAcls/DescribeAcls/DeleteAcls (the
# caller needs ALTER, resp. DESCRIBE, on the cluster); with --data-dir DIR it edits the ACLs of
# a single-node broker that is not running (bootstrapping the first grants before it starts).
from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Iterable

from lockgate.client.admin import Admin
from lockgate.security.acl_store import LocalAclStore
from lockgate.security.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_enum,
)
from lockgate.storage.disk import DiskEngine
from lockgate.tools.common import EXIT_OK, ToolError, connection_options, tool

Resource = tuple[ResourceType, str]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("acls", help="access control lists (like kafka-acls.sh)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text, func in (
        ("add", "grant (or deny) operations on resources", _add),
        ("list", "the ACLs on the named resources (all ACLs when none is named)", _list),
        ("remove", "remove the ACLs matching the options", _remove),
    ):
        action = actions.add_parser(name, parents=[connection_options(), _options()], help=text)
        action.set_defaults(func=tool(func))


def _options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--data-dir",
        metavar="DIR",
        help="edit the ACLs stored in a stopped single-node broker's data directory",
    )
    add = parent.add_argument
    add("--allow-principal", action="append", default=[], metavar="User:NAME")
    add("--deny-principal", action="append", default=[], metavar="User:NAME")
    add("--principal", action="append", default=[], metavar="User:NAME", help="list: filter")
    add("--allow-host", action="append", default=[], metavar="HOST", help="default *")
    add("--deny-host", action="append", default=[], metavar="HOST", help="default *")
    add(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, TwoPhaseCommit, All (add: default All)",
    )
    add("--topic", action="append", default=[], metavar="NAME")
    add("--group", action="append", default=[], metavar="NAME")
    add("--transactional-id", action="append", default=[], metavar="ID")
    add("--cluster", action="store_true", help="the cluster resource")
    add(
        "--resource-pattern-type",
        default="literal",
        metavar="TYPE",
        help="literal (default) or prefixed; list/remove also take any and match",
    )
    producer = "WRITE, DESCRIBE, CREATE on the topics, WRITE, DESCRIBE on transactional ids"
    add("--producer", action="store_true", help=producer)
    add("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE")
    add("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on groups")
    return parent


def _operation(text: str) -> Operation:
    """kafka-acls.sh's CamelCase names (TwoPhaseCommit) as well as TWO_PHASE_COMMIT."""
    return parse_enum(Operation, re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()))


def _resources(args: argparse.Namespace) -> list[Resource]:
    resources: list[Resource] = [(ResourceType.TOPIC, name) for name in args.topic]
    resources += [(ResourceType.GROUP, name) for name in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _pattern_type(args: argparse.Namespace, *, filtering: bool) -> PatternType:
    pattern = parse_enum(PatternType, args.resource_pattern_type)
    allowed = (PatternType.LITERAL, PatternType.PREFIXED) + (
        (PatternType.ANY, PatternType.MATCH) if filtering else ()
    )
    if pattern not in allowed:
        raise ToolError(f"--resource-pattern-type {args.resource_pattern_type} is not allowed here")
    return pattern


def _operations_on(args: argparse.Namespace, resource: Resource) -> list[Operation]:
    """--operation, else the --producer/--consumer sets for the resource's type."""
    if args.operation:
        return [_operation(text) for text in args.operation]
    kind = resource[0]
    chosen: list[Operation] = []
    if args.producer:
        if kind == ResourceType.TOPIC:
            chosen += [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
        elif kind == ResourceType.TRANSACTIONAL_ID:
            chosen += [Operation.WRITE, Operation.DESCRIBE]
        elif kind == ResourceType.CLUSTER and args.idempotent:
            chosen.append(Operation.IDEMPOTENT_WRITE)
    if args.consumer:
        if kind == ResourceType.TOPIC:
            chosen += [Operation.READ, Operation.DESCRIBE]
        elif kind == ResourceType.GROUP:
            chosen.append(Operation.READ)
    if args.producer or args.consumer:
        return chosen
    return [Operation.ALL]


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    resources = _resources(args)
    if args.producer and args.idempotent and not args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources:
        raise ToolError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise ToolError("name a principal: --allow-principal or --deny-principal User:NAME")
    pattern_type = _pattern_type(args, filtering=False)
    bindings = []
    grants = [
        (Permission.ALLOW, args.allow_principal, args.allow_host or [WILDCARD]),
        (Permission.DENY, args.deny_principal, args.deny_host or [WILDCARD]),
    ]
    for permission, principals, hosts in grants:
        for (kind, name), principal, host in itertools.product(resources, principals, hosts):
            named = CLUSTER_NAME if kind == ResourceType.CLUSTER else name
            for operation in _operations_on(args, (kind, name)):
                binding = AclBinding(
                    ResourcePattern(kind, named, pattern_type),
                    AclEntry(principal, host, operation, permission),
                )
                binding.validate()
                bindings.append(binding)
    return bindings


def filters_of(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern_type = _pattern_type(args, filtering=True)
    principals: list[tuple[str | None, Permission]] = [
        (p, Permission.ALLOW) for p in args.allow_principal
    ] + [(p, Permission.DENY) for p in args.deny_principal]
    principals += [(p, Permission.ANY) for p in args.principal]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    if not resources:
        resources = [(ResourceType.ANY, None)]
    filters = []
    for (kind, name), (principal, permission) in itertools.product(
        resources, principals or [(None, Permission.ANY)]
    ):
        operations = (
            [_operation(text) for text in args.operation] if args.operation else [Operation.ANY]
        )
        for operation in operations:
            filters.append(
                AclBindingFilter(
                    kind,
                    name,
                    pattern_type if name is not None else PatternType.ANY,
                    principal,
                    None,
                    operation,
                    permission,
                )
            )
    return filters


def render(bindings: Iterable[AclBinding]) -> str:
    """kafka-acls.sh's listing: each resource pattern, then its entries."""
    lines: list[str] = []
    for pattern, group in itertools.groupby(sorted(bindings), key=lambda b: b.pattern):
        lines.append(
            f"Current ACLs for resource `ResourcePattern(resourceType={pattern.resource_type.name}"
            f", name={pattern.name}, patternType={pattern.pattern_type.name})`:"
        )
        for b in group:
            e = b.entry
            lines.append(
                f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permissionType={e.permission.name})"
            )
        lines.append("")
    return "\n".join(lines)


def _offline(args: argparse.Namespace) -> LocalAclStore | None:
    return LocalAclStore(DiskEngine(args.data_dir)) if args.data_dir else None


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server, client_id=args.client_id, request_timeout_ms=args.request_timeout_ms
    )


async def _add(args: argparse.Namespace) -> int:
    bindings = bindings_to_add(args)
    store = _offline(args)
    if store is not None:
        store.create_now(bindings)
    else:
        async with _admin(args) as admin:
            await admin.create_acls(bindings)
    print(f"Adding ACLs:\n{render(bindings)}")
    return EXIT_OK


async def _list(args: argparse.Namespace) -> int:
    filters = filters_of(args)
    store = _offline(args)
    if store is not None:
        found = {b for b in store.bindings if any(f.matches(b) for f in filters)}
    else:
        found = set()
        async with _admin(args) as admin:
            for wanted in filters:
                found.update(await admin.describe_acls(wanted))
    print(render(found), end="")
    return EXIT_OK


async def _remove(args: argparse.Namespace) -> int:
    if not _resources(args) and not (args.allow_principal or args.deny_principal or args.principal):
        raise ToolError("name what to remove: a resource and/or a principal")
    filters = filters_of(args)
    store = _offline(args)
    if store is not None:
        removed = store.delete_now(filters)
    else:
        async with _admin(args) as admin:
            removed = await admin.delete_acls(filters)
    gone = {b for found in removed for b in found}
    print(f"Removed ACLs:\n{render(gone)}", end="")
    return EXIT_OK
