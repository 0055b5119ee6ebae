"""The authorizer's decisions (as Kafka's StandardAuthorizer): DENY before ALLOW, prefixed and
wildcard resources, User:*, hosts, super users, allow.everyone.if.no.acl.found, KIP-430
bitfields, KIP-679's any-topic WRITE, and the ACL stores: the single node's file survives a
restart, and in etcd a change made through one broker's store reaches another's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lockgate.security.acl_store import EtcdAclStore, LocalAclStore
from lockgate.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from lockgate.security.authorizer import Authorizer, parse_super_users
from lockgate.security.session import SecurityProtocol, Session
from lockgate.storage.disk import DiskEngine
from lockgate.storage.memory import MemoryEngine
from tests.support.etcd import EtcdCluster

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def session(user: str, host: str = "10.0.0.1") -> Session:
    return Session("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, host, f"User:{user}")


ALICE, BOB = session("alice"), session("bob")


def acl(
    resource: ResourceType,
    name: str,
    operation: Operation,
    permission: Permission = ALLOW,
    principal: str = "User:alice",
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource, name, pattern), AclEntry(principal, host, operation, permission)
    )


def authorizer(
    *bindings: AclBinding, super_users: str = "", allow_if_no_acl: bool = False
) -> Authorizer:
    store = LocalAclStore(MemoryEngine())
    store.create_now(bindings)
    return Authorizer(store, parse_super_users(super_users), allow_if_no_acl)


def test_no_acl_denies_by_default() -> None:
    assert not authorizer().allowed(ALICE, Operation.READ, TOPIC, "orders")


def test_literal_allow_applies_to_that_principal_only() -> None:
    auth = authorizer(acl(TOPIC, "orders", Operation.READ))
    assert auth.allowed(ALICE, Operation.READ, TOPIC, "orders")
    assert auth.allowed(ALICE, Operation.DESCRIBE, TOPIC, "orders")  # READ implies DESCRIBE
    assert not auth.allowed(ALICE, Operation.WRITE, TOPIC, "orders")
    assert not auth.allowed(BOB, Operation.READ, TOPIC, "orders")
    assert not auth.allowed(ALICE, Operation.READ, TOPIC, "payments")


def test_deny_wins_over_allow_from_any_pattern() -> None:
    auth = authorizer(
        acl(TOPIC, "*", Operation.ALL, principal="User:*"),
        acl(TOPIC, "secret-", Operation.READ, DENY, pattern=PatternType.PREFIXED),
    )
    assert auth.allowed(ALICE, Operation.READ, TOPIC, "public")
    assert not auth.allowed(ALICE, Operation.READ, TOPIC, "secret-plans")
    assert auth.allowed(ALICE, Operation.DESCRIBE, TOPIC, "secret-plans")  # DENY implies nothing
    assert auth.allowed(BOB, Operation.READ, TOPIC, "secret-plans")


def test_prefixed_allow_and_hosts() -> None:
    auth = authorizer(
        acl(TXN, "app-", Operation.WRITE, pattern=PatternType.PREFIXED, host="10.0.0.1")
    )
    assert auth.allowed(ALICE, Operation.WRITE, TXN, "app-1")
    assert not auth.allowed(ALICE, Operation.WRITE, TXN, "other")
    assert not auth.allowed(session("alice", "10.0.0.2"), Operation.WRITE, TXN, "app-1")


def test_two_phase_commit_is_its_own_operation() -> None:
    auth = authorizer(acl(TXN, "tx", Operation.WRITE))
    assert not auth.allowed(ALICE, Operation.TWO_PHASE_COMMIT, TXN, "tx")
    auth = authorizer(acl(TXN, "tx", Operation.WRITE), acl(TXN, "tx", Operation.TWO_PHASE_COMMIT))
    assert auth.allowed(ALICE, Operation.TWO_PHASE_COMMIT, TXN, "tx")


def test_super_users_may_do_anything_even_when_denied() -> None:
    auth = authorizer(
        acl(CLUSTER, "kafka-cluster", Operation.ALL, DENY, principal="User:*"),
        super_users="User:broker; User:admin",
    )
    assert auth.allowed(session("admin"), Operation.ALTER, CLUSTER, "kafka-cluster")
    assert auth.allowed(session("broker"), Operation.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not auth.allowed(ALICE, Operation.DESCRIBE, CLUSTER, "kafka-cluster")


def test_allow_everyone_if_no_acl_found_only_for_resources_without_acls() -> None:
    auth = authorizer(acl(TOPIC, "orders", Operation.READ), allow_if_no_acl=True)
    assert auth.allowed(BOB, Operation.WRITE, TOPIC, "free-for-all")
    assert not auth.allowed(BOB, Operation.READ, TOPIC, "orders")  # orders has ACLs
    assert auth.allowed(ALICE, Operation.READ, TOPIC, "orders")


def test_changes_apply_at_once() -> None:
    auth = authorizer()
    assert not auth.allowed(ALICE, Operation.READ, GROUP, "g")  # cached as denied
    assert isinstance(auth.store, LocalAclStore)
    auth.store.create_now([acl(GROUP, "g", Operation.READ)])
    assert auth.allowed(ALICE, Operation.READ, GROUP, "g")
    removed = auth.store.delete_now([AclBindingFilter(GROUP)])
    assert removed == [[acl(GROUP, "g", Operation.READ)]]
    assert not auth.allowed(ALICE, Operation.READ, GROUP, "g")


def test_kip430_bitfield() -> None:
    auth = authorizer(acl(GROUP, "g", Operation.READ))
    bits = auth.authorized_operations(ALICE, GROUP, "g")
    assert bits == (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    assert auth.authorized_operations(BOB, GROUP, "g") == 0


def test_write_on_any_topic_kip679() -> None:
    assert not authorizer().allowed_on_any(ALICE, Operation.WRITE, TOPIC)
    auth = authorizer(acl(TOPIC, "orders", Operation.WRITE))
    assert auth.allowed_on_any(ALICE, Operation.WRITE, TOPIC)
    assert not auth.allowed_on_any(BOB, Operation.WRITE, TOPIC)
    denied = authorizer(
        acl(TOPIC, "orders", Operation.WRITE),
        acl(TOPIC, "ord", Operation.WRITE, DENY, pattern=PatternType.PREFIXED),
    )
    assert not denied.allowed_on_any(ALICE, Operation.WRITE, TOPIC)
    everything_denied = authorizer(
        acl(TOPIC, "orders", Operation.WRITE), acl(TOPIC, "*", Operation.WRITE, DENY)
    )
    assert not everything_denied.allowed_on_any(ALICE, Operation.WRITE, TOPIC)


def test_local_store_survives_a_restart(tmp_path: Path) -> None:
    binding = acl(TOPIC, "orders", Operation.WRITE)
    store = LocalAclStore(DiskEngine(str(tmp_path), 16))
    store.create_now([binding, binding])
    reopened = LocalAclStore(DiskEngine(str(tmp_path), 16))
    assert reopened.bindings == {binding}
    assert Authorizer(reopened).allowed(ALICE, Operation.WRITE, TOPIC, "orders")


async def test_etcd_store_changes_reach_every_broker(one_etcd: EtcdCluster) -> None:
    first = EtcdAclStore.from_url(one_etcd.url + "/acltest")
    second = EtcdAclStore.from_url(one_etcd.url + "/acltest")
    await first.start()
    await second.start()
    try:
        on_second = Authorizer(second)
        binding, other = acl(TOPIC, "orders", Operation.READ), acl(GROUP, "g", Operation.READ)
        await first.create([binding, other])
        for _ in range(200):  # the watch delivers it
            if on_second.allowed(ALICE, Operation.READ, TOPIC, "orders"):
                break
            await asyncio.sleep(0.02)
        assert on_second.allowed(ALICE, Operation.READ, TOPIC, "orders")
        assert await second.delete([AclBindingFilter(TOPIC)]) == [[binding]]
        assert not on_second.allowed(ALICE, Operation.READ, TOPIC, "orders")  # its own write
        for _ in range(200):
            if first.bindings == {other}:
                break
            await asyncio.sleep(0.02)
        assert first.bindings == {other}
    finally:
        await first.close()
        await second.close()
