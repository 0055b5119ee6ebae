# console/security.py — what the console's security page shows: ACL bindings (DescribeAcls,
# every binding in one request, filtered here by principal and resource), SCRAM users
# (DescribeUserScramCredentials: names, mechanisms and iterations; salts and keys never leave
# the broker), and client quotas (DescribeClientQuotas, every entity). Read-only, apart from
# creating and deleting one ACL binding.
#
# Invariant: a cluster without an authorizer (SECURITY_DISABLED) is not an error for the page:
# it says so instead of listing bindings.
from __future__ import annotations

from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.errors import ErrorCode, KafkaError
from lockgate.security.acls import (
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
from lockgate.tools.quotas import entity_name, quota_number


@dataclass(frozen=True, slots=True)
class AclRow:
    resource_type: str  # as kafka-acls.sh prints them: TOPIC, GROUP, ...
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True, slots=True)
class AclListing:
    rows: tuple[AclRow, ...]
    total: int  # bindings in the cluster, before the filter
    authorizer: bool  # False: the cluster has no authorizer (SECURITY_DISABLED)
    principal_filter: str
    resource_filter: str


@dataclass(frozen=True, slots=True)
class ScramUser:
    name: str
    credentials: tuple[tuple[str, int], ...]  # (mechanism, iterations)


@dataclass(frozen=True, slots=True)
class QuotaRow:
    entity: str  # kafka-configs.sh's form: user-principal 'alice', client-id '<default>'
    values: tuple[tuple[str, str], ...]  # (key, value) sorted by key


def _acl_row(binding: AclBinding) -> AclRow:
    return AclRow(
        binding.pattern.resource_type.name,
        binding.pattern.name,
        binding.pattern.pattern_type.name,
        binding.entry.principal,
        binding.entry.host,
        binding.entry.operation.name,
        binding.entry.permission.name,
    )


async def list_acls(
    admin: Admin, *, principal_filter: str = "", resource_filter: str = ""
) -> AclListing:
    """Every binding whose principal contains `principal_filter` and whose resource (TYPE:name)
    contains `resource_filter`, both case-insensitive, sorted."""
    try:
        bindings = await admin.describe_acls(AclBindingFilter())
    except KafkaError as exc:
        if exc.code != ErrorCode.security_disabled:
            raise
        return AclListing((), 0, False, principal_filter, resource_filter)
    principal = principal_filter.strip().lower()
    resource = resource_filter.strip().lower()
    rows = [
        row
        for row in map(_acl_row, sorted(bindings))
        if principal in row.principal.lower()
        and resource in f"{row.resource_type}:{row.resource_name}".lower()
    ]
    return AclListing(tuple(rows), len(bindings), True, principal_filter, resource_filter)


def parse_binding(
    resource_type: str,
    resource_name: str,
    pattern_type: str,
    principal: str,
    host: str,
    operation: str,
    permission: str,
) -> AclBinding:
    """One binding from the form's text fields (kafka-acls.sh's names, any case); AclError
    (a ValueError) with a message for the operator when one is unknown or missing."""
    if not resource_name.strip():
        raise ValueError("a binding needs a resource name (* for every one)")
    if ":" not in principal:
        raise ValueError(f"a principal is TYPE:NAME, e.g. User:alice, got {principal!r}")
    binding = AclBinding(
        ResourcePattern(
            parse_enum(ResourceType, resource_type),
            resource_name.strip(),
            parse_enum(PatternType, pattern_type or "literal"),
        ),
        AclEntry(
            principal.strip(),
            host.strip() or "*",
            parse_enum(Operation, operation),
            parse_enum(Permission, permission or "allow"),
        ),
    )
    return binding


async def create_acl(admin: Admin, binding: AclBinding) -> None:
    await admin.create_acls([binding])


async def delete_acl(admin: Admin, binding: AclBinding) -> int:
    """Deletes exactly this binding; returns how many bindings went (0 or 1)."""
    (deleted,) = await admin.delete_acls([AclBindingFilter.exact(binding)])
    return len(deleted)


async def list_scram_users(admin: Admin) -> tuple[ScramUser, ...]:
    """Every user with SCRAM credentials, sorted; only mechanisms and iteration counts."""
    found = await admin.describe_user_scram_credentials()
    return tuple(
        ScramUser(
            name,
            tuple(sorted((c.mechanism, c.iterations) for c in credentials)),
        )
        for name, credentials in sorted(found.items())
    )


async def list_quotas(admin: Admin) -> tuple[QuotaRow, ...]:
    """Every entity with a client quota, sorted by its name."""
    entries = await admin.describe_client_quotas()
    rows = [
        QuotaRow(
            entity_name(entry.entity),
            tuple((key, quota_number(value)) for key, value in sorted(entry.values.items())),
        )
        for entry in entries
    ]
    return tuple(sorted(rows, key=lambda row: row.entity))
