"""The console against Apache Kafka 4.4 (issue 37: "and Apache Kafka where the APIs exist"):
every page renders from Kafka's own answers, the record browser marks Kafka's transaction
markers, a group's lag shows, and a reset (dry run, then confirmed) lands in Kafka. The data
is written by confluent-kafka; the pages are requested in-process (no browser: that walk runs
on lockgate in tests/browser)."""

from __future__ import annotations

import html
import re

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.console.app import create_app
from lockgate.console.settings import ConsoleSettings
from tests.support.console import AsgiClient
from tests.support.reference_kafka import ReferenceKafka

TOPIC = "console-ref-txn"
GROUP = "console-ref-group"
TXN_ID = "console-ref-txn-id"
PASSWORD = "console-ref-pw"


def write_data(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=30).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in (b"kept-0", b"kept-1"):
        producer.produce(TOPIC, value, b"k", 0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"dropped-0", b"k", 0)
    producer.flush(30)
    producer.abort_transaction(30)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:  # the group commits offset 1 of 5 (2 records, a marker, 1 aborted, a marker): lag 4
        consumer.commit(offsets=[ConfluentPartition(TOPIC, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def committed_offset(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        [found] = consumer.committed([ConfluentPartition(TOPIC, 0)], timeout=30)
    finally:
        consumer.close()
    return int(found.offset)


def text_of(page: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


async def test_every_page_renders_from_kafka(reference_kafka: ReferenceKafka) -> None:
    bootstrap = reference_kafka.bootstrap
    write_data(bootstrap)
    app = create_app(ConsoleSettings(bootstrap, password=PASSWORD))
    client = AsgiClient(app)
    try:
        cluster = await client.get("/cluster")
        assert cluster.status == 200, cluster.text
        assert bootstrap.rsplit(":", 1)[1] in cluster.text
        topics = await client.get("/topics?q=console-ref")
        assert topics.status == 200 and TOPIC in topics.text
        topic = await client.get(f"/topics/{TOPIC}")
        assert topic.status == 200, topic.text
        browsed = await client.get(
            f"/topics/{TOPIC}/records?offset=0&isolation=uncommitted&count=20"
        )
        assert browsed.status == 200, browsed.text
        shown = text_of(browsed.text)
        assert "COMMIT marker" in shown and "ABORT marker" in shown
        assert "kept-0" in shown and "dropped-0" in shown and "aborted" in shown
        committed = text_of(
            (await client.get(f"/topics/{TOPIC}/records?offset=0&isolation=committed")).text
        )
        assert "kept-1" in committed and "dropped-0" not in committed
        group = await client.get(f"/groups/{GROUP}")
        assert group.status == 200, group.text
        assert re.search(r"total lag\D*4\b", text_of(group.text), re.IGNORECASE), text_of(
            group.text
        )
        assert GROUP in (await client.get("/groups")).text
        transactions = await client.get("/transactions")
        assert transactions.status == 200 and TXN_ID in transactions.text
        assert "CompleteAbort" in transactions.text
        producers = await client.get(f"/producers?topic={TOPIC}&partition=0")
        assert producers.status == 200, producers.text
        security = await client.get("/security")
        # Kafka without an authorizer answers DescribeAcls with SECURITY_DISABLED: a page
        # saying so, not an error page
        assert security.status == 200, security.text
        # a reset on Kafka: the dry run (a GET), then the confirmed POST of its plan
        planned = await client.get(f"/groups/{GROUP}?reset=earliest&topic={TOPIC}")
        assert planned.status == 200 and 'id="plan"' in planned.text, planned.text
        plan = re.search(r'name="plan" value="([^"]*)"', planned.text)
        assert plan is not None
        login = await client.get("/login")
        signed = await client.post(
            "/login", {"user": "tester", "password": PASSWORD, "csrf_token": login.csrf_token()}
        )
        assert signed.status == 303, signed.text
        token = (await client.get(f"/groups/{GROUP}")).csrf_token()
        form = {"group": GROUP, "plan": html.unescape(plan.group(1)), "csrf_token": token}
        confirm = await client.post("/groups/reset", form)
        assert confirm.status == 200 and "Confirm" in confirm.text, confirm.text
        done = await client.post("/groups/reset", {**form, "confirmed": "yes"})
        assert done.status == 303, done.text
    finally:
        await app.state.clients.close()
    assert committed_offset(bootstrap) == 0  # as Kafka itself now holds it
