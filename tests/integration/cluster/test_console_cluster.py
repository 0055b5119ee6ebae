"""The console's cluster page on three brokers: every broker and the controller, and a
broker frozen (SIGSTOP) so that the ISRs its leaders' partitions shrink: a topic needing all
three replicas shows its partitions under min ISR, one needing two shows them
under-replicated. The frozen broker, while still registered, costs the page only its own log
directory row (it never answers DescribeLogDirs); once it is back, no problem is left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lockgate.client.admin import Admin
from lockgate.console import cluster as console_cluster
from lockgate.console.app import create_app
from lockgate.console.settings import ConsoleSettings
from tests.support.cluster import BrokerCluster
from tests.support.console import AsgiClient

STRICT = "console-strict"  # min.insync.replicas=3: under min ISR once a replica drops out
RELAXED = "console-relaxed"  # min.insync.replicas=2: only under-replicated
FROZEN = 2


async def overview_when(
    bootstrap: str, ready: Callable[[console_cluster.ClusterOverview], bool], what: str
) -> console_cluster.ClusterOverview:
    deadline = time.monotonic() + 60
    async with Admin(bootstrap) as admin:
        while True:
            found = await console_cluster.overview(admin)
            if ready(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within 60 s; last {found.summary}")
            await asyncio.sleep(0.5)


def problems_of(found: console_cluster.ClusterOverview, topic: str) -> dict[int, str]:
    return {p.partition: p.problem for p in found.summary.problems if p.topic == topic}


def assert_silent_row(found: console_cluster.ClusterOverview) -> None:
    """While the frozen broker is listed (until its registration expires), its log directory
    row says it did not answer, and the other brokers' rows are there."""
    if FROZEN in {b.node_id for b in found.brokers}:
        [row] = [d for d in found.log_dirs if d.broker == FROZEN]
        assert row.error is not None and "did not answer" in row.error
    assert {d.broker for d in found.log_dirs if d.error is None} >= {0, 1}


def shrunk(found: console_cluster.ClusterOverview) -> bool:
    """Both topics have a partition whose leader dropped the frozen broker from its ISR."""
    return bool(problems_of(found, STRICT)) and bool(problems_of(found, RELAXED))


async def test_the_cluster_page_shows_a_frozen_brokers_partitions(cluster: BrokerCluster) -> None:
    cluster.create_topic(STRICT, partitions=3, replication=3, **{"min.insync.replicas": "3"})
    cluster.create_topic(RELAXED, partitions=3, replication=3, **{"min.insync.replicas": "2"})
    healthy = await overview_when(
        cluster.bootstrap, lambda f: not problems_of(f, STRICT), "healthy at first"
    )
    assert [b.node_id for b in healthy.brokers] == [0, 1, 2]
    assert [b.node_id for b in healthy.brokers if b.is_controller] == [healthy.controller_id]
    cluster.pause(FROZEN)
    try:
        # at once, while the frozen broker is still registered (its lease lasts 3 s): the
        # page comes back without its log directories (asked, never answered), not an error
        first = await overview_when(cluster.bootstrap, lambda _f: True, "an overview")
        assert_silent_row(first)
        found = await overview_when(cluster.bootstrap, shrunk, "ISRs shrunk")
        for topic, expected in ((STRICT, "under-min-ISR"), (RELAXED, "under-replicated")):
            for problem in (p for p in found.summary.problems if p.topic == topic):
                if problem.problem == "offline":
                    continue  # (a partition the frozen broker led, until its leadership moves)
                assert problem.problem == expected, problem
                assert FROZEN not in problem.isr and len(problem.replicas) == 3
        assert found.summary.under_min_isr >= 1 and found.summary.under_replicated >= 2
        assert_silent_row(found)
        app = create_app(ConsoleSettings(cluster.bootstrap))
        try:
            page = await AsgiClient(app).get("/cluster")
        finally:
            await app.state.clients.close()
        assert page.status == 200
        assert f">{STRICT}</a>-" in page.text and ">under-min-ISR</td>" in page.text
    finally:
        cluster.resume(FROZEN)
    cluster.wait_full_isr(STRICT)
    cluster.wait_full_isr(RELAXED)
    await overview_when(
        cluster.bootstrap,
        lambda f: not problems_of(f, STRICT) and not problems_of(f, RELAXED),
        "no problem once the broker is back",
    )
