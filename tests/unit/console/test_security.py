"""console/security.py: ACL bindings filtered by principal and resource, creating and deleting
one binding, SCRAM users without their secrets, client quotas, and a cluster without an
authorizer."""

from __future__ import annotations

import pytest

from lockgate.client.admin import Admin
from lockgate.client.admin_quotas import ClientQuotaAlteration
from lockgate.client.admin_scram import ScramUpsertion
from lockgate.console import security
from tests.unit.console.in_process_broker import bootstrap, running_broker

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


async def test_acls_users_and_quotas() -> None:
    async with running_broker(AUTHORIZER) as broker, Admin(bootstrap(broker)) as admin:
        for principal, resource_type, name in (
            ("User:alice", "topic", "orders"),
            ("User:alice", "group", "billing"),
            ("User:bob", "topic", "payments"),
        ):
            await security.create_acl(
                admin,
                security.parse_binding(resource_type, name, "literal", principal, "", "read", ""),
            )
        everything = await security.list_acls(admin)
        assert everything.authorizer and everything.total == 3
        assert [(r.principal, r.resource_type, r.resource_name) for r in everything.rows] == [
            ("User:alice", "TOPIC", "orders"),
            ("User:bob", "TOPIC", "payments"),
            ("User:alice", "GROUP", "billing"),
        ]
        row = next(r for r in everything.rows if r.resource_name == "orders")
        assert (row.host, row.operation, row.permission, row.pattern_type) == (
            "*",
            "READ",
            "ALLOW",
            "LITERAL",
        )
        alice = await security.list_acls(admin, principal_filter="ALICE")
        assert {r.resource_name for r in alice.rows} == {"orders", "billing"}
        topics = await security.list_acls(admin, resource_filter="topic:")
        assert {r.resource_name for r in topics.rows} == {"orders", "payments"}

        gone = await security.delete_acl(
            admin,
            security.parse_binding(
                "topic", "orders", "literal", "User:alice", "*", "read", "allow"
            ),
        )
        assert gone == 1
        assert {r.resource_name for r in (await security.list_acls(admin)).rows} == {
            "billing",
            "payments",
        }
        with pytest.raises(ValueError, match="TYPE:NAME"):
            security.parse_binding("topic", "t", "literal", "alice", "", "read", "allow")
        with pytest.raises(ValueError, match="unknown Operation"):
            security.parse_binding("topic", "t", "literal", "User:a", "", "juggle", "allow")

        for upsertion in (  # one alteration per user and request
            ScramUpsertion("carol", "secret-password", "SCRAM-SHA-256", 8192),
            ScramUpsertion("carol", "secret-password", "SCRAM-SHA-512", 4096),
            ScramUpsertion("dave", "another-secret"),
        ):
            await admin.alter_user_scram_credentials([upsertion])
        users = await security.list_scram_users(admin)
        assert [(u.name, u.credentials) for u in users] == [
            ("carol", (("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096))),
            ("dave", (("SCRAM-SHA-256", 4096),)),
        ]
        assert "secret" not in repr(users)

        await admin.alter_client_quotas(
            [
                ClientQuotaAlteration({"user": "carol"}, {"producer_byte_rate": 1024.0}),
                ClientQuotaAlteration(
                    {"client-id": None}, {"consumer_byte_rate": 2048.0, "request_percentage": 12.5}
                ),
            ]
        )
        quotas = await security.list_quotas(admin)
        assert [(q.entity, q.values) for q in quotas] == [
            (
                "client-id '<default>'",
                (("consumer_byte_rate", "2048"), ("request_percentage", "12.5")),
            ),
            ("user-principal 'carol'", (("producer_byte_rate", "1024"),)),
        ]


async def test_no_authorizer() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        listing = await security.list_acls(admin)
        assert not listing.authorizer and listing.rows == ()
