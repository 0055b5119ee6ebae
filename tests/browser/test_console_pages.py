"""The console in a real browser (the system's Chromium, headless, through Playwright) against
a broker holding data written by confluent-kafka: the cluster page, the topics list and its
second page, a topic's detail with its live throughput chart, the record browser (from an
offset and from a time, both isolation levels, JSON and hex views, headers, transaction
markers), bad input, and signing in. Screenshots are saved as it goes (conftest.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Page, expect

from tests.browser.conftest import CONSOLE_PASSWORD
from tests.support.broker import BrokerProcess
from tests.support.console import (
    BULK_TOPICS,
    JSON_TOPIC,
    PLAIN_TOPIC,
    TXN_TOPIC,
    ConsoleData,
    ConsoleProcess,
)

ALL_TOPICS = BULK_TOPICS + 4  # and the internal ones, hidden by default


def shot(page: Page, directory: Path, name: str, *, full_page: bool = True) -> None:
    # the log directories' paths are the test's temporary directory: masked in the pictures
    page.screenshot(
        path=str(directory / f"{name}.png"),
        full_page=full_page,
        mask=[page.locator("#log-dirs td.mono")],
    )


def offsets(page: Page) -> list[int]:
    return [int(o) for o in page.locator("#records tbody tr[data-offset]").evaluate_all(
        "rows => rows.map(r => r.dataset.offset)"
    )]  # fmt: skip


def test_cluster_page(
    page: Page, console: ConsoleProcess, console_broker: BrokerProcess, screenshots: Path
) -> None:
    answer = page.goto(f"{console.url}/")
    assert answer is not None and answer.status == 200 and page.url.endswith("/cluster")
    brokers = page.locator("#brokers tbody tr")
    expect(brokers).to_have_count(1)
    expect(brokers.first).to_contain_text(f"127.0.0.1:{console_broker.port}")
    expect(brokers.first).to_contain_text("controller")
    assert int(page.locator("#topic-count").inner_text()) >= ALL_TOPICS
    expect(page.locator("#under-replicated")).to_have_text("0")
    expect(page.locator("#offline")).to_have_text("0")
    expect(page.locator("#log-dirs")).to_contain_text(str(console_broker.data_dir))
    expect(page.locator("#log-dirs")).to_contain_text(JSON_TOPIC)
    shot(page, screenshots, "cluster")


def test_topics_list_pages_and_filter(
    page: Page, console: ConsoleProcess, console_data: ConsoleData, screenshots: Path
) -> None:
    page.goto(f"{console.url}/topics")
    expect(page.locator("#topics tbody tr")).to_have_count(100)
    expect(page.locator("h1")).to_contain_text(str(ALL_TOPICS))
    page.locator("a[rel=next]").first.click()
    expect(page.locator(".pager span").first).to_have_text("page 2 of 2")
    assert "page=2" in page.url
    expect(page.locator("#topics tbody tr")).to_have_count(ALL_TOPICS - 100)
    expect(page.locator("#topics")).to_contain_text(TXN_TOPIC)
    page.fill("input[name=q]", "orders")
    page.click("form.filters button")
    expect(page.locator("#topics tbody tr")).to_have_count(2)
    shot(page, screenshots, "topics")


@pytest.fixture
def steady_load(console_broker: BrokerProcess) -> Iterator[None]:
    """Records flowing into PLAIN_TOPIC (about 500 a second) while the test runs."""
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": console_broker.bootstrap, "linger.ms": 20})
        sent = 0
        while not stop.wait(0.1):  # pacing of the load, not synchronisation
            for _ in range(50):
                producer.produce(PLAIN_TOPIC, f"load {sent}".encode() * 4, partition=sent % 3)
                sent += 1
            producer.poll(0)
        producer.flush(10)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15)


def test_topic_detail_with_live_throughput(
    page: Page, console: ConsoleProcess, steady_load: None, screenshots: Path
) -> None:
    page.goto(f"{console.url}/topics/{PLAIN_TOPIC}")
    expect(page.locator("#partitions tbody tr")).to_have_count(3)
    overridden = page.locator("#configs tr.overridden")
    expect(overridden).to_have_count(1)
    expect(overridden).to_contain_text("retention.ms")
    expect(overridden).to_contain_text("86400000")
    # the page's script refreshes the chart every 3 s; each refresh is a sample
    page.wait_for_function(
        "() => [...document.querySelectorAll('#throughput polyline')].every("
        "l => l.getAttribute('points').trim().split(' ').length >= 2)"
        " && document.querySelectorAll('#throughput polyline').length == 2",
        timeout=30_000,
    )
    expect(page.locator("#throughput-now")).to_contain_text("messages/s")
    shot(page, screenshots, "topic", full_page=False)  # the configs' long table left out


def test_record_browser_transactions(
    page: Page, console: ConsoleProcess, console_data: ConsoleData, screenshots: Path
) -> None:
    page.goto(f"{console.url}/topics/{TXN_TOPIC}/records?offset=0")
    # read_committed (the default): the aborted records are left out, both markers shown
    expect(page.locator("#records tr.control")).to_have_count(2)
    assert offsets(page) == [0, 1, 2, 3, 6, 7]
    expect(page.locator("#hidden-aborted")).to_contain_text("2 aborted records hidden")
    text = page.locator("#records").inner_text()
    assert all(v in text for v in console_data.committed_values)
    assert not any(v in text for v in console_data.aborted_values)
    page.select_option("select[name=isolation]", "uncommitted")
    page.click("#browse button")
    expect(page.locator("#records tr.aborted")).to_have_count(2)
    assert offsets(page) == list(range(8))
    expect(page.locator("#records tr.control").first).to_contain_text("COMMIT marker")
    expect(page.locator("#records tr.control").last).to_contain_text("ABORT marker")
    expect(page.locator("#records tr.aborted").first).to_contain_text("aborted-0")
    shot(page, screenshots, "records-transactions")


def test_record_browser_time_json_hex_and_headers(
    page: Page, console: ConsoleProcess, console_data: ConsoleData, screenshots: Path
) -> None:
    page.goto(f"{console.url}/topics/{JSON_TOPIC}/records")
    assert offsets(page) == list(range(10, 30))  # the last 20 by default
    page.fill("input[name=offset]", "")
    page.fill("input[name=time]", "2026-01-01T00:00:05Z")
    page.fill("input[name=count]", "3")
    page.click("#browse button")
    assert offsets(page) == [5, 6, 7]
    first_value = page.locator("#records td.value pre").first
    expect(first_value).to_have_attribute("data-format", "json")
    expect(first_value).to_contain_text('"item": "widget-5"')
    shot(page, screenshots, "records-json")
    page.select_option("select[name=value_format]", "hex")
    page.click("#browse button")
    expect(page.locator("#records td.value pre").first).to_have_attribute("data-format", "hex")
    expect(page.locator("#records td.value pre").first).to_contain_text("7b 22 69 64 22")
    page.goto(f"{console.url}/topics/blobs-binary/records?offset=3&count=2")
    assert offsets(page) == [3, 4]
    row = page.locator("#records tr.record").first
    expect(row.locator("td.value pre")).to_have_attribute("data-format", "hex")
    expect(row.locator("td.value pre")).to_contain_text("00 ff 03 80 7f")
    expect(row.locator("td.headers")).to_contain_text("trace-id: trace-3")
    expect(row.locator("td.headers pre").last).to_have_attribute("data-format", "hex")
    expect(row.locator("td.key")).to_have_text("null")


def test_bad_input_gets_a_message_page(page: Page, console: ConsoleProcess) -> None:
    answer = page.goto(f"{console.url}/topics/{JSON_TOPIC}/records?offset=abc")
    assert answer is not None and answer.status == 400
    expect(page.locator(".message")).to_have_text("offset must be a whole number, not 'abc'")
    answer = page.goto(f"{console.url}/topics/{JSON_TOPIC}/records?offset=999")
    assert answer is not None and answer.status == 400
    expect(page.locator(".message")).to_contain_text("0 (log start) to 30 (high watermark)")
    answer = page.goto(f"{console.url}/topics/deleted-or-never-was")
    assert answer is not None and answer.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    assert "Traceback" not in page.content()


def test_sign_in_and_out(page: Page, console: ConsoleProcess, screenshots: Path) -> None:
    page.goto(f"{console.url}/cluster")
    page.click("text=sign in")
    page.fill("input[name=user]", "ann")
    page.fill("input[name=password]", "wrong")
    page.click("form.login button")
    expect(page.locator(".message.error")).to_have_text("Wrong name or password.")
    page.fill("input[name=user]", "ann")
    page.fill("input[name=password]", CONSOLE_PASSWORD)
    page.click("form.login button")
    expect(page.locator(".who .user")).to_have_text("ann")
    assert page.url.endswith("/cluster")
    page.click("text=sign out")
    expect(page.locator(".who")).to_contain_text("sign in")
    assert CONSOLE_PASSWORD not in console.log()
    assert "ann signed in from 127.0.0.1" in console.log()
