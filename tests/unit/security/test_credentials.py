# The SCRAM credential store: Kafka's Describe/Alter semantics (pure), the single-node engine
# across a restart of its disk engine, and the etcd engine (two stores on one key see each
# other's changes at once; compare-and-swap is tested with the document under it).
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.protocol.errors import ErrorCode
from lockgate.security.credentials import (
    Deletion,
    EtcdCredentialStore,
    LocalCredentialStore,
    Upsertion,
    UserResult,
    Users,
    alter,
    decode_users,
    describe,
    encode_users,
)
from lockgate.security.scram import ScramMechanism, derive_credential, password_matches
from lockgate.storage.disk import DiskEngine
from tests.support.etcd import EtcdCluster

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def upsertion(user: str, password: str, mechanism: int = 1, iterations: int = 4096) -> Upsertion:
    scram = ScramMechanism.by_type(mechanism) or SHA256
    salt = b"salt-" + user.encode()
    return Upsertion(
        user, mechanism, iterations, salt, scram.salted_password(password, salt, iterations)
    )


def codes(results: list[UserResult]) -> dict[str, ErrorCode]:
    return {r.user: r.error for r in results}


def test_alter_upserts_and_deletes() -> None:
    users, results = alter({}, [], [upsertion("alice", "pw"), upsertion("bob", "pw2", 2, 8192)])
    assert codes(results) == {"alice": ErrorCode.none, "bob": ErrorCode.none}
    assert password_matches(SHA256, users["alice"]["SCRAM-SHA-256"], "pw")
    assert users["bob"]["SCRAM-SHA-512"].iterations == 8192
    users, results = alter(users, [Deletion("alice", 1)], [upsertion("bob", "pw3", 1)])
    assert codes(results) == {"alice": ErrorCode.none, "bob": ErrorCode.none}
    assert "alice" not in users and set(users["bob"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_alter_errors_are_kafkas() -> None:
    base, _ = alter({}, [], [upsertion("alice", "pw")])
    users, results = alter(
        base,
        [Deletion("ghost", 1), Deletion("alice", 2), Deletion("twice", 1)],
        [
            upsertion("twice", "x"),
            upsertion("", "x"),
            upsertion("bad-mechanism", "x", mechanism=7),
            upsertion("few", "x", iterations=4095),
            upsertion("many", "x", iterations=16385),
            upsertion("dup", "x"),
            upsertion("dup", "y"),
        ],
    )
    assert codes(results) == {
        "ghost": ErrorCode.resource_not_found,
        "alice": ErrorCode.resource_not_found,  # she has SHA-256 only
        "twice": ErrorCode.resource_not_found,  # the deletion failed first
        "": ErrorCode.unacceptable_credential,
        "bad-mechanism": ErrorCode.unsupported_sasl_mechanism,
        "few": ErrorCode.unacceptable_credential,
        "many": ErrorCode.unacceptable_credential,
        "dup": ErrorCode.duplicate_resource,
    }
    assert users == base  # nothing applied
    both, results = alter(base, [Deletion("alice", 1)], [upsertion("alice", "new")])
    assert codes(results) == {"alice": ErrorCode.duplicate_resource}
    assert both == base


def test_describe() -> None:
    users, _ = alter({}, [], [upsertion("alice", "pw"), upsertion("bob", "pw", 2, 5000)])
    everyone = describe(users, None)
    assert [(d.user, d.credentials) for d in everyone] == [
        ("alice", ((1, 4096),)),
        ("bob", ((2, 5000),)),
    ]
    assert describe(users, []) == everyone
    asked = describe(users, ["bob", "nobody", "alice", "alice"])
    assert [(d.user, d.error) for d in asked] == [
        ("bob", ErrorCode.none),
        ("nobody", ErrorCode.resource_not_found),
        ("alice", ErrorCode.duplicate_resource),
    ]
    assert asked[1].message is not None and "nobody" in asked[1].message


def test_encoding_round_trip_and_version() -> None:
    users: Users = {"a,b=c": {"SCRAM-SHA-512": derive_credential(SHA512, "pw")}}
    assert decode_users(encode_users(users)) == users
    assert decode_users(None) == {}
    with pytest.raises(ValueError):
        decode_users(b'{"version": 9, "users": {}}')


async def test_local_store_survives_a_restart(tmp_path: Path) -> None:
    store = LocalCredentialStore(DiskEngine(str(tmp_path)))
    assert await store.credentials("alice") == {}
    await store.change(lambda users: alter(users, [], [upsertion("alice", "pw")])[0])
    reopened = LocalCredentialStore(DiskEngine(str(tmp_path)))
    found = await reopened.credentials("alice")
    assert password_matches(SHA256, found["SCRAM-SHA-256"], "pw")
    await reopened.change(lambda users: alter(users, [Deletion("alice", 1)], [])[0])
    assert await LocalCredentialStore(DiskEngine(str(tmp_path))).users() == {}


async def test_etcd_store_shared_between_brokers(one_etcd: EtcdCluster) -> None:
    first = EtcdCredentialStore.from_url(one_etcd.url + "/credentials-test")
    second = EtcdCredentialStore.from_url(one_etcd.url + "/credentials-test")
    other_cluster = EtcdCredentialStore.from_url(one_etcd.url + "/elsewhere")
    for store in (first, second, other_cluster):
        await store.start()
    try:
        await first.change(lambda users: alter(users, [], [upsertion("alice", "pw")])[0])
        seen = await second.credentials("alice")
        assert password_matches(SHA256, seen["SCRAM-SHA-256"], "pw")
        assert await other_cluster.users() == {}
        await second.change(lambda users: alter(users, [Deletion("alice", 1)], [])[0])
        assert await first.credentials("alice") == {}
    finally:
        for store in (first, second, other_cluster):
            await store.close()


async def test_users_cli_offline_on_the_cluster(one_etcd: EtcdCluster) -> None:
    """`lockgate users --cluster` writes where the cluster's brokers read."""
    url = one_etcd.url + "/cli-test"

    def users(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lockgate.cli", "users", *args, "--cluster", url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    added = await asyncio.to_thread(users, "add", "gina", "--password", "pw", "--mechanism",
                                    "SCRAM-SHA-512", "--iterations", "5000")  # fmt: skip
    assert added.returncode == 0, added.stderr
    store = EtcdCredentialStore.from_url(url)
    await store.start()
    try:
        found = await store.credentials("gina")
        assert found["SCRAM-SHA-512"].iterations == 5000
        assert password_matches(SHA512, found["SCRAM-SHA-512"], "pw")
        listed = await asyncio.to_thread(users, "list")
        assert ["gina", "SCRAM-SHA-512", "5000"] in [
            line.split() for line in listed.stdout.splitlines()
        ]
        deleted = await asyncio.to_thread(users, "delete", "gina")
        assert deleted.returncode == 0, deleted.stderr
        assert await store.credentials("gina") == {}
        missing = await asyncio.to_thread(users, "delete", "gina")
        assert missing.returncode != 0 and "no such user" in missing.stderr
    finally:
        await store.close()
