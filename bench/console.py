"""Console page times with many topics: `lockgate console` against one lockgate broker holding
`--topics` single-partition topics (10,000 by default; the records go to one of them).

Each page is fetched `--repeat` times (7 by default) over HTTP by a plain client after one
warm-up fetch; the median and the fastest are printed, with the page's size. The broker and the
console are fresh processes on free loopback ports, their data in a temporary directory,
stopped by PID at the end.

    python -m bench.console [--topics 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from lockgate.client.admin import Admin, NewTopic
from lockgate.client.producer import Producer
from tests.support.broker import BrokerProcess
from tests.support.console import running_console

CREATE_CHUNK = 500


async def populate(bootstrap: str, topics: int) -> str:
    """Creates t-00000 … and writes 1,000 records to the middle one; returns its name."""
    names = [f"t-{i:05d}" for i in range(topics)]
    async with Admin(bootstrap, request_timeout_ms=120_000) as admin:
        for start in range(0, topics, CREATE_CHUNK):
            await admin.create_topics(
                [NewTopic(name, 1, 1) for name in names[start : start + CREATE_CHUNK]]
            )
    middle = names[topics // 2]
    async with Producer(bootstrap) as producer:
        for i in range(1000):
            await producer.send(middle, f'{{"n": {i}}}'.encode(), partition=0)
        await producer.flush()
    return middle


def fetch(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as answer:
        body = answer.read()
        assert answer.status == 200, answer.status
    return time.perf_counter() - started, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-console-") as temporary:
        root = Path(temporary)
        broker = BrokerProcess(root / "data").start()
        try:
            started = time.perf_counter()
            middle = asyncio.run(populate(broker.bootstrap, args.topics))
            print(f"{args.topics} topics created in {time.perf_counter() - started:.1f} s")
            with running_console(broker.bootstrap, root / "console.log") as console:
                pages = [
                    ("cluster", "/cluster"),
                    ("topics, page 1", "/topics"),
                    ("topics, page 50", "/topics?page=50"),
                    ("topics, filtered", "/topics?q=t-0999"),
                    ("topic detail", f"/topics/{middle}"),
                    ("records, 20", f"/topics/{middle}/records?offset=500"),
                    ("records, 500", f"/topics/{middle}/records?offset=0&count=500"),
                ]
                print(f"{'page':<20} {'median ms':>10} {'fastest ms':>11} {'bytes':>9}")
                for label, path in pages:
                    fetch(console.url + path)  # warm-up: connections, metadata
                    timings = []
                    size = 0
                    for _ in range(args.repeat):
                        elapsed, size = fetch(console.url + path)
                        timings.append(elapsed * 1000)
                    print(
                        f"{label:<20} {statistics.median(timings):>10.1f} "
                        f"{min(timings):>11.1f} {size:>9}"
                    )
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
