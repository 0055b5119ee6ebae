# The blocking dual writer: psycopg's Connection and lockgate.client.sync.Producer (whose
# asyncio producer runs on a thread of its own). The steps are core.py's, shared with the
# asyncio writer (aio.py); this module says how to make their calls with the blocking
# connection and producer. The recipe and its invariants are in protocol.py.
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
from lockgate.client.producer import ProducerStats
from lockgate.client.sync import DeliveryCallback, Producer
from lockgate.dualwrite.core import CLOSE_SECONDS, UnitCore, WriterCore, run_blocking
from lockgate.dualwrite.protocol import Recovery

log = logging.getLogger(__name__)

Connection = psycopg.Connection[TupleRow]
Connect = Callable[[], Connection]


class UnitOfWork(UnitCore[Connection, Producer]):
    """What the application writes in one unit: rows through `execute` (or `connection`, inside
    the database transaction) and records through `send`."""

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


class DualWriter(WriterCore[Connection, Producer, Connect]):
    """Writes rows to PostgreSQL and records to lockgate atomically, one unit at a time.

    `database` is a libpq conninfo string or a function returning a new Connection.
    `producer_options` go to lockgate.client.producer.Producer (keyword names). The
    constructor's keywords are WriterCore's (core.py): state_table, producer_options, on_step."""

    _log = log

    def _connect(self) -> Connection:
        if isinstance(self.database, str):
            return psycopg.Connection.connect(self.database)
        connection = self.database()
        connection.autocommit = False
        return connection

    def _open_producer(self) -> Producer:
        return Producer(
            {"bootstrap.servers": self.bootstrap_servers},
            transactional_id=self.transactional_id,
            **self.producer_options,
        )

    def _stats(self, producer: Producer) -> ProducerStats:
        return producer.asyncio_producer.stats

    def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaError, TimeoutError):
                producer.close(CLOSE_SECONDS)

    def ensure_schema(self) -> None:
        """Creates the state table if it does not exist (idempotent, safe to race)."""
        run_blocking(self._ensure_schema_steps())

    def recover(self) -> Recovery:
        """Start-up (and after any RecoveryNeededError): a fresh producer fences the previous
        instance of this transactional id and keeps its prepared transaction; it is committed
        when the state row committed in the database names it, aborted otherwise."""
        return run_blocking(self._recover_steps())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[UnitOfWork]:
        """One unit of work. Leaving the block normally commits it: prepare the Kafka
        transaction, store its state in the database transaction, COMMIT, complete. An
        exception in the block (or a failure before COMMIT) rolls back both and is re-raised."""
        connection, producer = self._ready()
        run_blocking(self._begin_steps(connection, producer))
        try:
            yield UnitOfWork(connection, producer)
        except BaseException:
            run_blocking(self._abort_steps(connection, producer, prepared=False))
            raise
        run_blocking(self._finish_steps(connection, producer))

    def close(self) -> None:
        run_blocking(self._close_steps())

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
