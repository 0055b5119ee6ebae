"""The topics pages' data against a broker in this process: the list (one Metadata, pages,
filter), a topic's detail (offsets, LSO held back by an open transaction, sizes, overridden
configs), the live chart's counters, and missing topics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.client.admin import Admin, NewTopic
from lockgate.client.errors import UnknownTopicOrPartitionError
from lockgate.client.producer import Producer
from lockgate.console import topics
from lockgate.protocol.api import ApiKey
from lockgate.server.broker import Broker


@pytest.fixture
async def admin(memory_broker: Broker) -> AsyncIterator[Admin]:
    async with Admin(f"127.0.0.1:{memory_broker.port}") as client:
        yield client


async def test_the_list_is_one_metadata_request_cut_into_pages(admin: Admin) -> None:
    await admin.create_topics([NewTopic(f"t-{i:03d}", 1, 1) for i in range(250)])
    await admin.create_topic("other", 2, 1)
    sent: list[int] = []
    connection = await admin.cluster.any_connection()
    request = connection.request

    async def counting(api_key: int, *args: object, **kwargs: object) -> object:
        sent.append(api_key)
        return await request(api_key, *args, **kwargs)  # type: ignore[arg-type]

    connection.request = counting  # type: ignore[method-assign]
    second = await topics.list_topics(admin, page=2)
    assert sent == [ApiKey.METADATA]
    assert (second.total, second.matching, second.page, second.pages) == (251, 251, 2, 3)
    assert [r.name for r in second.rows][:2] == ["t-099", "t-100"] and len(second.rows) == 100
    filtered = await topics.list_topics(admin, name_filter="OTH", page=9)
    assert (filtered.page, filtered.pages, [r.name for r in filtered.rows]) == (1, 1, ["other"])
    assert filtered.rows[0].partitions == 2 and filtered.rows[0].under_replicated == 0
    internal = await topics.list_topics(admin, name_filter="__", include_internal=True)
    assert internal.rows and all(r.internal for r in internal.rows)


async def test_detail_shows_the_stable_offset_held_back_by_an_open_transaction(
    admin: Admin, memory_broker: Broker
) -> None:
    await admin.create_topic("pay", 2, 1, {"retention.ms": "3600000"})
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    async with Producer(bootstrap) as plain, Producer(bootstrap, transactional_id="open") as txn:
        for i in range(5):
            await plain.send_and_wait("pay", f"v{i}".encode(), partition=0)
        await txn.init_transactions()
        txn.begin_transaction()
        for i in range(3):
            await txn.send_and_wait("pay", f"t{i}".encode(), partition=1)
        detail = await topics.topic_detail(admin, "pay")
        await txn.abort_transaction()
    first, second = detail.partitions
    assert (first.log_start, first.last_stable_offset, first.high_watermark) == (0, 5, 5)
    assert (second.last_stable_offset, second.high_watermark, second.undecided) == (0, 3, 3)
    assert detail.records == 8 and first.size and first.size > 0 and first.error is None
    retention = next(c for c in detail.configs if c.name == "retention.ms")
    assert retention.overridden and retention.value == "3600000"
    assert detail.overridden_configs == 1
    counters = await topics.end_offsets_and_size(admin, "pay")
    assert counters["messages"] >= 8 and counters["bytes"] > 0


async def test_a_missing_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        await topics.topic_detail(admin, "nope")
