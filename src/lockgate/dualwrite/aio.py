# The asyncio dual writer: psycopg's AsyncConnection and lockgate's asyncio Producer. It owns
# one database connection and one transactional producer for one transactional id (one worker),
# and runs units of work one at a time; the recipe and its invariants are in protocol.py.
# sync.py is this module with the blocking connection and producer: change both together.
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import psycopg
from psycopg.abc import Params, QueryNoTemplate
from psycopg.rows import TupleRow

from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer, RecordMetadata
from lockgate.client.transactions import PreparedTxnState
from lockgate.dualwrite import protocol
from lockgate.dualwrite.protocol import (
    NO_TRANSACTION,
    CommitOutcomeUnknownError,
    CompletionPendingError,
    Recovery,
    RecoveryNeededError,
    Step,
    StepHook,
)

log = logging.getLogger(__name__)

AsyncConnection = psycopg.AsyncConnection[TupleRow]
AsyncConnect = Callable[[], Awaitable[AsyncConnection]]
CLOSE_SECONDS = 5.0


class AsyncUnitOfWork:
    """What the application writes in one unit: rows through `execute` (or `connection`, inside
    the database transaction) and records through `send`."""

    def __init__(self, connection: AsyncConnection, producer: Producer) -> None:
        self.connection = connection
        self.producer = producer

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


class AsyncDualWriter:
    """Writes rows to PostgreSQL and records to lockgate atomically, one unit at a time.

    `database` is a libpq conninfo string or a coroutine function returning a new
    AsyncConnection. `producer_options` go to lockgate.client.producer.Producer."""

    def __init__(
        self,
        database: str | AsyncConnect,
        bootstrap_servers: str,
        transactional_id: str,
        *,
        state_table: str = protocol.DEFAULT_STATE_TABLE,
        producer_options: Mapping[str, Any] | None = None,
        on_step: StepHook | None = None,
    ) -> None:
        self.database = database
        self.bootstrap_servers = bootstrap_servers
        self.transactional_id = transactional_id
        self.table = protocol.table_name(state_table)
        self.producer_options = {**protocol.DEFAULT_PRODUCER_OPTIONS, **(producer_options or {})}
        self.on_step = on_step
        self._connection: AsyncConnection | None = None
        self._producer: Producer | None = None
        self._recovered = False

    async def _connect(self) -> AsyncConnection:
        if isinstance(self.database, str):
            return await psycopg.AsyncConnection.connect(self.database)
        connection = await self.database()
        if connection.autocommit:
            await connection.set_autocommit(False)
        return connection

    async def ensure_schema(self) -> None:
        """Creates the state table if it does not exist (idempotent, safe to race)."""
        connection = await self._connect()
        try:
            await connection.execute(protocol.create_table(self.table))
            await connection.commit()
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            await connection.rollback()  # another worker created it at the same moment
        finally:
            await connection.close()

    async def recover(self) -> Recovery:
        """Start-up (and after any RecoveryNeededError): a fresh producer fences the previous
        instance of this transactional id and keeps its prepared transaction; it is committed
        when the state row committed in the database names it, aborted otherwise."""
        self._recovered = False
        await self._close_producer()
        if self._connection is None or self._connection.closed:
            self._connection = await self._connect()
        else:
            await self._connection.rollback()
        connection = self._connection
        producer = Producer(
            self.bootstrap_servers, transactional_id=self.transactional_id, **self.producer_options
        )
        await producer.start()
        self._producer = producer
        await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        committed, aborted = (
            producer.stats.transactions_committed,
            producer.stats.transactions_aborted,
        )
        try:
            await connection.execute(protocol.insert_row(self.table), (self.transactional_id,))
            cursor = await connection.execute(
                protocol.lock_row(self.table), (self.transactional_id,)
            )
            state = protocol.stored_state(await cursor.fetchone())
            await producer.complete_transaction(state)
            await connection.commit()
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                await connection.rollback()
            raise
        outcome = protocol.recovery_outcome(committed, aborted, producer.stats)
        log.info("dual writer %r recovered: %s", self.transactional_id, outcome.value)
        self._recovered = True
        return outcome

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncUnitOfWork]:
        """One unit of work. Leaving the block normally commits it: prepare the Kafka
        transaction, store its state in the database transaction, COMMIT, complete. An
        exception in the block (or a failure before COMMIT) rolls back both and is re-raised."""
        connection, producer = self._ready()
        try:
            cursor = await connection.execute(
                protocol.lock_row(self.table), (self.transactional_id,)
            )
            if await cursor.fetchone() is None:
                raise protocol.missing_row(self.transactional_id)
            producer.begin_transaction()
        except BaseException:
            await self._abort(connection, producer, prepared=False)
            raise
        prepared = False
        try:
            yield AsyncUnitOfWork(connection, producer)
            self._step(Step.BEFORE_PREPARE)
            state = await producer.prepare_transaction()
            prepared = True
            self._step(Step.AFTER_PREPARE)
            await connection.execute(
                protocol.store_state(self.table),
                (state.producer_id, state.epoch, self.transactional_id),
            )
            self._step(Step.BEFORE_DB_COMMIT)
        except BaseException:
            await self._abort(connection, producer, prepared=prepared)
            raise
        await self._commit(connection, producer, state)

    async def _commit(
        self, connection: AsyncConnection, producer: Producer, state: PreparedTxnState
    ) -> None:
        try:
            await connection.commit()
        except psycopg.Error as exc:
            if connection.closed:
                self._recovered = False
                raise CommitOutcomeUnknownError(
                    f"the database connection broke during COMMIT: {exc}"
                ) from exc
            await self._abort(connection, producer, prepared=True)  # the server refused it
            raise
        self._step(Step.AFTER_DB_COMMIT)
        try:
            await producer.complete_transaction(state)
        except KafkaError as exc:
            self._recovered = False
            raise CompletionPendingError(
                f"committed in the database; completing {state} failed: {exc}"
            ) from exc
        self._step(Step.AFTER_COMPLETE)

    async def _abort(
        self, connection: AsyncConnection, producer: Producer, *, prepared: bool
    ) -> None:
        """Rolls back the database first (a rolled-back unit can never be decided), then aborts
        the Kafka transaction; what cannot be undone now is left to recover()."""
        try:
            await connection.rollback()
        except psycopg.Error as exc:
            log.warning("rollback failed (the server rolls back a broken session): %s", exc)
            self._recovered = False
        try:
            if prepared:
                await producer.complete_transaction(NO_TRANSACTION)
            else:
                await producer.abort_transaction()
        except KafkaError as exc:
            log.warning("aborting the Kafka transaction failed; recover() will: %s", exc)
            self._recovered = False

    def _ready(self) -> tuple[AsyncConnection, Producer]:
        connection, producer = self._connection, self._producer
        if not self._recovered or connection is None or producer is None or connection.closed:
            raise RecoveryNeededError(f"dual writer {self.transactional_id!r}: call recover()")
        return connection, producer

    def _step(self, step: Step) -> None:
        if self.on_step is not None:
            self.on_step(step)

    @property
    def producer(self) -> Producer | None:
        return self._producer

    async def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await producer.close()

    async def close(self) -> None:
        self._recovered = False
        await self._close_producer()
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

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
