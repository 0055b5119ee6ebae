"""The dual-write tests' application: an `orders` table whose every row has exactly one event
record (key = order id) on a topic, and the checks that the two agree."""

from __future__ import annotations

import time
from collections import Counter

import psycopg

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer

ORDERS_TABLE = """CREATE TABLE IF NOT EXISTS orders (
    order_id text PRIMARY KEY,
    worker text NOT NULL,
    amount integer NOT NULL)"""
INSERT_ORDER = "INSERT INTO orders (order_id, worker, amount) VALUES (%s, %s, %s)"
PARTITIONS = 2


def create_orders_table(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(ORDERS_TABLE)


def order_rows(conninfo: str, prefix: str) -> Counter[str]:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT order_id FROM orders WHERE order_id LIKE %s", (prefix + "%",)
        ).fetchall()
    return Counter(row[0] for row in rows)


async def committed_events(
    bootstrap: str, topic: str, partitions: int = PARTITIONS
) -> Counter[str]:
    """The keys of every record a read_committed consumer sees, up to the last stable offset."""
    async with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(wanted)
        await consumer.seek_to_beginning(wanted)
        ends = await consumer.end_offsets(wanted)
        seen: Counter[str] = Counter()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in wanted]
            if all(position >= ends[tp] for position, tp in zip(positions, wanted, strict=True)):
                break
            for message in await consumer.poll(200):
                seen[(message.key or b"").decode()] += 1
        return seen
