# The blocking dual writer: psycopg's Connection and lockgate.client.sync.Producer (whose
# asyncio producer runs on a thread of its own). It is aio.py line for line with the blocking
# calls: change both together. The recipe and its invariants are in protocol.py.
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

import psycopg
from psycopg.abc import Params, QueryNoTemplate
from psycopg.rows import TupleRow

from lockgate.client.errors import KafkaError
from lockgate.client.sync import DeliveryCallback, Producer
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

Connection = psycopg.Connection[TupleRow]
Connect = Callable[[], Connection]
CLOSE_SECONDS = 5.0


class UnitOfWork:
    """What the application writes in one unit: rows through `execute` (or `connection`, inside
    the database transaction) and records through `send`."""

    def __init__(self, connection: Connection, producer: Producer) -> None:
        self.connection = connection
        self.producer = producer

    def execute(self, query: QueryNoTemplate, params: Params | None = None) -> psycopg.Cursor[Any]:
        return self.connection.execute(query, params)

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        *,
        partition: int = -1,
        headers: Mapping[str, bytes | None] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queues a record of the unit's Kafka transaction; a failed delivery fails the unit
        (at prepare) whether or not `on_delivery` is given."""
        self.producer.produce(
            topic, value, key, partition, on_delivery=on_delivery, headers=headers
        )


class DualWriter:
    """Writes rows to PostgreSQL and records to lockgate atomically, one unit at a time.

    `database` is a libpq conninfo string or a function returning a new Connection.
    `producer_options` go to lockgate.client.producer.Producer (keyword names)."""

    def __init__(
        self,
        database: str | Connect,
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
        self._connection: Connection | None = None
        self._producer: Producer | None = None
        self._recovered = False

    def _connect(self) -> Connection:
        if isinstance(self.database, str):
            return psycopg.Connection.connect(self.database)
        connection = self.database()
        connection.autocommit = False
        return connection

    def ensure_schema(self) -> None:
        """Creates the state table if it does not exist (idempotent, safe to race)."""
        connection = self._connect()
        try:
            connection.execute(protocol.create_table(self.table))
            connection.commit()
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            connection.rollback()  # another worker created it at the same moment
        finally:
            connection.close()

    def recover(self) -> Recovery:
        """Start-up (and after any RecoveryNeededError): a fresh producer fences the previous
        instance of this transactional id and keeps its prepared transaction; it is committed
        when the state row committed in the database names it, aborted otherwise."""
        self._recovered = False
        self._close_producer()
        if self._connection is None or self._connection.closed:
            self._connection = self._connect()
        else:
            self._connection.rollback()
        connection = self._connection
        producer = Producer(
            {"bootstrap.servers": self.bootstrap_servers},
            transactional_id=self.transactional_id,
            **self.producer_options,
        )
        self._producer = producer
        producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        stats = producer.asyncio_producer.stats
        committed, aborted = stats.transactions_committed, stats.transactions_aborted
        try:
            connection.execute(protocol.insert_row(self.table), (self.transactional_id,))
            cursor = connection.execute(protocol.lock_row(self.table), (self.transactional_id,))
            producer.complete_transaction(protocol.stored_state(cursor.fetchone()))
            connection.commit()
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                connection.rollback()
            raise
        outcome = protocol.recovery_outcome(committed, aborted, stats)
        log.info("dual writer %r recovered: %s", self.transactional_id, outcome.value)
        self._recovered = True
        return outcome

    @contextlib.contextmanager
    def transaction(self) -> Iterator[UnitOfWork]:
        """One unit of work. Leaving the block normally commits it: prepare the Kafka
        transaction, store its state in the database transaction, COMMIT, complete. An
        exception in the block (or a failure before COMMIT) rolls back both and is re-raised."""
        connection, producer = self._ready()
        try:
            cursor = connection.execute(protocol.lock_row(self.table), (self.transactional_id,))
            if cursor.fetchone() is None:
                raise protocol.missing_row(self.transactional_id)
            producer.begin_transaction()
        except BaseException:
            self._abort(connection, producer, prepared=False)
            raise
        prepared = False
        try:
            yield UnitOfWork(connection, producer)
            self._step(Step.BEFORE_PREPARE)
            state = producer.prepare_transaction()
            prepared = True
            self._step(Step.AFTER_PREPARE)
            connection.execute(
                protocol.store_state(self.table),
                (state.producer_id, state.epoch, self.transactional_id),
            )
            self._step(Step.BEFORE_DB_COMMIT)
        except BaseException:
            self._abort(connection, producer, prepared=prepared)
            raise
        self._commit(connection, producer, state)

    def _commit(self, connection: Connection, producer: Producer, state: PreparedTxnState) -> None:
        try:
            connection.commit()
        except psycopg.Error as exc:
            if connection.closed:
                self._recovered = False
                raise CommitOutcomeUnknownError(
                    f"the database connection broke during COMMIT: {exc}"
                ) from exc
            self._abort(connection, producer, prepared=True)  # the server refused it
            raise
        self._step(Step.AFTER_DB_COMMIT)
        try:
            producer.complete_transaction(state)
        except KafkaError as exc:
            self._recovered = False
            raise CompletionPendingError(
                f"committed in the database; completing {state} failed: {exc}"
            ) from exc
        self._step(Step.AFTER_COMPLETE)

    def _abort(self, connection: Connection, producer: Producer, *, prepared: bool) -> None:
        """Rolls back the database first (a rolled-back unit can never be decided), then aborts
        the Kafka transaction; what cannot be undone now is left to recover()."""
        try:
            connection.rollback()
        except psycopg.Error as exc:
            log.warning("rollback failed (the server rolls back a broken session): %s", exc)
            self._recovered = False
        try:
            if prepared:
                producer.complete_transaction(NO_TRANSACTION)
            else:
                producer.abort_transaction()
        except KafkaError as exc:
            log.warning("aborting the Kafka transaction failed; recover() will: %s", exc)
            self._recovered = False

    def _ready(self) -> tuple[Connection, Producer]:
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

    def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaError, TimeoutError):
                producer.close(CLOSE_SECONDS)

    def close(self) -> None:
        self._recovered = False
        self._close_producer()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __enter__(self) -> DualWriter:
        self.recover()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
