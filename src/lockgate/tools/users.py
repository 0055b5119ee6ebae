# tools/users.py — `lockgate users add|list|delete`: SCRAM credentials (which PLAIN is checked
# against too). Against a running broker through Describe/AlterUserScramCredentials (keys
# 50/51) with the caller's own security settings (--command-config FILE of client
# properties, as Kafka's tools take, or flags); or offline, to create the first user before
# anyone can authenticate, as `kafka-storage format --add-scram` does: --data-dir for a single
# node that is not running, --cluster for the cluster's etcd. The password never leaves this
# process: only the salted password (online) or the derived credential (offline) does.
from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from lockgate.client.admin import Admin
from lockgate.client.admin_scram import ScramDeletion, ScramUpsertion
from lockgate.protocol.errors import ErrorCode
from lockgate.security.credentials import (
    CredentialStore,
    Deletion,
    EtcdCredentialStore,
    LocalCredentialStore,
    Upsertion,
    UserResult,
    Users,
    alter,
)
from lockgate.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
    new_salt,
)
from lockgate.storage.disk import DiskEngine
from lockgate.tools.common import (
    EXIT_OK,
    ToolError,
    client_security,
    connection_options,
    security_options,
    tool,
)
from lockgate.tools.table import render

MECHANISMS = [m.mechanism_name for m in ScramMechanism]
CLEAN_SHUTDOWN_MARK = "clean-shutdown"  # the broker's: "0" while it runs


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("users", help="SCRAM users (SASL PLAIN and SCRAM-SHA-256/512)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    parents = [connection_options(), security_options(), _where_options()]
    add = actions.add_parser("add", parents=parents, help="create a user or set its password")
    add.add_argument("name")
    add.add_argument("--password", required=True, help="the password (never stored in clear)")
    add.add_argument("--mechanism", choices=MECHANISMS, default=MECHANISMS[0])
    add.add_argument(
        "--iterations",
        type=int,
        default=MIN_ITERATIONS,
        help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {MIN_ITERATIONS})",
    )
    add.set_defaults(func=tool(add_user))
    listing = actions.add_parser("list", parents=parents, help="users and their mechanisms")
    listing.set_defaults(func=tool(list_users))
    delete = actions.add_parser("delete", parents=parents, help="delete a user's credentials")
    delete.add_argument("name")
    delete.add_argument(
        "--mechanism", choices=MECHANISMS, help="only this mechanism's (default: every one)"
    )
    delete.set_defaults(func=tool(delete_user))


def _where_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    offline = parent.add_mutually_exclusive_group()
    offline.add_argument(
        "--data-dir", type=Path, help="offline: the data directory of a single node not running"
    )
    offline.add_argument(
        "--cluster", metavar="etcd://HOST:PORT[/NAMESPACE]", help="offline: the cluster's etcd"
    )
    return parent


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server,
        client_id=args.client_id,
        request_timeout_ms=args.request_timeout_ms,
        security=client_security(args),
    )


def _offline_store(args: argparse.Namespace) -> CredentialStore | None:
    if args.data_dir is not None:
        engine = DiskEngine(str(args.data_dir))
        if engine.read_all(CLEAN_SHUTDOWN_MARK) == b"0":
            print(
                f"lockgate users: warning: the broker of {args.data_dir} is running or did not "
                "stop cleanly; a running broker neither sees this change nor keeps it",
                file=sys.stderr,
            )
        return LocalCredentialStore(engine)
    if args.cluster is not None:
        try:
            return EtcdCredentialStore.from_url(args.cluster)
        except ValueError as exc:
            raise ToolError(f"--cluster: {exc}") from None
    return None


async def _change_offline(
    store: CredentialStore, deletions: list[Deletion], upsertions: list[Upsertion]
) -> list[UserResult]:
    """One AlterUserScramCredentials' worth of change, applied to a started store."""
    outcome: list[UserResult] = []

    def change(users: Users) -> Users:
        changed, results = alter(users, deletions, upsertions)
        outcome[:] = results
        return changed

    await store.change(change)
    return outcome


@contextlib.asynccontextmanager
async def _opened(store: CredentialStore) -> AsyncIterator[CredentialStore]:
    await store.start()
    try:
        yield store
    finally:
        await store.close()


def _check(results: list[UserResult]) -> None:
    for result in results:
        if result.error != ErrorCode.none:
            raise ToolError(f"user {result.user!r}: {result.error.name.upper()}: {result.message}")


async def add_user(args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ToolError(f"--iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}")
    store = _offline_store(args)
    if store is None:
        async with _admin(args) as admin:
            await admin.alter_user_scram_credentials(
                [ScramUpsertion(args.name, args.password, args.mechanism, args.iterations)]
            )
    else:
        mechanism = ScramMechanism.by_name(args.mechanism)
        assert mechanism is not None
        salt = new_salt()
        salted = await asyncio.to_thread(
            mechanism.salted_password, args.password, salt, args.iterations
        )
        upsertion = Upsertion(args.name, mechanism.type_code, args.iterations, salt, salted)
        async with _opened(store):
            _check(await _change_offline(store, [], [upsertion]))
    print(f"user {args.name}: {args.mechanism} credential set ({args.iterations} iterations)")
    return EXIT_OK


async def list_users(args: argparse.Namespace) -> int:
    store = _offline_store(args)
    rows: list[list[str]] = []
    if store is None:
        async with _admin(args) as admin:
            described = await admin.describe_user_scram_credentials()
        for user, infos in sorted(described.items()):
            for info in infos:
                rows.append([user, info.mechanism, str(info.iterations)])
    else:
        async with _opened(store):
            users = await store.users()
        for user, entries in sorted(users.items()):
            for mechanism, credential in sorted(entries.items()):
                rows.append([user, mechanism, str(credential.iterations)])
    print(render(["USER", "MECHANISM", "ITERATIONS"], rows))
    return EXIT_OK


async def delete_user(args: argparse.Namespace) -> int:
    store = _offline_store(args)
    mechanisms: list[str] = [args.mechanism] if args.mechanism else []
    # one deletion per request: Kafka refuses a user named twice in one
    if store is None:
        async with _admin(args) as admin:
            if not mechanisms:
                described = await admin.describe_user_scram_credentials([args.name])
                mechanisms = [info.mechanism for info in described.get(args.name, [])]
            for mechanism in mechanisms:
                await admin.alter_user_scram_credentials([ScramDeletion(args.name, mechanism)])
    else:
        async with _opened(store):
            if not mechanisms:
                mechanisms = sorted(await store.credentials(args.name))
                if not mechanisms:
                    raise ToolError(f"user {args.name!r}: no such user")
            for name in mechanisms:
                scram = ScramMechanism.by_name(name)
                assert scram is not None
                deletion = Deletion(args.name, scram.type_code)
                _check(await _change_offline(store, [deletion], []))
    print(f"user {args.name}: {', '.join(mechanisms)} credential deleted")
    return EXIT_OK
