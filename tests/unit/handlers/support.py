# A broker in this process (memory storage, the ACL authorizer on) for handler tests: its
# start, the sessions that call it, ACL grants, and one handler call built and answered with kio
# at the version under test.
from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from lockgate.config.properties import BrokerConfig
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.security.acl_store import LocalAclStore
from lockgate.security.acls import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

ADMIN = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
ALICE = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:alice")
# the settings every share-group handler test starts from (User:admin may do anything)
SHARE_SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "authorizer.class.name": "lockgate",
    "super.users": "User:admin",
    "share.coordinator.state.topic.num.partitions": "3",
}


async def started(
    engine: MemoryEngine, settings: Mapping[str, str], *, groups: bool = False
) -> Broker:
    """A started broker whose share coordinator (and, with `groups`, group coordinator) has
    loaded: the start loads them in the background."""
    broker = Broker(BrokerConfig(dict(settings)), engine)
    await broker.start()
    if groups:
        await broker.groups.runtime.load()
    await broker.shares.runtime.load()
    return broker


@contextlib.asynccontextmanager
async def running(
    engine: MemoryEngine, settings: Mapping[str, str], *, groups: bool = False
) -> AsyncIterator[Broker]:
    """`started`, then stopped on the way out."""
    broker = await started(engine, settings, groups=groups)
    try:
        yield broker
    finally:
        await broker.stop()


def grant(broker: Broker, grants: Iterable[tuple[ResourceType, str, Operation]]) -> None:
    """Allows User:alice each (resource type, literal name, operation)."""
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        [
            AclBinding(
                ResourcePattern(kind, name, PatternType.LITERAL),
                AclEntry("User:alice", "*", operation, Permission.ALLOW),
            )
            for kind, name, operation in grants
        ]
    )


def topic_id(broker: Broker, name: str = "t") -> uuid.UUID:
    return broker.topics.topics[name].topic_id


async def call(
    broker: Broker,
    api: ApiKey,
    version: int,
    body: Any,
    session: Session = ADMIN,
    connection: int = 1,
) -> Any:
    """The handler's answer to `body` at `version`, checked to encode at that version."""
    request = build(request_class(api, version), body)  # type: ignore[arg-type]
    ctx = RequestContext(
        broker.services, api, version, 1, "test", "127.0.0.1:1", connection, session
    )
    result = await HANDLERS[api].handler(ctx, request)
    assert not isinstance(result, RawBody) and result is not None
    encode(build(response_class(api, version), result))  # the answer encodes at this version
    return result
