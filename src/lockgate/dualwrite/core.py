# The dual writers' steps, written once for the asyncio writer (aio.py) and the blocking one
# (sync.py): recovery, a unit of work's begin / prepare-store-commit-complete / abort, the
# schema and close. The recipe and its invariants are in protocol.py.
#
# Each step is a generator that does not perform its I/O itself: it yields the calls to make
# (zero-argument functions: a database or producer call) one at a time and receives each one's
# result, or has its exception thrown in at the yield, so its try/except decides as if it had
# made the call. run_blocking() makes the calls; run_async() awaits what they return. The
# writers supply only what differs between the two worlds: how to connect, how to open and
# close a producer, where its counters are, and the shape of a unit of work.
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

import psycopg
from psycopg.rows import TupleRow

from lockgate.client.errors import KafkaError
from lockgate.client.producer import ProducerStats
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


class TransactionalProducer(Protocol):
    """The producer calls the steps make: lockgate's asyncio Producer (its calls return
    awaitables, begin_transaction excepted) and the blocking facade."""

    def init_transactions(self, *, keep_prepared_txn: bool, enable_2pc: bool) -> Any: ...

    def begin_transaction(self) -> None: ...

    def prepare_transaction(self) -> Any: ...

    def complete_transaction(self, state: PreparedTxnState) -> Any: ...

    def abort_transaction(self) -> Any: ...


T = TypeVar("T")
ConnectionT = TypeVar(
    "ConnectionT", psycopg.Connection[TupleRow], psycopg.AsyncConnection[TupleRow]
)
ProducerT = TypeVar("ProducerT", bound=TransactionalProducer)
ConnectT = TypeVar("ConnectT", bound=Callable[[], Any])

# Seconds a writer waits for its producer to close before dropping it.
CLOSE_SECONDS = 5.0

# A call a step wants made: the blocking writer calls it, the asyncio writer awaits its result.
Call = Callable[[], Any]
Steps = Generator[Call, Any, T]


def run_blocking(steps: Steps[T]) -> T:
    """Makes each call `steps` yields and hands it the outcome; returns what `steps` returns."""
    call, done = _advance(steps, (None, None))
    while not done:
        try:
            outcome: tuple[Any, BaseException | None] = (call(), None)
        except BaseException as exc:
            outcome = (None, exc)
        call, done = _advance(steps, outcome)
    return cast(T, call)


async def run_async(steps: Steps[T]) -> T:
    """run_blocking() for the asyncio writer: each call returns an awaitable, awaited here."""
    call, done = _advance(steps, (None, None))
    while not done:
        try:
            outcome: tuple[Any, BaseException | None] = (await call(), None)
        except BaseException as exc:
            outcome = (None, exc)
        call, done = _advance(steps, outcome)
    return cast(T, call)


def _advance(steps: Steps[Any], outcome: tuple[Any, BaseException | None]) -> tuple[Any, bool]:
    """Resumes `steps` with the last call's result or exception: (the next call, False), or
    (the value it returned, True)."""
    result, error = outcome
    try:
        return (steps.send(result) if error is None else steps.throw(error)), False
    except StopIteration as stop:
        return stop.value, True


class UnitCore(Generic[ConnectionT, ProducerT]):
    """What the application writes in one unit: rows through `execute` (or `connection`, inside
    the database transaction) and records through `send`."""

    def __init__(self, connection: ConnectionT, producer: ProducerT) -> None:
        self.connection: ConnectionT = connection
        self.producer: ProducerT = producer


class WriterCore(Generic[ConnectionT, ProducerT, ConnectT]):
    """What both dual writers hold (one database connection, one transactional producer, for
    one transactional id) and the steps they take with it."""

    _log: logging.Logger  # the writer module's logger

    def __init__(
        self,
        database: str | ConnectT,
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
        self._connection: ConnectionT | None = None
        self._producer: ProducerT | None = None
        self._recovered = False

    # What differs between the writers: each returns its result (blocking) or an awaitable.

    def _connect(self) -> Any:
        raise NotImplementedError

    def _open_producer(self) -> Any:
        """A started transactional producer for this writer's id."""
        raise NotImplementedError

    def _close_producer(self) -> Any:
        raise NotImplementedError

    def _stats(self, producer: ProducerT) -> ProducerStats:
        """The producer's counters (transactions committed and aborted)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------

    @property
    def producer(self) -> ProducerT | None:
        return self._producer

    def _ready(self) -> tuple[ConnectionT, ProducerT]:
        connection, producer = self._connection, self._producer
        if not self._recovered or connection is None or producer is None or connection.closed:
            raise RecoveryNeededError(f"dual writer {self.transactional_id!r}: call recover()")
        return connection, producer

    def _step(self, step: Step) -> None:
        if self.on_step is not None:
            self.on_step(step)

    def _ensure_schema_steps(self) -> Steps[None]:
        connection = yield self._connect
        try:
            yield lambda: connection.execute(protocol.create_table(self.table))
            yield connection.commit
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            yield connection.rollback  # another worker created it at the same moment
        finally:
            yield connection.close

    def _recover_steps(self) -> Steps[Recovery]:
        self._recovered = False
        yield self._close_producer
        if self._connection is None or self._connection.closed:
            self._connection = yield self._connect
        else:
            yield self._connection.rollback
        connection = self._connection
        assert connection is not None
        producer = yield self._open_producer
        self._producer = producer
        yield lambda: producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        stats = self._stats(producer)
        committed, aborted = stats.transactions_committed, stats.transactions_aborted
        try:
            yield lambda: connection.execute(
                protocol.insert_row(self.table), (self.transactional_id,)
            )
            cursor = yield lambda: connection.execute(
                protocol.lock_row(self.table), (self.transactional_id,)
            )
            state = protocol.stored_state((yield cursor.fetchone))
            yield lambda: producer.complete_transaction(state)
            yield connection.commit
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                yield connection.rollback
            raise
        outcome = protocol.recovery_outcome(committed, aborted, stats)
        self._log.info("dual writer %r recovered: %s", self.transactional_id, outcome.value)
        self._recovered = True
        return outcome

    def _begin_steps(self, connection: ConnectionT, producer: ProducerT) -> Steps[None]:
        """A unit's start: its state row locked, its Kafka transaction begun."""
        try:
            cursor = yield lambda: connection.execute(
                protocol.lock_row(self.table), (self.transactional_id,)
            )
            if (yield cursor.fetchone) is None:
                raise protocol.missing_row(self.transactional_id)
            producer.begin_transaction()
        except BaseException:
            yield from self._abort_steps(connection, producer, prepared=False)
            raise

    def _finish_steps(self, connection: ConnectionT, producer: ProducerT) -> Steps[None]:
        """After the application's block: prepare, store the state, COMMIT, complete."""
        prepared = False
        try:
            self._step(Step.BEFORE_PREPARE)
            state = yield producer.prepare_transaction
            prepared = True
            self._step(Step.AFTER_PREPARE)
            yield lambda: connection.execute(
                protocol.store_state(self.table),
                (state.producer_id, state.epoch, self.transactional_id),
            )
            self._step(Step.BEFORE_DB_COMMIT)
        except BaseException:
            yield from self._abort_steps(connection, producer, prepared=prepared)
            raise
        yield from self._commit_steps(connection, producer, state)

    def _commit_steps(
        self, connection: ConnectionT, producer: ProducerT, state: PreparedTxnState
    ) -> Steps[None]:
        try:
            yield connection.commit
        except psycopg.Error as exc:
            if connection.closed:
                self._recovered = False
                raise CommitOutcomeUnknownError(
                    f"the database connection broke during COMMIT: {exc}"
                ) from exc
            yield from self._abort_steps(connection, producer, prepared=True)  # refused
            raise
        self._step(Step.AFTER_DB_COMMIT)
        try:
            yield lambda: producer.complete_transaction(state)
        except KafkaError as exc:
            self._recovered = False
            raise CompletionPendingError(
                f"committed in the database; completing {state} failed: {exc}"
            ) from exc
        self._step(Step.AFTER_COMPLETE)

    def _abort_steps(
        self, connection: ConnectionT, producer: ProducerT, *, prepared: bool
    ) -> Steps[None]:
        """Rolls back the database first (a rolled-back unit can never be decided), then aborts
        the Kafka transaction; what cannot be undone now is left to recover()."""
        try:
            yield connection.rollback
        except psycopg.Error as exc:
            self._log.warning("rollback failed (the server rolls back a broken session): %s", exc)
            self._recovered = False
        try:
            if prepared:
                yield lambda: producer.complete_transaction(NO_TRANSACTION)
            else:
                yield producer.abort_transaction
        except KafkaError as exc:
            self._log.warning("aborting the Kafka transaction failed; recover() will: %s", exc)
            self._recovered = False

    def _close_steps(self) -> Steps[None]:
        self._recovered = False
        yield self._close_producer
        connection, self._connection = self._connection, None
        if connection is not None:
            yield connection.close
