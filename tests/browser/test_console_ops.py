"""The console's group, transaction, producer and security pages in Debian's chromium (headless,
driven by Playwright), against a lockgate broker holding real data: records and a committed and
an aborted transaction from confluent-kafka; a lagging classic group (confluent-kafka, now
without members) and a consumer-protocol group with a live confluent-kafka member; a two-phase
(KIP-939) transaction prepared by lockgate's producer and held past its timeout; a hanging
transaction (its coordinator's log lost in a restart); ACLs, a SCRAM user and quotas.

Every mutating action is clicked through its confirmation page and checked through the Kafka
API afterwards (lockgate's Admin): reset offsets, delete a group, force-terminate, abort, create
and delete an ACL. A read-only console refuses them (403), and so does a POST without the CSRF
token. The browser, pages and screenshot directory are tests/browser/conftest.py's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from playwright.sync_api import Browser, Page

from lockgate.client.admin import Admin
from lockgate.client.admin_quotas import ClientQuotaAlteration
from lockgate.client.admin_scram import ScramUpsertion
from lockgate.client.cluster import TopicPartition
from lockgate.client.producer import Producer
from lockgate.console import transactions
from lockgate.security.acls import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.console import ConsoleProcess, running_console

PASSWORD = "a console password"
TOPIC = "orders"  # records and transactions
EVENTS = "events"  # what the groups read: plain records only, so that lag is simple to count
STUCK = "stuck"
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.two.phase.commit.enable": "true",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}
T = TypeVar("T")
TIMEOUT_MS = 15_000  # for the lag chart's second sample (the page refreshes it every 3 s)


@dataclass
class Scene:
    broker: BrokerProcess
    console: ConsoleProcess
    read_only: ConsoleProcess
    shots: Path
    live_member: ConfluentConsumer


def in_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine on a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where asyncio.run cannot start another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result(timeout=60)


def admin_call(bootstrap: str, call: Any) -> Any:
    async def run() -> Any:
        async with Admin(bootstrap) as admin:
            return await call(admin)

    return in_thread(run())


def confluent_data(bootstrap: str) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(TOPIC, key=f"k{i}", value=f'{{"n": {i}}}', partition=i % 2)
    assert producer.flush(30) == 0
    for name, commit in (("web-committed", True), ("web-aborted", False)):
        txn = ConfluentProducer({"bootstrap.servers": bootstrap, "transactional.id": name})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(TOPIC, value=name.encode(), partition=0)
        txn.flush(30)
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)


def consume(bootstrap: str, group: str, count: int, **extra: Any) -> ConfluentConsumer:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": f"{group}-client",
            **extra,
        }
    )
    consumer.subscribe([EVENTS])
    seen, deadline = 0, time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen += 1
    assert seen >= count, f"{group} read {seen} of {count}"
    consumer.commit(asynchronous=False)
    return consumer


async def hanging_transaction(broker: BrokerProcess, data: Path) -> None:
    """An open transaction on stuck-0 whose coordinator forgets it (its log deleted while the
    broker is down): a hanging transaction."""
    async with Producer(broker.bootstrap, transactional_id="web-lost") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(STUCK, b"lost", partition=0)
        await producer.flush()
        broker.kill()
    for lost in data.glob("__transaction_state-*"):
        shutil.rmtree(lost)
    broker.start()


async def held_two_phase(bootstrap: str) -> None:
    """A KIP-939 transaction prepared by lockgate's producer, whose manager never decides;
    returns once it has outlived its 1 s timeout (bounded wait)."""
    held = Producer(bootstrap, transactional_id="web-2pc", transaction_timeout_ms=1_000)
    await held.start()
    await held.init_transactions(enable_2pc=True)
    held.begin_transaction()
    await held.send(TOPIC, b"prepared", partition=1)
    await held.prepare_transaction()
    await held.close()
    async with Admin(bootstrap) as admin:
        deadline = time.monotonic() + 20
        while not any(
            row.transactional_id == "web-2pc" for row in await transactions.held_past_timeout(admin)
        ):
            assert time.monotonic() < deadline, "the prepared transaction never outlived 1 s"
            await asyncio.sleep(0.1)


async def security_data(admin: Admin) -> None:
    await admin.create_acls(
        [
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, TOPIC, PatternType.LITERAL),
                AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW),
            ),
            AclBinding(
                ResourcePattern(ResourceType.GROUP, "billing", PatternType.PREFIXED),
                AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW),
            ),
        ]
    )
    await admin.alter_user_scram_credentials(
        [ScramUpsertion("alice", "alice-secret", "SCRAM-SHA-512", 8192)]
    )
    await admin.alter_client_quotas(
        [ClientQuotaAlteration({"user": "alice"}, {"producer_byte_rate": 1048576.0})]
    )


@pytest.fixture(scope="module")
def scene(
    browser: Browser, screenshots: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    """The broker with its data and two consoles (one read-only); asks for the browser first
    so that a machine without chromium skips before any of it starts."""
    root = tmp_path_factory.mktemp("console-ops")
    data = root / "data"
    broker = BrokerProcess(data, SETTINGS).start()
    live: ConfluentConsumer | None = None
    try:
        create_topic(broker.bootstrap, TOPIC, 2)
        create_topic(broker.bootstrap, EVENTS, 2)
        create_topic(broker.bootstrap, STUCK, 1)
        in_thread(hanging_transaction(broker, data))
        confluent_data(broker.bootstrap)
        producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            producer.produce(EVENTS, value=f"early-{i}", partition=i % 2)
        assert producer.flush(30) == 0
        consume(broker.bootstrap, "billing", 20).close()  # committed: 10 and 10
        live = consume(broker.bootstrap, "audit", 20, **{"group.protocol": "consumer"})
        for i in range(10):
            producer.produce(EVENTS, value=f"late-{i}", partition=i % 2)
        assert producer.flush(30) == 0  # both groups now lag by 5 + 5
        admin_call(broker.bootstrap, security_data)
        in_thread(held_two_phase(broker.bootstrap))
        with (
            running_console(broker.bootstrap, root / "console.log", password=PASSWORD) as console,
            running_console(
                broker.bootstrap, root / "read-only.log", extra_args=("--read-only",)
            ) as read_only,
        ):
            yield Scene(broker, console, read_only, screenshots, live)
    finally:
        if live is not None:
            live.close()
        broker.kill()


def sign_in(page: Page, scene: Scene) -> None:
    page.goto(f"{scene.console.url}/login")
    page.fill("input[name=user]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.login button")
    page.wait_for_selector("header .user")


def confirm(page: Page) -> None:
    """On the guard's confirmation page: click the "Yes, ..." button and wait for the result."""
    page.wait_for_selector("h1:has-text('Confirm:')")
    page.click("form.mutation button.danger")
    page.wait_for_load_state()


def shot(page: Page, scene: Scene, name: str) -> None:
    page.screenshot(path=str(scene.shots / f"{name}.png"), full_page=True)


def test_groups_list_detail_reset_and_delete(page: Page, scene: Scene) -> None:
    bootstrap = scene.broker.bootstrap
    sign_in(page, scene)
    page.goto(f"{scene.console.url}/groups")
    rows = page.locator("#groups tbody tr")
    assert rows.count() == 2
    billing = page.locator("#groups tr:has-text('billing')")
    assert "classic" in billing.inner_text() and "Empty" in billing.inner_text()
    audit = page.locator("#groups tr:has-text('audit')")
    assert "consumer" in audit.inner_text() and "Stable" in audit.inner_text()
    shot(page, scene, "groups")

    page.click("#groups a:text-is('audit')")
    assert page.inner_text("#total-lag") == "10"
    assert "audit-client" in page.inner_text("#members")
    # the page's script refreshes the lag fragment; from the second sample on the chart draws
    page.locator("#lag svg.chart polyline[points*=' ']").wait_for(
        state="attached", timeout=TIMEOUT_MS
    )
    assert page.inner_text("#total-lag") == "10"
    shot(page, scene, "group-detail")
    page.goto(f"{scene.console.url}/groups/audit?reset=earliest")
    assert "inactive, but the current state is Stable" in page.inner_text("main")

    page.goto(f"{scene.console.url}/groups/billing")
    assert page.inner_text("#total-lag") == "10"
    page.select_option("select[name=reset]", "shift")
    page.fill("input[name=value]", "-3")
    page.click("#reset-form button")
    plan = page.locator("#plan tbody tr")
    assert plan.count() == 2
    assert [plan.nth(i).locator("td").nth(3).inner_text() for i in range(2)] == ["7", "7"]
    offsets = admin_call(bootstrap, lambda admin: admin.list_group_offsets("billing"))
    assert offsets == {TopicPartition(EVENTS, 0): 10, TopicPartition(EVENTS, 1): 10}  # dry run
    shot(page, scene, "group-reset-plan")
    page.click("form.mutation button:has-text('Apply this reset')")
    assert "10 → 7" in page.inner_text("table.preview")
    shot(page, scene, "group-reset-confirm")
    confirm(page)
    assert page.inner_text("#done") == "Offsets reset."
    offsets = admin_call(bootstrap, lambda admin: admin.list_group_offsets("billing"))
    assert offsets == {TopicPartition(EVENTS, 0): 7, TopicPartition(EVENTS, 1): 7}
    assert page.inner_text("#total-lag") == "16"

    page.click("form.mutation button:has-text('Delete this group')")
    confirm(page)
    assert "Deleted group billing" in page.inner_text("#deleted")
    listed = admin_call(bootstrap, lambda admin: admin.list_groups())
    assert [g.group_id for g in listed] == ["audit"]


def test_transactions_held_two_phase_and_hanging(page: Page, scene: Scene) -> None:
    bootstrap = scene.broker.bootstrap
    sign_in(page, scene)
    page.goto(f"{scene.console.url}/transactions")
    held = page.locator("#held tbody tr:has-text('web-2pc')")
    assert "Ongoing" in held.inner_text()
    listed = page.inner_text("#transactions")
    assert "CompleteCommit" in listed and "CompleteAbort" in listed
    shot(page, scene, "transactions")
    held.locator("button").click()
    assert "web-2pc" in page.inner_text("table.preview")
    confirm(page)
    assert "web-2pc" in page.inner_text("#terminated")
    state = admin_call(bootstrap, lambda admin: admin.describe_transactions(["web-2pc"]))
    assert state["web-2pc"].state in ("PrepareAbort", "CompleteAbort", "Empty")

    page.goto(f"{scene.console.url}/transactions/hanging?max_timeout_minutes=0")
    row = page.locator("#hanging tbody tr:has-text('stuck-0')")
    assert "no coordinator knows" in row.inner_text()
    assert "every topic" in page.inner_text("#scope")
    shot(page, scene, "transactions-hanging")
    row.locator("button").click()
    confirm(page)
    assert page.locator("#aborted").count() == 1
    assert page.locator("#hanging tbody tr:has-text('stuck-0')").count() == 0

    async def after_abort(admin: Admin) -> tuple[int, int, int]:
        scan = await transactions.find_hanging(admin, max_transaction_timeout_ms=0)
        stuck = TopicPartition(STUCK, 0)
        end = await admin.list_offsets({stuck: -1})
        stable = await admin.list_offsets({stuck: -1}, isolation_level=1)
        return len(scan.hanging), end[stuck].offset, stable[stuck].offset  # type: ignore[union-attr]

    hanging_left, end_offset, last_stable = admin_call(bootstrap, after_abort)
    assert hanging_left == 0 and last_stable == end_offset == 2  # the record and its marker


def test_producers_and_security(page: Page, scene: Scene) -> None:
    page.goto(f"{scene.console.url}/producers")
    page.click(f"#topic-list a:text-is('{TOPIC}')")
    table = page.inner_text("#producers")
    assert table.count("\n") >= 2  # a header and at least one producer per partition
    shot(page, scene, "producers")
    page.goto(f"{scene.console.url}/producers?topic=no-such-topic")
    assert "No such topic" in page.inner_text("main")

    sign_in(page, scene)
    page.goto(f"{scene.console.url}/security")
    assert "TOPIC:orders" in page.inner_text("#acls")
    assert "SCRAM-SHA-512" in page.inner_text("#scram-users")
    assert "alice-secret" not in page.content()
    assert "producer_byte_rate=1048576" in page.inner_text("#quotas")
    page.fill("#acl-add input[name=resource_name]", "payments")
    page.fill("#acl-add input[name=principal]", "User:bob")
    page.select_option("#acl-add select[name=operation]", "WRITE")
    page.click("#acl-add button")
    confirm(page)
    assert page.locator("#acl-created").count() == 1
    shot(page, scene, "security")
    bindings = admin_call(scene.broker.bootstrap, lambda admin: admin.describe_acls())
    assert ("payments", "User:bob") in {(b.pattern.name, b.entry.principal) for b in bindings}
    page.locator("#acls tr:has-text('User:bob') button").click()
    confirm(page)
    bindings = admin_call(scene.broker.bootstrap, lambda admin: admin.describe_acls())
    assert "User:bob" not in {b.entry.principal for b in bindings}


def test_read_only_and_csrf_refusals(page: Page, scene: Scene) -> None:
    page.goto(f"{scene.read_only.url}/groups/audit")
    assert page.locator("form.mutation").count() == 0  # no buttons to press
    for path in (
        "/groups/reset",
        "/groups/delete",
        "/transactions/abort",
        "/transactions/force-terminate",
        "/security/acls/delete",
    ):
        answer = page.request.post(
            f"{scene.read_only.url}{path}", form={"group": "audit", "confirmed": "yes"}
        )
        assert answer.status == 403, path
    sign_in(page, scene)
    forged = page.request.post(
        f"{scene.console.url}/groups/delete", form={"group": "audit", "confirmed": "yes"}
    )
    assert forged.status == 403 and "CSRF" in forged.text()
    assert [g.group_id for g in admin_call(scene.broker.bootstrap, lambda a: a.list_groups())] == [
        "audit"
    ]
