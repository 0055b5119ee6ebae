# The ACL authorizer: decides whether a session may perform an operation on a resource, as
# Kafka's StandardAuthorizer does. Order: a super user may do anything; else the ACLs that
# cover the resource (literal name, the literal wildcard "*", prefixes of the name) and apply
# to the principal (or User:*) and host decide, a DENY before any ALLOW; with no ALLOW the
# answer is no, unless no ACL covers the resource at all and allow.everyone.if.no.acl.found is
# set. With no authorizer configured the broker has `authorizer = None` and allows everything;
# handlers test that attribute first so that the hot paths pay one attribute read. The helpers
# for handlers see a request only as `Requester`: who asks, through which API, and the
# authorizer (if any) that decides.
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from lockgate.security.acl_store import AclStore, EtcdAclStore, LocalAclStore
from lockgate.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from lockgate.security.session import Session

if TYPE_CHECKING:
    from lockgate.config.properties import BrokerConfig
    from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

NO_AUTHORIZED_OPERATIONS = -(2**31)  # KIP-430: "not asked for"
DENIAL_LOG_INTERVAL_S = 10.0
_CACHE_LIMIT = 50_000

T = TypeVar("T")


def parse_super_users(text: str) -> frozenset[str]:
    """super.users: principals separated by ';' (as Kafka: a DN may contain commas)."""
    return frozenset(item.strip() for item in text.split(";") if item.strip())


class _DenialLog:
    """One line per (principal, operation, resource) denied, then at most one per interval
    with the count of denials in between: a client retrying a denied request must not fill
    the log."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, Operation, ResourceType, str], tuple[float, int]] = {}

    def report(
        self,
        session: Session,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
        api: str,
        client_id: str | None,
    ) -> None:
        key = (session.principal, operation, resource_type, name)
        now = time.monotonic()
        last, suppressed = self._last.get(key, (-DENIAL_LOG_INTERVAL_S, 0))
        if now - last < DENIAL_LOG_INTERVAL_S:
            self._last[key] = (last, suppressed + 1)
            return
        if len(self._last) > 10_000:
            self._last.clear()
        self._last[key] = (now, 0)
        log.info(
            "denied: %s from %s (client id %r, listener %s) may not %s %s %r (%s)%s",
            session.principal,
            session.host,
            client_id,
            session.listener,
            operation.name,
            resource_type.name,
            name,
            api,
            f"; {suppressed} more such denials since the last report" if suppressed else "",
        )


class Authorizer:
    def __init__(
        self, store: AclStore, super_users: Iterable[str] = (), allow_if_no_acl: bool = False
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        # decisions by (principal, host, operation, resource type, name), forgotten whenever
        # the ACLs change: a produce to one topic asks the same question again and again
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self._by_type: Mapping[ResourceType, tuple[AclBinding, ...]] = {}
        self.denials = _DenialLog()
        store.listeners.append(self._reindex)
        self._reindex()

    @classmethod
    def from_config(cls, config: BrokerConfig, storage: StorageEngine) -> Authorizer | None:
        """None when authorizer.class.name is empty (check_properties refused any class that
        is not Kafka's ACL authorizer)."""
        if not config.get("authorizer.class.name"):
            return None
        cluster_url = config.get("lockgate.cluster")
        store: AclStore = (
            EtcdAclStore.from_url(cluster_url) if cluster_url else LocalAclStore(storage)
        )
        return cls(
            store,
            parse_super_users(config.get("super.users")),
            config.flag("allow.everyone.if.no.acl.found"),
        )

    async def start(self) -> None:
        await self.store.start()

    async def close(self) -> None:
        await self.store.close()

    def _reindex(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in self.store.bindings:
            by_type.setdefault(binding.pattern.resource_type, []).append(binding)
        self._by_type = {kind: tuple(items) for kind, items in by_type.items()}
        self._cache = {}

    # -- decisions ------------------------------------------------------------------------

    def allowed(
        self, session: Session, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        key = (session.principal, session.host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(session.principal, session.host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache = {}
            self._cache[key] = decision
        return decision

    def _decide(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        covered = allow = False
        for binding in self._by_type.get(resource_type, ()):
            if not binding.pattern.matches(resource_type, name):
                continue
            covered = True
            verdict = binding.decides(principals, host, operation)
            if verdict == Permission.DENY:
                return False
            if verdict == Permission.ALLOW:
                allow = True
        if allow:
            return True
        return not covered and self.allow_if_no_acl

    def allowed_on_any(
        self, session: Session, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """KIP-679's authorizeByResourceType: may the session do `operation` on at least one
        resource of the type? An ALLOW counts unless a DENY covers everything it names."""
        if session.principal in self.super_users:
            return True
        principals = (session.principal, WILDCARD_PRINCIPAL)
        allows: list[AclBinding] = []
        denies: list[AclBinding] = []
        for binding in self._by_type.get(resource_type, ()):
            entry = binding.entry
            if entry.principal not in principals:
                continue
            if entry.host != WILDCARD and entry.host != session.host:
                continue
            if entry.operation not in (operation, Operation.ALL):
                continue
            (allows if entry.permission == Permission.ALLOW else denies).append(binding)
        for deny in denies:
            if deny.pattern.name == WILDCARD and deny.pattern.pattern_type == PatternType.LITERAL:
                return False
        for allow in allows:
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return not allows and not denies and self.allow_if_no_acl

    def authorized_operations(
        self, session: Session, resource_type: ResourceType, name: str
    ) -> int:
        """The KIP-430 bitfield: bit `code` set for each supported operation allowed."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.allowed(session, operation, resource_type, name):
                bits |= 1 << operation
        return bits


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether `deny` takes away every resource that `allow` grants."""
    denied, granted = deny.pattern, allow.pattern
    if denied.pattern_type == PatternType.PREFIXED:
        return granted.name.startswith(denied.name) and granted.name != WILDCARD
    return granted.pattern_type == PatternType.LITERAL and granted.name == denied.name


def every_operation_bits(resource_type: ResourceType) -> int:
    """The bitfield without an authorizer: every supported operation (as Kafka)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << operation
    return bits


# -- helpers for handlers -------------------------------------------------------------------


class Requester(Protocol):
    """A request as the helpers below see it (the handlers' RequestContext is one)."""

    @property
    def session(self) -> Session: ...

    @property
    def api_key(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def authorizer(self) -> Authorizer | None: ...


def authorize(
    ctx: Requester,
    operation: Operation,
    resource_type: ResourceType,
    name: str = CLUSTER_NAME,
    *,
    log_denied: bool = True,
) -> bool:
    """Whether the request's session may do this; a denial is logged (rate-limited)."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    if authorizer.allowed(ctx.session, operation, resource_type, name):
        return True
    if log_denied:
        authorizer.denials.report(
            ctx.session, operation, resource_type, name, _api_name(ctx), ctx.client_id
        )
    return False


def authorize_any(ctx: Requester, operation: Operation, resource_type: ResourceType) -> bool:
    authorizer = ctx.authorizer
    return authorizer is None or authorizer.allowed_on_any(ctx.session, operation, resource_type)


def filter_authorized(
    ctx: Requester,
    operation: Operation,
    resource_type: ResourceType,
    items: Iterable[T],
    name_of: Callable[[T], str],
    *,
    log_denied: bool = False,
) -> list[T]:
    """The items whose resource the session may act on (e.g. the topics a listing shows);
    leaving the rest out is the point, so by default no denial is logged."""
    if ctx.authorizer is None:
        return list(items)
    return [
        item
        for item in items
        if authorize(ctx, operation, resource_type, name_of(item), log_denied=log_denied)
    ]


def authorized_operations(ctx: Requester, resource_type: ResourceType, name: str) -> int:
    """KIP-430's bitfield for the session on this resource."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return every_operation_bits(resource_type)
    return authorizer.authorized_operations(ctx.session, resource_type, name)


def _api_name(ctx: Requester) -> str:
    from lockgate.protocol.api import ApiKey

    try:
        return ApiKey(ctx.api_key).name
    except ValueError:
        return str(ctx.api_key)
