"""Atomic writes to PostgreSQL and lockgate: KIP-939's dual-write recipe, with the database as
the transaction manager (docs/dual-write.md).

    writer = AsyncDualWriter("host=db dbname=shop", "broker:9092", "orders-worker-1")
    await writer.ensure_schema()
    async with writer:                            # connects, then recover()
        async with writer.transaction() as unit:
            await unit.execute("INSERT INTO orders ...", params)
            await unit.send("order-events", value, key)

`DualWriter` is the same for psycopg's blocking connection and lockgate's blocking producer.
Needs the `postgres` extra (psycopg 3) and a broker with transaction.two.phase.commit.enable.
"""

from lockgate.dualwrite.aio import AsyncDualWriter, AsyncUnitOfWork
from lockgate.dualwrite.protocol import (
    DEFAULT_STATE_TABLE,
    CommitOutcomeUnknownError,
    CompletionPendingError,
    DualWriteError,
    Recovery,
    RecoveryNeededError,
    Step,
    StepHook,
)
from lockgate.dualwrite.sync import DualWriter, UnitOfWork

__all__ = [
    "DEFAULT_STATE_TABLE",
    "AsyncDualWriter",
    "AsyncUnitOfWork",
    "CommitOutcomeUnknownError",
    "CompletionPendingError",
    "DualWriteError",
    "DualWriter",
    "Recovery",
    "RecoveryNeededError",
    "Step",
    "StepHook",
    "UnitOfWork",
]
