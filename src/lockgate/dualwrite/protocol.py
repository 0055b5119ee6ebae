# lockgate.dualwrite's protocol, shared by the asyncio and blocking writers: the steps of a unit
# of work, the state table's SQL, the errors, and what recovery decided. Invariants (the proof
# is in docs/dual-write.md):
# - The database COMMIT is the only decision point. A Kafka transaction is committed only when
#   the state row naming its (producer id, epoch) is committed in the database; every other
#   prepared transaction is aborted.
# - One transactional id per worker, one state row per transactional id; a worker holds its
#   row's lock (SELECT ... FOR UPDATE) from before its first record until its COMMIT, and
#   recovery takes the same lock only after InitProducerId has fenced the previous instance, so
#   a zombie can neither commit rows whose records recovery aborted nor the reverse.
# - A (producer id, epoch) names one transaction only: transaction version 2 bumps the epoch at
#   every commit and abort, so a stored state never matches a later transaction.
from __future__ import annotations

import enum
from collections.abc import Callable

from psycopg import sql

from lockgate.client.transactions import PreparedTxnState

DEFAULT_STATE_TABLE = "lockgate_prepared_txn"
NO_TRANSACTION = PreparedTxnState()  # completing with it aborts whatever was kept
# The writers' producer defaults (the caller's producer_options win). prepare flushes a unit's
# records at once, so lingering only adds latency. A unit's first batch usually arrives while
# the previous unit's markers are still being written and is answered with a retriable error:
# the producer's 100 ms default backoff made prepare take ~100 ms instead of ~8 (bench/README.md).
DEFAULT_PRODUCER_OPTIONS = {"linger_ms": 0, "retry_backoff_ms": 10}


class Step(enum.Enum):
    """The points of a unit of work, in order, as seen by `on_step` hooks (crash tests stop
    the process at each; an application may log or time them)."""

    BEFORE_PREPARE = "before-prepare"  # the application's rows and records are written
    AFTER_PREPARE = "after-prepare"  # the Kafka transaction is prepared (records flushed)
    BEFORE_DB_COMMIT = "before-db-commit"  # the state row is written, not committed
    AFTER_DB_COMMIT = "after-db-commit"  # decided: recovery will commit the Kafka transaction
    AFTER_COMPLETE = "after-complete"  # the Kafka transaction is committed


StepHook = Callable[[Step], None]


class Recovery(enum.Enum):
    """What recover() found and did."""

    NOTHING = "nothing"  # no transaction was left open
    COMMITTED = "committed"  # the database had committed it: its records are now visible
    ABORTED = "aborted"  # the database had not: its records are discarded


class DualWriteError(Exception):
    """The base of this package's errors."""


class RecoveryNeededError(DualWriteError):
    """The writer has not recovered yet, or lost its database connection or its producer:
    call recover() before the next unit of work."""


class CommitOutcomeUnknownError(RecoveryNeededError):
    """The database connection broke during COMMIT: the unit may or may not be committed.
    The Kafka transaction stays prepared; recover() reads the state row and finishes it."""


class CompletionPendingError(RecoveryNeededError):
    """The unit is committed in the database but its Kafka transaction could not be completed
    (broker unreachable): the records become visible when recover() completes it."""


def table_name(name: str) -> sql.Composable:
    """`schema.table` or `table`, each part quoted as an identifier."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"not a table name: {name!r}")
    return sql.Identifier(*parts)


def create_table(table: sql.Composable) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        " transactional_id text PRIMARY KEY,"
        " producer_id bigint NOT NULL DEFAULT -1,"
        " producer_epoch integer NOT NULL DEFAULT -1,"
        " updated_at timestamptz NOT NULL DEFAULT now())"
    ).format(table)


def insert_row(table: sql.Composable) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} (transactional_id) VALUES (%s) ON CONFLICT (transactional_id) DO NOTHING"
    ).format(table)


def lock_row(table: sql.Composable) -> sql.Composed:
    return sql.SQL(
        "SELECT producer_id, producer_epoch FROM {} WHERE transactional_id = %s FOR UPDATE"
    ).format(table)


def store_state(table: sql.Composable) -> sql.Composed:
    return sql.SQL(
        "UPDATE {} SET producer_id = %s, producer_epoch = %s, updated_at = now()"
        " WHERE transactional_id = %s"
    ).format(table)


def stored_state(row: tuple[int, int] | None) -> PreparedTxnState:
    return NO_TRANSACTION if row is None else PreparedTxnState(int(row[0]), int(row[1]))


def missing_row(transactional_id: str) -> DualWriteError:
    return DualWriteError(
        f"no state row for transactional id {transactional_id!r}: was it deleted? recover() "
        "creates it"
    )


def recovery_outcome(committed_before: int, aborted_before: int, stats: object) -> Recovery:
    """From the producer's counters around complete_transaction (a kept transaction is
    committed or aborted; nothing kept changes neither)."""
    if getattr(stats, "transactions_committed", 0) > committed_before:
        return Recovery.COMMITTED
    if getattr(stats, "transactions_aborted", 0) > aborted_before:
        return Recovery.ABORTED
    return Recovery.NOTHING
