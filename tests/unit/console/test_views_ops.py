"""The group, transaction, producer and security pages through requests into the app (no
server) against an in-process broker: every page renders its data; a reset's dry run changes
nothing and the confirmed POST applies exactly the plan shown; a group with members is refused
with Kafka's message; delete, force-terminate and ACL create/delete go through the guard's
confirmation and are checked through the Kafka API; read-only and a missing CSRF token are
refused; bad input gets a 400 page."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator

import pytest

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.console.app import create_app
from lockgate.console.settings import ConsoleSettings
from lockgate.server.broker import Broker
from tests.support.console import AsgiClient
from tests.unit.console.in_process_broker import bootstrap, consume_all, produce, running_broker

PASSWORD = "correct horse"
TOPIC = "views-ops"
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with running_broker(AUTHORIZER) as started:
        async with Admin(bootstrap(started)) as admin:
            await admin.create_topic(TOPIC, 2)
        await produce(started, TOPIC, 10, 2)
        yield started


async def console(broker: Broker, **settings: object) -> AsyncIterator[AsgiClient]:
    app = create_app(ConsoleSettings(bootstrap(broker), **settings))  # type: ignore[arg-type]
    yield AsgiClient(app)
    await app.state.clients.close()


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[AsgiClient]:
    async for made in console(broker, password=PASSWORD):
        yield made


async def sign_in(client: AsgiClient) -> str:
    token = (await client.get("/login")).csrf_token()
    answer = await client.post(
        "/login", {"csrf_token": token, "user": "ann", "password": PASSWORD, "next": "/groups"}
    )
    assert answer.status == 303
    return (await client.get("/login")).csrf_token()


async def confirmed(client: AsgiClient, path: str, form: dict[str, str]) -> str:
    """Posts the form, checks the confirmation page, confirms; returns the redirect target."""
    first = await client.post(path, form)
    assert first.status == 200 and "Confirm:" in first.text, first.text
    second = await client.post(path, {**form, "confirmed": "yes"})
    assert second.status == 303, second.text
    return second.headers["location"]


async def test_groups_pages_reset_and_delete(broker: Broker, client: AsgiClient) -> None:
    member = Consumer(
        bootstrap(broker),
        group_id="views-group",
        client_id="views-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
    )
    member.subscribe([TOPIC])
    try:
        await consume_all(member, 10)
        await produce(broker, TOPIC, 4, 2)
        listing = await client.get("/groups")
        assert listing.status == 200 and "views-group" in listing.text
        detail = await client.get("/groups/views-group")
        assert detail.status == 200
        assert "views-client" in detail.text and 'id="total-lag">4<' in detail.text
        fragment = await client.get("/groups/views-group?fragment=lag")
        assert fragment.status == 200 and "<svg" in fragment.text and "<html" not in fragment.text
        busy = await client.get("/groups/views-group?reset=earliest")
        assert busy.status == 409
        refusal = "Assignments can only be reset if the group 'views-group' is inactive"
        assert refusal in html.unescape(busy.text)
    finally:
        await member.close()

    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    dry = await client.get(f"/groups/views-group?reset=offset&value=2&topic={TOPIC}:1")
    assert dry.status == 200 and 'id="plan"' in dry.text
    async with Admin(bootstrap(broker)) as admin:
        assert await admin.list_group_offsets("views-group") == {tp0: 5, tp1: 5}  # a dry run
        token = await sign_in(client)
        plan = f"{TOPIC}:1=2"
        assert f'value="{plan}"' in (await client.get(dry_path(TOPIC))).text
        refused = await client.post("/groups/reset", {"group": "views-group", "plan": plan})
        assert refused.status == 403 and "CSRF" in refused.text  # no token
        preview = await client.post(
            "/groups/reset", {"csrf_token": token, "group": "views-group", "plan": plan}
        )
        assert f"{TOPIC}-1" in preview.text and "5 → 2" in preview.text
        target = await confirmed(
            client, "/groups/reset", {"csrf_token": token, "group": "views-group", "plan": plan}
        )
        assert target == "/groups/views-group?done=reset"
        assert await admin.list_group_offsets("views-group") == {tp0: 5, tp1: 2}

        bad = await client.get("/groups/views-group?reset=offset&value=minus")
        assert bad.status == 400 and "needs an integer" in bad.text
        assert "Traceback" not in bad.text

        target = await confirmed(
            client, "/groups/delete", {"csrf_token": token, "group": "views-group"}
        )
        assert target == "/groups?deleted=views-group"
        assert "views-group" not in {g.group_id for g in await admin.list_groups()}
    missing = await client.get("/groups/views-group")
    assert missing.status == 502 and "GROUP_ID_NOT_FOUND" in missing.text.upper()


def dry_path(topic: str) -> str:
    return f"/groups/views-group?reset=offset&value=2&topic={topic}:1"


async def test_transactions_producers_and_force_terminate(
    broker: Broker, client: AsgiClient
) -> None:
    held = Producer(bootstrap(broker), transactional_id="views-2pc", transaction_timeout_ms=1_000)
    await held.start()
    await held.init_transactions(enable_2pc=True)
    held.begin_transaction()
    await held.send(TOPIC, b"prepared", partition=0)
    await held.prepare_transaction()
    await held.close()

    page = await client.get("/transactions")
    assert page.status == 200 and "views-2pc" in page.text and "Ongoing" in page.text
    assert 'id="two-phase-note"' in page.text
    assert (await client.get("/transactions?state=Sideways")).status == 400
    hanging = await client.get("/transactions/hanging?max_timeout_minutes=0")
    assert hanging.status == 200 and "Scanned 2 partitions" in hanging.text
    producers = await client.get(f"/producers?topic={TOPIC}")
    assert producers.status == 200 and 'id="producers"' in producers.text
    assert "1 open transactions" in producers.text
    assert (await client.get("/producers?topic=nope")).status == 404
    assert (await client.get(f"/producers?topic={TOPIC}&partition=x")).status == 400

    token = await sign_in(client)
    form = {"csrf_token": token, "transactional_id": "views-2pc"}
    preview = await client.post("/transactions/force-terminate", form)
    assert "views-2pc" in preview.text and "Ongoing" in preview.text
    target = await confirmed(client, "/transactions/force-terminate", form)
    assert target == "/transactions?terminated=views-2pc"
    async with Admin(bootstrap(broker)) as admin:
        state = (await admin.describe_transactions(["views-2pc"]))["views-2pc"].state
    assert state in ("PrepareAbort", "CompleteAbort", "Empty")


async def test_security_page_and_acls(broker: Broker, client: AsgiClient) -> None:
    page = await client.get("/security")
    assert page.status == 200 and 'id="acls"' in page.text and "No SCRAM user" in page.text
    token = await sign_in(client)
    binding = {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    assert await confirmed(client, "/security/acls/create", {"csrf_token": token, **binding})
    async with Admin(bootstrap(broker)) as admin:
        (created,) = await admin.describe_acls()
        assert (created.pattern.name, created.entry.principal) == ("orders", "User:alice")
        listed = await client.get("/security?principal=alice")
        assert "TOPIC:orders" in listed.text
        assert await confirmed(client, "/security/acls/delete", {"csrf_token": token, **binding})
        assert await admin.describe_acls() == []
    bad = await client.post(
        "/security/acls/create", {"csrf_token": token, **binding, "operation": "juggle"}
    )
    assert bad.status == 400 and "unknown Operation" in bad.text


async def test_read_only_refuses_every_mutation(broker: Broker) -> None:
    async for client in console(broker, read_only=True, password=PASSWORD):
        assert (await client.get("/groups")).status == 200
        for path in (
            "/groups/reset",
            "/groups/delete",
            "/transactions/abort",
            "/transactions/force-terminate",
            "/security/acls/create",
        ):
            answer = await client.post(path, {"group": "g", "confirmed": "yes"})
            assert answer.status == 403 and "read-only" in answer.text, path
