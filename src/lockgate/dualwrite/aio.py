# The asyncio dual writer: psycopg's AsyncConnection and lockgate's asyncio Producer. It owns
# one database connection and one transactional producer for one transactional id (one worker),
# and runs units of work one at a time; the recipe and its invariants are in protocol.py. The
# steps are core.py's, shared with the blocking writer (sync.py); this module says how to make
# their calls with psycopg's AsyncConnection and the asyncio Producer.
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

import psycopg
from psycopg.abc import Params, QueryNoTemplate
from psycopg.rows import TupleRow

from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer, ProducerStats, RecordMetadata
from lockgate.dualwrite.core import CLOSE_SECONDS, UnitCore, WriterCore, run_async
from lockgate.dualwrite.protocol import Recovery

log = logging.getLogger(__name__)

AsyncConnection = psycopg.AsyncConnection[TupleRow]
AsyncConnect = Callable[[], Awaitable[AsyncConnection]]


class AsyncUnitOfWork(UnitCore[AsyncConnection, Producer]):
    """What the application writes in one unit: rows through `execute` (or `connection`, inside
    the database transaction) and records through `send`."""

    async def execute(
        self, query: QueryNoTemplate, params: Params | None = None
    ) -> psycopg.AsyncCursor[Any]:
        return await self.connection.execute(query, params)

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
    ) -> asyncio.Future[RecordMetadata]:
        """Queues a record of the unit's Kafka transaction; its future resolves once written
        (not committed: that happens after the database COMMIT)."""
        return await self.producer.send(topic, value, key, partition=partition, headers=headers)


class AsyncDualWriter(WriterCore[AsyncConnection, Producer, AsyncConnect]):
    """Writes rows to PostgreSQL and records to lockgate atomically, one unit at a time.

    `database` is a libpq conninfo string or a coroutine function returning a new
    AsyncConnection. `producer_options` go to lockgate.client.producer.Producer. The
    constructor's keywords are WriterCore's (core.py): state_table, producer_options, on_step."""

    _log = log

    async def _connect(self) -> AsyncConnection:
        if isinstance(self.database, str):
            return await psycopg.AsyncConnection.connect(self.database)
        connection = await self.database()
        if connection.autocommit:
            await connection.set_autocommit(False)
        return connection

    async def _open_producer(self) -> Producer:
        producer = Producer(
            self.bootstrap_servers, transactional_id=self.transactional_id, **self.producer_options
        )
        await producer.start()
        return producer

    def _stats(self, producer: Producer) -> ProducerStats:
        return producer.stats

    async def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await producer.close()

    async def ensure_schema(self) -> None:
        """Creates the state table if it does not exist (idempotent, safe to race)."""
        await run_async(self._ensure_schema_steps())

    async def recover(self) -> Recovery:
        """Start-up (and after any RecoveryNeededError): a fresh producer fences the previous
        instance of this transactional id and keeps its prepared transaction; it is committed
        when the state row committed in the database names it, aborted otherwise."""
        return await run_async(self._recover_steps())

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncUnitOfWork]:
        """One unit of work. Leaving the block normally commits it: prepare the Kafka
        transaction, store its state in the database transaction, COMMIT, complete. An
        exception in the block (or a failure before COMMIT) rolls back both and is re-raised."""
        connection, producer = self._ready()
        await run_async(self._begin_steps(connection, producer))
        try:
            yield AsyncUnitOfWork(connection, producer)
        except BaseException:
            await run_async(self._abort_steps(connection, producer, prepared=False))
            raise
        await run_async(self._finish_steps(connection, producer))

    async def close(self) -> None:
        await run_async(self._close_steps())

    async def __aenter__(self) -> AsyncDualWriter:
        await self.recover()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
