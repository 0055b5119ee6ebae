"""Console benchmark: the group list page with 1,000 groups.

A lockgate broker (a fresh process on a free loopback port, data in a temporary directory,
stopped by PID at the end) holds `--groups` groups (1,000 by default), each with a committed
offset on a one-partition topic (Empty groups, as a simple offset commit makes them). Measured,
as the median of `--repeat` runs:

- data: lockgate.console.groups.list_groups (one ListGroups, one describe of the page's 100
  groups) for the first page, the last page and a name filter matching 100 groups;
- http (with `--http`): GET /groups of `lockgate console` started on a free loopback port,
  the whole page rendered, as a browser would fetch it.

    python -m bench.console_groups [--groups 1000] [--repeat 5] [--http]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.console import groups, paging
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.console import running_console

TOPIC = "bench-console-groups"


async def median_ms(repeat: int, call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def fill(bootstrap: str, count: int) -> None:
    async with Admin(bootstrap) as admin:
        for i in range(count):
            await admin.alter_group_offsets(f"group-{i:05d}", {TopicPartition(TOPIC, 0): 0})


async def measure_data(bootstrap: str, count: int, repeat: int) -> None:
    async with Admin(bootstrap) as admin:
        last = (count + paging.PAGE_SIZE - 1) // paging.PAGE_SIZE
        for label, call in (
            ("first page", lambda: groups.list_groups(admin)),
            (f"page {last} (last)", lambda: groups.list_groups(admin, page=last)),
            ("filter 'group-001'", lambda: groups.list_groups(admin, name_filter="group-001")),
        ):
            print(f"data  {label:<22} {await median_ms(repeat, call):8.1f} ms")


def measure_http(bootstrap: str, repeat: int, log_path: Path) -> None:
    with running_console(bootstrap, log_path, extra_args=("--read-only",)) as console:
        for label, path in (("first page", "/groups"), ("page 10", "/groups?page=10")):
            urllib.request.urlopen(f"{console.url}{path}", timeout=30).read()  # warm-up
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                urllib.request.urlopen(f"{console.url}{path}", timeout=30).read()
                times.append((time.perf_counter() - start) * 1000)
            print(f"http  GET {label:<18} {statistics.median(times):8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--http", action="store_true", help="also time GET /groups")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            create_topic(broker.bootstrap, TOPIC, 1)
            start = time.perf_counter()
            asyncio.run(fill(broker.bootstrap, args.groups))
            print(f"{args.groups} groups made in {time.perf_counter() - start:.1f} s")
            asyncio.run(measure_data(broker.bootstrap, args.groups, args.repeat))
            if args.http:
                measure_http(broker.bootstrap, args.repeat, Path(tmp) / "console.log")
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
