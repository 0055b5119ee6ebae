"""The record browser's data against a broker in this process: records from an offset, the
transaction markers as entries, read_committed hiding aborted records, read_uncommitted
marking them, time lookup, and offsets outside the log."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.client.admin import Admin
from lockgate.client.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from lockgate.client.producer import Producer
from lockgate.console import records
from lockgate.server.broker import Broker

TOPIC = "txn"
BASE_MS = 1_767_225_600_000


@pytest.fixture
async def admin(memory_broker: Broker) -> AsyncIterator[Admin]:
    """Offsets 0-1 plain, 2-3 committed + marker 4, 5-6 aborted + marker 7, 8 open txn."""
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    async with Admin(bootstrap) as client:
        await client.create_topic(TOPIC, 1, 1)
        async with Producer(bootstrap) as plain, Producer(bootstrap, transactional_id="t") as txn:
            for i in range(2):
                await plain.send_and_wait(
                    TOPIC,
                    f"plain-{i}".encode(),
                    partition=0,
                    timestamp_ms=BASE_MS + i * 1000,
                    headers=[("h", b"\x00\x01")],
                )
            await txn.init_transactions()
            for outcome in ("committed", "aborted"):
                txn.begin_transaction()
                for i in range(2):
                    await txn.send_and_wait(TOPIC, f"{outcome}-{i}".encode(), partition=0)
                if outcome == "committed":
                    await txn.commit_transaction()
                else:
                    await txn.abort_transaction()
            txn.begin_transaction()
            await txn.send_and_wait(TOPIC, b"open-0", partition=0)
            yield client
            await txn.abort_transaction()


def described(page: records.RecordPage) -> list[tuple[int, str]]:
    return [
        (e.offset, e.kind if isinstance(e, records.ControlMarker) else (e.value or b"").decode())
        for e in page.entries
    ]


async def test_read_uncommitted_shows_every_record_and_marker(admin: Admin) -> None:
    page = await records.browse(admin, TOPIC, 0, 0, 20, records.READ_UNCOMMITTED)
    assert described(page) == [
        (0, "plain-0"), (1, "plain-1"), (2, "committed-0"), (3, "committed-1"), (4, "COMMIT"),
        (5, "aborted-0"), (6, "aborted-1"), (7, "ABORT"), (8, "open-0"),
    ]  # fmt: skip
    outcomes = [getattr(e, "outcome", "marker") for e in page.entries]
    assert outcomes == [
        None, None, "committed", "committed", "marker", "aborted", "aborted", "marker", "open"
    ]  # fmt: skip
    assert (page.high_watermark, page.last_stable_offset, page.next_offset) == (9, 8, 9)
    first = page.entries[0]
    assert isinstance(first, records.BrowsedRecord)
    assert first.headers == (("h", b"\x00\x01"),) and first.timestamp == BASE_MS


async def test_read_committed_hides_aborted_records_and_stops_at_the_lso(admin: Admin) -> None:
    page = await records.browse(admin, TOPIC, 0, 0, 20, records.READ_COMMITTED)
    assert described(page) == [
        (0, "plain-0"), (1, "plain-1"), (2, "committed-0"), (3, "committed-1"), (4, "COMMIT"),
        (7, "ABORT"),
    ]  # fmt: skip
    assert page.hidden_aborted == 2 and page.next_offset == 8


async def test_pages_continue_where_the_last_one_ended(admin: Admin) -> None:
    first = await records.browse(admin, TOPIC, 0, 1, 3, records.READ_UNCOMMITTED)
    assert [e.offset for e in first.entries] == [1, 2, 3] and first.next_offset == 4
    second = await records.browse(admin, TOPIC, 0, first.next_offset, 3, records.READ_UNCOMMITTED)
    assert [e.offset for e in second.entries] == [4, 5, 6]


async def test_time_lookup_and_bad_offsets(admin: Admin) -> None:
    assert await records.resolve_time(admin, TOPIC, 0, BASE_MS + 500) == 1
    assert await records.resolve_time(admin, TOPIC, 0, BASE_MS * 2) is None
    with pytest.raises(OffsetOutOfRangeError, match=r"0 \(log start\) to 9"):
        await records.browse(admin, TOPIC, 0, 50, 5, records.READ_UNCOMMITTED)
    with pytest.raises(UnknownTopicOrPartitionError):
        await records.browse(admin, TOPIC, 3, 0, 5)
