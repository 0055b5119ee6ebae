"""The cluster page's data against a broker in this process: brokers and controller, the
partition summary (min.insync.replicas read for every topic at once), log directories."""

from __future__ import annotations

from lockgate.client.admin import Admin
from lockgate.console import cluster
from lockgate.console.app import create_app
from lockgate.console.settings import ConsoleSettings
from lockgate.server.broker import Broker
from tests.support.console import AsgiClient


async def test_overview_of_a_single_node(memory_broker: Broker) -> None:
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic("healthy", 3, 1)
        # one replica cannot satisfy min.insync.replicas=2: every partition is under min ISR
        await admin.create_topic("strict", 2, 1, {"min.insync.replicas": "2"})
        overview = await cluster.overview(admin)
    assert overview.cluster_id
    assert [(b.node_id, b.port, b.is_controller) for b in overview.brokers] == [
        (overview.controller_id, memory_broker.port, True)
    ]
    summary = overview.summary
    assert summary.partitions >= 5 and summary.offline == 0
    assert summary.under_min_isr == 2 and summary.under_replicated == 0
    assert [(p.topic, p.partition, p.problem) for p in summary.problems] == [
        ("strict", 0, "under-min-ISR"),
        ("strict", 1, "under-min-ISR"),
    ]
    assert overview.log_dirs and all(d.broker == overview.controller_id for d in overview.log_dirs)
    listed = {t for d in overview.log_dirs for t, _size in d.largest_topics}
    assert {"healthy", "strict"} <= listed


async def test_the_page_lists_the_partitions_needing_attention(memory_broker: Broker) -> None:
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic("strict", 1, 1, {"min.insync.replicas": "2"})
    app = create_app(ConsoleSettings(bootstrap))
    try:
        page = await AsgiClient(app).get("/cluster")
    finally:
        await app.state.clients.close()
    assert page.status == 200
    assert '<td class="bad">under-min-ISR</td>' in page.text
    assert '<div class="figure" id="under-min-isr">1</div>' in page.text
