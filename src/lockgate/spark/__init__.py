"""lockgate's PySpark connector: `spark.dataSource.register(LockgateDataSource)`, then
`spark.read.format("lockgate")`, `readStream`, `write` and `writeStream` with the options and
row schema of Spark's Kafka connector. The sinks are exactly once (KIP-939 two-phase commit)."""

from lockgate.spark.source import LockgateDataSource

__all__ = ["LockgateDataSource"]
