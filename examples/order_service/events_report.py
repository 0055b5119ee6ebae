"""A Spark batch job over the order service's events: revenue and order count per customer
from `order-events`, read with lockgate's data source (read_committed by default, so an event
whose order row was rolled back is never seen), and with --database a check that the events
agree with the orders table exactly.

    python -m examples.order_service.events_report --bootstrap 127.0.0.1:9092 \\
        --database "host=127.0.0.1 dbname=shop"
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import psycopg

from lockgate.spark.pipeline import session

EVENT_SCHEMA = "type string, order_id string, customer string, amount_cents int"


def totals_from_events(spark: Any, bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    events = (
        spark.read.format("lockgate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(f"from_json(cast(value as string), '{EVENT_SCHEMA}') as e")
        .select("e.*")
        .where("type = 'order-placed'")
    )
    rows = events.groupBy("customer").agg({"order_id": "count", "amount_cents": "sum"}).collect()
    return {row["customer"]: (row["count(order_id)"], row["sum(amount_cents)"]) for row in rows}


def totals_from_database(database: str) -> dict[str, tuple[int, int]]:
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            "SELECT customer, count(*), sum(amount_cents) FROM orders GROUP BY customer"
        ).fetchall()
    return {customer: (int(count), int(total)) for customer, count, total in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="order-events")
    parser.add_argument("--database", help="libpq conninfo: compare with the orders table")
    args = parser.parse_args()
    spark = session("order-events-report")
    try:
        from_events = totals_from_events(spark, args.bootstrap, args.topic)
    finally:
        spark.stop()
    for customer, (count, total) in sorted(from_events.items()):
        print(f"{customer}: {count} orders, {total / 100:.2f}")
    if args.database:
        from_rows = totals_from_database(args.database)
        differ = sorted(c for c in from_rows.keys() | from_events.keys()
                        if from_rows.get(c) != from_events.get(c))  # fmt: skip
        print(json.dumps({"customers": len(from_rows), "disagreeing": differ}))


if __name__ == "__main__":
    main()
