"""Dual-write benchmark: units of work per second and their latency (p50/p99) of
lockgate.dualwrite's recipe (prepare, state row, COMMIT, complete) against writes of the same
rows and records that are not atomic, side by side in one run against one PostgreSQL (started
here, fsync on) and one lockgate broker (fsync durability, two-phase commit enabled):

- `dual-write`: AsyncDualWriter, one unit = ROWS inserts + ROWS records, atomic.
- `plain`: the rows in one database transaction, COMMIT, then the records from an idempotent
  producer, awaited. A crash between the two loses the records.
- `plain-txn`: the same with the records in an ordinary (not two-phase) Kafka transaction,
  committed after the database: still not atomic, but what an application would otherwise do.

Each mode runs W workers (each its own connection and producer, and for dual-write its own
transactional id), units one after the other in each worker; modes run in turn, after a
warm-up, so their figures come from the same machine state.

    python -m bench.dual_write [--units 500] [--rows 3] [--workers 1] [--size 200]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

from lockgate.client.admin import Admin, NewTopic
from lockgate.client.producer import Producer
from lockgate.dualwrite import AsyncDualWriter
from lockgate.dualwrite.protocol import DEFAULT_PRODUCER_OPTIONS
from tests.support.broker import BrokerProcess
from tests.support.postgres import running_postgres

TOPIC = "bench-dual-write"
PARTITIONS = 3
WARM_UP_UNITS = 20
SCHEMA = "CREATE TABLE IF NOT EXISTS bench_orders (id bigint PRIMARY KEY, payload text NOT NULL)"
INSERT = "INSERT INTO bench_orders (id, payload) VALUES (%s, %s)"
# every mode with the dual writer's producer defaults
PRODUCER: dict[str, Any] = dict(DEFAULT_PRODUCER_OPTIONS)

Unit = Callable[[int], Awaitable[None]]


class Ids:
    """Unique row ids across modes and workers."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> list[int]:
        first, self.next = self.next, self.next + count
        return list(range(first, first + count))


async def dual_write_worker(
    conninfo: str, bootstrap: str, name: str, rows: int, value: bytes, ids: Ids
) -> tuple[Unit, Callable[[], Awaitable[None]]]:
    writer = AsyncDualWriter(conninfo, bootstrap, name)
    await writer.recover()

    async def unit(_: int) -> None:
        async with writer.transaction() as work:
            for row in ids.take(rows):
                await work.execute(INSERT, (row, value.decode()))
                await work.send(TOPIC, value, str(row).encode())

    return unit, writer.close


async def plain_worker(
    conninfo: str, bootstrap: str, name: str, rows: int, value: bytes, ids: Ids, txn: bool
) -> tuple[Unit, Callable[[], Awaitable[None]]]:
    connection = await psycopg.AsyncConnection.connect(conninfo)
    producer = Producer(bootstrap, transactional_id=name if txn else None, **PRODUCER)
    await producer.start()
    if txn:
        await producer.init_transactions()

    async def unit(_: int) -> None:
        taken = ids.take(rows)
        for row in taken:
            await connection.execute(INSERT, (row, value.decode()))
        await connection.commit()
        if txn:
            producer.begin_transaction()
        futures = [await producer.send(TOPIC, value, str(row).encode()) for row in taken]
        if txn:
            await producer.commit_transaction()
        await asyncio.gather(*futures)

    async def close() -> None:
        await producer.close()
        await connection.close()

    return unit, close


async def run_mode(
    mode: str, conninfo: str, bootstrap: str, args: argparse.Namespace, ids: Ids
) -> dict[str, float]:
    value = b"x" * args.size
    workers = []
    for n in range(args.workers):
        name = f"bench-{mode}-{n}"
        if mode == "dual-write":
            workers.append(
                await dual_write_worker(conninfo, bootstrap, name, args.rows, value, ids)
            )
        else:
            workers.append(
                await plain_worker(
                    conninfo, bootstrap, name, args.rows, value, ids, txn=mode == "plain-txn"
                )
            )
    latencies: list[float] = []

    async def drive(unit: Unit, count: int, record: bool) -> None:
        for i in range(count):
            started = time.perf_counter()
            await unit(i)
            if record:
                latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(drive(unit, WARM_UP_UNITS, False) for unit, _ in workers))
    per_worker = args.units // args.workers
    started = time.perf_counter()
    await asyncio.gather(*(drive(unit, per_worker, True) for unit, _ in workers))
    elapsed = time.perf_counter() - started
    for _, close in workers:
        await close()
    latencies.sort()
    return {
        "units_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


async def bench(conninfo: str, bootstrap: str, args: argparse.Namespace) -> None:
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
        await connection.execute(SCHEMA)
    await AsyncDualWriter(conninfo, bootstrap, "bench-setup").ensure_schema()
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    ids = Ids()
    results = {}
    for mode in ("plain", "plain-txn", "dual-write"):
        results[mode] = await run_mode(mode, conninfo, bootstrap, args, ids)
    base = results["plain"]
    print(
        f"{platform.python_implementation()} {platform.python_version()}, {args.units} units of "
        f"{args.rows} rows + {args.rows} records ({args.size} B), {args.workers} worker(s)"
    )
    print(f"{'mode':<12} {'units/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'rate vs plain':>14}")
    for mode, figures in results.items():
        print(
            f"{mode:<12} {figures['units_per_s']:9.1f} {figures['p50_ms']:8.2f} "
            f"{figures['p99_ms']:8.2f} {figures['units_per_s'] / base['units_per_s']:13.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=500)
    parser.add_argument("--rows", type=int, default=3, help="rows (and records) per unit")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--size", type=int, default=200, help="record value bytes")
    args = parser.parse_args()
    with running_postgres() as postgres, tempfile.TemporaryDirectory() as data:
        broker = BrokerProcess(
            Path(data) / "data", {"transaction.two.phase.commit.enable": "true"}
        ).start()
        try:
            asyncio.run(bench(postgres.conninfo, broker.bootstrap, args))
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
