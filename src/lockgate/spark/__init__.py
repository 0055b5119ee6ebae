"""lockgate's PySpark connector: `spark.dataSource.register(LockgateDataSource)`, then
`spark.read.format("lockgate")`, `readStream`, `write` and `writeStream` with the options and
row schema of Spark's Kafka connector. The sinks are exactly once (KIP-939 two-phase commit).

PySpark is imported only when LockgateDataSource is first asked for, so that the `lockgate`
command (which registers `lockgate demo` from this package) works without the spark extra."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockgate.spark.source import LockgateDataSource

__all__ = ["LockgateDataSource"]


def __getattr__(name: str) -> Any:
    if name == "LockgateDataSource":
        from lockgate.spark.source import LockgateDataSource

        return LockgateDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
