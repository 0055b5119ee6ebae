# spark/pipeline.py — the example exactly-once pipeline: orders (JSON) read from an input topic,
# enriched, written to an output topic keyed by customer. The transformation is deterministic per
# record, so "exactly once" is checkable: every input order id appears once in the output.
#
# Run as a Spark driver of its own (`python -m lockgate.spark.pipeline ...`), which is what the
# demo and the benchmark start, kill and restart; `build_query` is the same pipeline for callers
# that already have a session.
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

ORDER_SCHEMA = "id long, customer string, amount_cents long"


def session(app_name: str, master: str | None = None, jars: Sequence[str] = ()) -> Any:
    """A Spark session with lockgate's data source registered. Workers run this interpreter
    (PYSPARK_PYTHON), so the connector they import is the driver's. Without a master, the one
    spark-submit was given (it starts this driver behind a gateway), else local[2]. `jars` go
    on the session's classpath (e.g. Spark's own Kafka connector, to compare with)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from lockgate.spark import LockgateDataSource

    builder = SparkSession.builder
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[2]")
    spark = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.speculation", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LockgateDataSource)
    return spark


def enrich(orders: Any) -> Any:
    """key = customer, value = the order with its amount in currency units and a size class."""
    return orders.selectExpr(
        "from_json(cast(value as string), '" + ORDER_SCHEMA + "') as o"
    ).selectExpr(
        "cast(o.customer as binary) as key",
        "cast(to_json(named_struct('id', o.id, 'customer', o.customer, "
        "'amount', o.amount_cents / 100.0, "
        "'size', case when o.amount_cents >= 10000 then 'large' else 'small' end)) as binary)"
        " as value",
    )


def build_query(
    spark: Any,
    bootstrap: str,
    source: str,
    target: str,
    checkpoint: str,
    *,
    max_offsets_per_trigger: int | None = None,
    available_now: bool = True,
    source_format: str = "lockgate",
    sink_format: str = "lockgate",
    sink_options: dict[str, str] | None = None,
) -> Any:
    """Starts the streaming query and returns it (a StreamingQuery). The formats may also be
    Spark's own "kafka", which takes the same options (but reads uncommitted by default)."""
    reader = (
        spark.readStream.format(source_format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (
        enrich(reader.load())
        .writeStream.format(sink_format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .options(**(sink_options or {}))
    )
    writer = writer.trigger(availableNow=True) if available_now else writer
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.spark.pipeline",
        description="the example exactly-once Spark pipeline (orders → enriched orders)",
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument(
        "--continuous", action="store_true", help="keep running (default: Trigger.AvailableNow)"
    )
    args = parser.parse_args(argv)
    spark = session("lockgate-pipeline")
    try:
        query = build_query(
            spark,
            args.bootstrap,
            args.input,
            args.output,
            args.checkpoint,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            available_now=not args.continuous,
        )
        query.awaitTermination()
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
