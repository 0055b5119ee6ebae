# The ACL model, pure: Kafka's resource types, pattern types, operations and permission types
# with their wire codes, an ACL binding (resource pattern + entry), the filters that describe
# and delete them, and the rule that says what one ACL decides for one action. Invariants: a
# stored binding never holds ANY, MATCH or UNKNOWN (validate() refuses them); only ALLOW ACLs
# imply other operations; a DENY decides before any ALLOW (the authorizer applies that).
from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

WILDCARD = "*"  # a literal resource name or host that matches every one
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource, as Kafka names it


E = TypeVar("E", bound=enum.IntEnum)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939: needed, besides WRITE, to take part in two-phase commit


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of one of these operations also allows DESCRIBE (resp. DESCRIBE_CONFIGS); a DENY
# implies nothing, so denying READ does not deny DESCRIBE.
IMPLIES_DESCRIBE = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})

# The operations that mean something on each resource type: what a KIP-430 bitfield lists.
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (
        Operation.DESCRIBE,
        Operation.WRITE,
        Operation.TWO_PHASE_COMMIT,
    ),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


class AclError(ValueError):
    """A binding or filter that cannot be stored or applied (INVALID_REQUEST on the wire)."""


def parse_enum(kind: type[E], text: str) -> E:
    """An enum member by name as kafka-acls.sh spells it (any case, '-' or '_')."""
    key = text.strip().upper().replace("-", "_")
    try:
        return kind[key]
    except KeyError:
        names = ", ".join(m.name for m in kind if m.name not in ("UNKNOWN", "ANY", "MATCH"))
        raise AclError(f"unknown {kind.__name__} {text!r} (use one of {names})") from None


def code_of(kind: type[E], code: int) -> E:
    """The member for a wire code; an unknown code is UNKNOWN, as Kafka's fromCode."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this stored pattern covers the resource (type, name)."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    principal: str  # "User:NAME" or "User:*"
    host: str  # an address or "*"
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry

    @classmethod
    def from_codes(
        cls,
        resource_type: int,
        name: str,
        pattern_type: int,
        principal: str,
        host: str,
        operation: int,
        permission: int,
    ) -> AclBinding:
        """A binding from the wire's fields (unknown codes become UNKNOWN, refused by
        validate())."""
        return cls(
            ResourcePattern(
                code_of(ResourceType, resource_type), name, code_of(PatternType, pattern_type)
            ),
            AclEntry(
                principal, host, code_of(Operation, operation), code_of(Permission, permission)
            ),
        )

    def validate(self) -> None:
        """Raises AclError for what Kafka refuses to store (INVALID_REQUEST)."""
        pattern, entry = self.pattern, self.entry
        if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"invalid resource type {pattern.resource_type.name}")
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"invalid pattern type {pattern.pattern_type.name}")
        if entry.operation in (Operation.UNKNOWN, Operation.ANY):
            raise AclError(f"invalid operation {entry.operation.name}")
        if entry.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError(f"invalid permission type {entry.permission.name}")
        if not pattern.name:
            raise AclError("the resource name must not be empty")
        if ":" not in entry.principal or not entry.principal.split(":", 1)[1]:
            raise AclError(f"principal {entry.principal!r} is not TYPE:NAME")
        if not entry.host:
            raise AclError("the host must not be empty (use * for any host)")

    def decides(self, principals: Iterable[str], host: str, operation: Operation) -> Permission:
        """What this ACL says about `operation` by one of `principals` from `host`, the resource
        already matched: ALLOW, DENY, or UNKNOWN when it does not apply."""
        entry = self.entry
        if entry.principal not in principals:
            return Permission.UNKNOWN
        if entry.host != WILDCARD and entry.host != host:
            return Permission.UNKNOWN
        if entry.operation != Operation.ALL and entry.operation != operation:
            if entry.permission != Permission.ALLOW:
                return Permission.UNKNOWN
            if operation == Operation.DESCRIBE and entry.operation in IMPLIES_DESCRIBE:
                return Permission.ALLOW
            if (
                operation == Operation.DESCRIBE_CONFIGS
                and entry.operation in IMPLIES_DESCRIBE_CONFIGS
            ):
                return Permission.ALLOW
            return Permission.UNKNOWN
        return entry.permission

    def to_json(self) -> dict[str, str]:
        """Names, not codes, so that the stored file reads like kafka-acls.sh's output."""
        return {
            "resource_type": self.pattern.resource_type.name,
            "name": self.pattern.name,
            "pattern_type": self.pattern.pattern_type.name,
            "principal": self.entry.principal,
            "host": self.entry.host,
            "operation": self.entry.operation.name,
            "permission": self.entry.permission.name,
        }

    @classmethod
    def from_json(cls, item: Mapping[str, str]) -> AclBinding:
        return cls(
            ResourcePattern(
                ResourceType[item["resource_type"]],
                item["name"],
                PatternType[item["pattern_type"]],
            ),
            AclEntry(
                item["principal"],
                item["host"],
                Operation[item["operation"]],
                Permission[item["permission"]],
            ),
        )

    def __str__(self) -> str:
        pattern, entry = self.pattern, self.entry
        return (
            f"{entry.permission.name} {entry.principal} {entry.operation.name} from {entry.host} "
            f"on {pattern.resource_type.name}:{pattern.pattern_type.name}:{pattern.name}"
        )


def encode_bindings(bindings: Iterable[AclBinding]) -> bytes:
    return json.dumps([b.to_json() for b in sorted(bindings)], indent=1).encode()


def decode_bindings(data: bytes) -> list[AclBinding]:
    return [AclBinding.from_json(item) for item in json.loads(data)]


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter: None matches any name, principal or host."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        """Raises AclError for a filter with an unknown element (INVALID_REQUEST)."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:  # every enum's UNKNOWN
                raise AclError(f"the filter has an unknown {type(value).__name__}")

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is not None:
            if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
                if self.name != pattern.name:
                    return False
            elif pattern.pattern_type == PatternType.PREFIXED:  # MATCH: what would apply
                if not self.name.startswith(pattern.name):
                    return False
            elif pattern.name not in (self.name, WILDCARD):
                return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation not in (Operation.ANY, entry.operation):
            return False
        return self.permission in (Permission.ANY, entry.permission)

    @classmethod
    def exact(cls, binding: AclBinding) -> AclBindingFilter:
        """The filter that matches this one binding only."""
        return cls(
            binding.pattern.resource_type,
            binding.pattern.name,
            binding.pattern.pattern_type,
            binding.entry.principal,
            binding.entry.host,
            binding.entry.operation,
            binding.entry.permission,
        )
