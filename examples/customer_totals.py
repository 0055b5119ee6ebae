"""Running order totals per customer, exactly once, with Spark Structured Streaming on lockgate.

Reads JSON orders ({"id", "customer", "amount_cents"}) from `orders`, keeps a count and a sum per
customer in Spark's state store, and after every micro-batch writes the totals of every
customer to `customer-totals` (key = customer, value = JSON) through lockgate's exactly-once
sink. That is Spark's complete output mode: PySpark's data source sinks take append and
complete, not update.

Why the totals are exact even if the driver dies at any point: the input offsets and the
aggregation state of micro-batch N are in the checkpoint; the sink's output for N is one
two-phase transaction per task that the driver commits all at once, and a replay of N after a
restart is recognised and not written again (docs/spark.md). A read_committed consumer of
`customer-totals` therefore sees one table of totals per micro-batch, each exact for the input
up to that batch; the last record per customer is its number of committed orders.

    lockgate serve --set transaction.two.phase.commit.enable=true &
    python examples/customer_totals.py --bootstrap 127.0.0.1:9092 --checkpoint /tmp/totals-ckpt

It runs until interrupted (or, with --available-now, until the input read at start is done).
"""

from __future__ import annotations

import argparse

from lockgate.spark.pipeline import ORDER_SCHEMA, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--input", default="orders")
    parser.add_argument("--output", default="customer-totals")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    spark = session("customer-totals")
    orders = (
        spark.readStream.format("lockgate")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load()
        .selectExpr(f"from_json(cast(value as string), '{ORDER_SCHEMA}') as o")
        .select("o.*")
    )
    totals = orders.groupBy("customer").agg({"id": "count", "amount_cents": "sum"})
    writer = (
        totals.selectExpr(
            "cast(customer as binary) as key",
            "cast(to_json(named_struct('customer', customer, 'orders', `count(id)`, "
            "'amount_cents', `sum(amount_cents)`)) as binary) as value",
        )
        .writeStream.format("lockgate")
        .outputMode("complete")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    query = (writer.trigger(availableNow=True) if args.available_now else writer).start()
    try:
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
