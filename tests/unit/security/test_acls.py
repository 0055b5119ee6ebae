"""The ACL model: resource matching (literal, wildcard, prefixed), what one ACL decides
(principal, host, implied operations, ALLOW vs DENY), filters, validation and storage form."""

from __future__ import annotations

import pytest

from lockgate.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    code_of,
    decode_bindings,
    encode_bindings,
    parse_enum,
)

TOPIC = ResourceType.TOPIC


def acl(
    name: str = "orders",
    operation: Operation = Operation.READ,
    permission: Permission = Permission.ALLOW,
    *,
    pattern: PatternType = PatternType.LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    resource: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource, name, pattern), AclEntry(principal, host, operation, permission)
    )


def test_kafka_wire_codes() -> None:
    assert (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER) == (2, 3, 4)
    assert (ResourceType.TRANSACTIONAL_ID, ResourceType.USER) == (5, 7)
    assert (PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED) == (2, 3, 4)
    assert (Operation.ALL, Operation.READ, Operation.DESCRIBE, Operation.IDEMPOTENT_WRITE) == (
        2,
        3,
        8,
        12,
    )
    assert int(Operation.TWO_PHASE_COMMIT) == 15  # KIP-939
    assert (Permission.DENY, Permission.ALLOW) == (2, 3)
    assert code_of(Operation, 99) == Operation.UNKNOWN


def test_resource_matching() -> None:
    literal = ResourcePattern(TOPIC, "orders")
    assert literal.matches(TOPIC, "orders")
    assert not literal.matches(TOPIC, "orders2")
    assert not literal.matches(ResourceType.GROUP, "orders")
    wildcard = ResourcePattern(TOPIC, "*")
    assert wildcard.matches(TOPIC, "anything")
    prefixed = ResourcePattern(TOPIC, "ord", PatternType.PREFIXED)
    assert prefixed.matches(TOPIC, "orders") and prefixed.matches(TOPIC, "ord")
    assert not prefixed.matches(TOPIC, "xorders")
    # a prefixed "*" is a prefix like any other: only names starting with "*"
    assert not ResourcePattern(TOPIC, "*", PatternType.PREFIXED).matches(TOPIC, "orders")


def test_principal_and_host() -> None:
    principals = ("User:alice", "User:*")
    assert acl().decides(principals, "10.0.0.1", Operation.READ) == Permission.ALLOW
    assert acl(principal="User:bob").decides(principals, "h", Operation.READ) == Permission.UNKNOWN
    assert acl(principal="User:*").decides(principals, "h", Operation.READ) == Permission.ALLOW
    assert acl(host="10.0.0.1").decides(principals, "10.0.0.1", Operation.READ) == Permission.ALLOW
    assert acl(host="10.0.0.1").decides(principals, "10.0.0.2", Operation.READ) == (
        Permission.UNKNOWN
    )


@pytest.mark.parametrize(
    ("granted", "asked", "applies"),
    [
        (Operation.READ, Operation.DESCRIBE, True),
        (Operation.WRITE, Operation.DESCRIBE, True),
        (Operation.DELETE, Operation.DESCRIBE, True),
        (Operation.ALTER, Operation.DESCRIBE, True),
        (Operation.CREATE, Operation.DESCRIBE, False),
        (Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS, True),
        (Operation.ALTER_CONFIGS, Operation.DESCRIBE, False),
        (Operation.ALL, Operation.TWO_PHASE_COMMIT, True),
        (Operation.WRITE, Operation.TWO_PHASE_COMMIT, False),
        (Operation.DESCRIBE, Operation.READ, False),
    ],
)
def test_implied_operations_for_allow(granted: Operation, asked: Operation, applies: bool) -> None:
    verdict = acl(operation=granted).decides(("User:alice",), "h", asked)
    assert verdict == (Permission.ALLOW if applies else Permission.UNKNOWN)


def test_deny_implies_nothing_but_deny_all_denies_everything() -> None:
    deny_read = acl(operation=Operation.READ, permission=Permission.DENY)
    assert deny_read.decides(("User:alice",), "h", Operation.DESCRIBE) == Permission.UNKNOWN
    assert deny_read.decides(("User:alice",), "h", Operation.READ) == Permission.DENY
    deny_all = acl(operation=Operation.ALL, permission=Permission.DENY)
    assert deny_all.decides(("User:alice",), "h", Operation.DESCRIBE) == Permission.DENY


def test_filters() -> None:
    literal = acl("orders")
    prefixed = acl("ord", pattern=PatternType.PREFIXED)
    wildcard = acl("*")
    other = acl("payments", principal="User:bob", operation=Operation.WRITE)
    every = [literal, prefixed, wildcard, other]
    assert [b for b in every if AclBindingFilter().matches(b)] == every
    by_name = AclBindingFilter(TOPIC, "orders", PatternType.ANY)
    assert [b for b in every if by_name.matches(b)] == [literal]
    # MATCH: every ACL that would apply to topic "orders"
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == [literal, prefixed, wildcard]
    by_principal = AclBindingFilter(principal="User:bob", operation=Operation.WRITE)
    assert [b for b in every if by_principal.matches(b)] == [other]
    assert AclBindingFilter.exact(prefixed).matches(prefixed)
    assert not AclBindingFilter.exact(prefixed).matches(literal)
    assert not AclBindingFilter(ResourceType.GROUP).matches(literal)
    with pytest.raises(AclError):
        AclBindingFilter(operation=Operation.UNKNOWN).validate()
    AclBindingFilter().validate()


@pytest.mark.parametrize(
    "binding",
    [
        acl(resource=ResourceType.ANY),
        acl(resource=ResourceType.UNKNOWN),
        acl(pattern=PatternType.MATCH),
        acl(pattern=PatternType.ANY),
        acl(operation=Operation.ANY),
        acl(permission=Permission.ANY),
        acl(""),
        acl(principal="alice"),
        acl(host=""),
    ],
)
def test_invalid_bindings_are_refused(binding: AclBinding) -> None:
    with pytest.raises(AclError):
        binding.validate()


def test_storage_form_round_trips() -> None:
    bindings = [acl(), acl("tx-", Operation.TWO_PHASE_COMMIT, pattern=PatternType.PREFIXED,
                          resource=ResourceType.TRANSACTIONAL_ID)]  # fmt: skip
    for binding in bindings:
        binding.validate()
    assert sorted(decode_bindings(encode_bindings(bindings))) == sorted(bindings)


def test_parse_names_as_kafka_acls_spells_them() -> None:
    assert parse_enum(Operation, "two-phase-commit") == Operation.TWO_PHASE_COMMIT
    assert parse_enum(Operation, "IdempotentWrite".replace("W", "_W")) == Operation.IDEMPOTENT_WRITE
    assert parse_enum(ResourceType, "transactional_id") == ResourceType.TRANSACTIONAL_ID
    with pytest.raises(AclError):
        parse_enum(Operation, "fly")
