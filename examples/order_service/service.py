"""Order service: each order is a row in PostgreSQL and an `order-placed` event on lockgate,
written atomically with lockgate.dualwrite (docs/dual-write.md): both or neither, even if the
service, the database or the broker crashes in the middle.

Several workers run side by side, each with its own transactional id (`order-service-<n>`):
a transactional id must never be used by two live workers, and a worker restarted under the
same id recovers what its previous life left half done before it takes new orders.

    lockgate serve --set transaction.two.phase.commit.enable=true &
    python -m examples.order_service.service --database "host=127.0.0.1 dbname=shop" \\
        --bootstrap 127.0.0.1:9092 --workers 4 --orders 250
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import uuid

import psycopg

from lockgate.client.admin import Admin, NewTopic
from lockgate.client.errors import KafkaError
from lockgate.dualwrite import AsyncDualWriter

TOPIC = "order-events"
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id uuid PRIMARY KEY,
    customer text NOT NULL,
    amount_cents integer NOT NULL CHECK (amount_cents > 0),
    placed_by text NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT now())
"""
INSERT_ORDER = (
    "INSERT INTO orders (order_id, customer, amount_cents, placed_by) VALUES (%s, %s, %s, %s)"
)
CUSTOMERS = [f"customer-{n:03d}" for n in range(50)]


async def prepare(database: str, bootstrap: str, partitions: int) -> None:
    """The orders table, the dual writer's state table and the events topic."""
    async with await psycopg.AsyncConnection.connect(database, autocommit=True) as connection:
        await connection.execute(SCHEMA)
    await AsyncDualWriter(database, bootstrap, "order-service-setup").ensure_schema()
    async with Admin(bootstrap) as admin:
        try:
            await admin.create_topics([NewTopic(TOPIC, partitions, 1)])
        except KafkaError as exc:
            if "exists" not in str(exc).lower():
                raise


async def place_order(writer: AsyncDualWriter, customer: str, amount_cents: int) -> uuid.UUID:
    """One unit of work: the row and the event commit together, or neither does."""
    order_id = uuid.uuid4()
    event = {
        "type": "order-placed",
        "order_id": str(order_id),
        "customer": customer,
        "amount_cents": amount_cents,
    }
    async with writer.transaction() as unit:
        await unit.execute(
            INSERT_ORDER, (order_id, customer, amount_cents, writer.transactional_id)
        )
        # keyed by customer: one customer's events stay in order on one partition
        await unit.send(TOPIC, json.dumps(event).encode(), customer.encode())
    return order_id


async def run_worker(database: str, bootstrap: str, index: int, orders: int, seed: int) -> int:
    chooser = random.Random(seed + index)
    async with AsyncDualWriter(database, bootstrap, f"order-service-{index}") as writer:
        # entering the writer ran recover(): a half-done unit of a previous life is finished
        # (committed if its rows were, aborted otherwise) before any new order
        placed = 0
        for _ in range(orders):
            await place_order(writer, chooser.choice(CUSTOMERS), chooser.randint(100, 50_000))
            placed += 1
        return placed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", required=True, help="libpq conninfo")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--orders", type=int, default=100, help="orders per worker")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    await prepare(args.database, args.bootstrap, args.partitions)
    placed = await asyncio.gather(
        *(
            run_worker(args.database, args.bootstrap, n, args.orders, args.seed)
            for n in range(args.workers)
        )
    )
    print(json.dumps({"orders_placed": sum(placed), "workers": args.workers}))


if __name__ == "__main__":
    asyncio.run(main())
