# The transaction coordinator at run time: owns every transactional id's metadata, applies the
# pure rules of rules.py with prepare → durable append to __transaction_state → install,
# writes the markers of PrepareCommit/PrepareAbort and completes them, aborts timed-out
# transactions and expires idle ids. Its CoordinatorRuntime (runtime.py) owns the partitions
# of __transaction_state coordinated here, their epochs, loads (until a partition is loaded its
# ids get COORDINATOR_LOAD_IN_PROGRESS) and appends; this coordinator is its shard (the replay of
# the ids' records, the transactions a load resumes, the ids an unload forgets). It has one
# method per transaction API (init_producer_id, add_partitions, add_offsets, end_txn,
# describe, list_transactions, and the transaction check of TxnOffsetCommit): handlers
# decode, authorize, call it and encode.
from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lockgate.coordinator import runtime, writes
from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.log import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from lockgate.coordinator.txn.metadata import (
    NO_EPOCH,
    NO_PRODUCER_ID,
    TV2,
    TopicPartition,
    TxnMetadata,
)
from lockgate.coordinator.txn.state import PREPARING, TxnState
from lockgate.coordinator.txn.verifier import RETRIABLE_VERIFICATION
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    BatchHeader,
    Decoded,
    build_batch,
)
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)


class Markers(Protocol):
    """Writes a decision's markers to its partitions' leaders, this broker among them
    (markers.py's MarkerSender); returns the refusals."""

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tv2: bool,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def close(self) -> None: ...


class Verifier(Protocol):
    """Asks the coordinator of an id another broker coordinates (verifier.py's TxnVerifier)."""

    async def ask(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
        add: bool,
        timeout_s: float,
    ) -> ErrorCode: ...


# Test hook, for crash-recovery tests only: when LOCKGATE_TEST_CRASH_POINT names a point of
# _complete, the broker dies there with os._exit(137), as if killed with SIGKILL. Read once per
# coordinator; unset (always, outside those tests) it has no effect.
CRASH_POINT_VARIABLE = "LOCKGATE_TEST_CRASH_POINT"
CRASH_POINTS = frozenset({"after-prepare", "between-markers", "after-markers"})


@dataclass(frozen=True, slots=True)
class ProducerIdAnswer:
    """InitProducerId's and EndTxn's answer: an error, or the producer id/epoch to use next
    (and, KIP-939, the id/epoch of a transaction kept open across the client's restart)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """ListTransactions' answer: the ids that pass the filters (by id), the state names the
    filter named but no state has, or an error (and then no ids)."""

    error: ErrorCode
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[TxnMetadata] = field(default_factory=list)


class TransactionCoordinator:
    def __init__(
        self,
        topics: TopicManager,
        num_partitions: int,
        max_timeout_ms: int,
        expiration_ms: int,
        allocate: rules.AllocateId,
        write: runtime.Write,
        clock: Callable[[], int],
        on_loaded: Callable[[float], None],
        snapshots: runtime.Snapshots | None,
        markers: Markers,
        verifier: Verifier,
        timers: runtime.Timers,
    ) -> None:
        """`topics` holds __transaction_state (created here on a single node) and the
        partitions the markers go to; `allocate` hands out producer ids; `write` logs a
        record; `on_loaded` is told how long a partition took to load. `snapshots` follows
        the loaded partitions on a single node (None in a cluster: snapshots are a single
        node's, for now). `markers` writes markers to the partitions' leaders and `verifier`
        asks the coordinator of an id this broker does not coordinate (the same on a single
        node, which leads every partition and coordinates every id). `timers` is the root's
        timers port (CoordinatorRuntime)."""
        self.topics = topics
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.allocate = allocate
        self.clock = clock
        self.markers = markers
        self.verifier = verifier
        self.timers = timers  # (its completions' retries wait on them)
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()
        # transactional id → (producer id, epoch, the newest connection that producer's
        # requests came on): see _from_older_connection
        self.connections: dict[str, tuple[int, int, int]] = {}
        # the partitions of __transaction_state coordinated here, their loads and epochs
        loads_at = logging.INFO if snapshots is None else logging.DEBUG
        self.runtime = runtime.CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC,
            topics,
            num_partitions,
            shard=self,
            write=write,
            clock=clock,
            on_loaded=on_loaded,
            snapshots=snapshots,
            timers=timers,
            # a cluster broker (no snapshots) says a partition's load at INFO: its partitions
            # come and go
            voice=runtime.Voice(log, "transaction", "ids", loads_at, loads_at),
        )
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._crash_point = os.environ.get(CRASH_POINT_VARIABLE, "")
        if self._crash_point not in CRASH_POINTS | {""}:
            log.error("ignoring %s=%r: not a crash point", CRASH_POINT_VARIABLE, self._crash_point)
            self._crash_point = ""
        elif self._crash_point:
            log.warning("test hook: will crash at %r of a transaction", self._crash_point)

    # -- the shard: what the runtime's loads and unloads do to the ids ------------------------

    def size(self) -> int:
        """(Shard) The ids held here."""
        return len(self.txns)

    def attach(self, index: int) -> None:
        """(Shard) Nothing to do before a partition's load."""

    def unload(self, index: int) -> int:
        """(Shard) Forgets a partition's ids: their requests get NOT_COORDINATOR, their
        markers are left to the next coordinator (it resumes what was prepared)."""
        gone = [t for t in self.txns if self.runtime.partition_for(t) == index]
        for transactional_id in gone:
            del self.txns[transactional_id]
            self.connections.pop(transactional_id, None)
            task = self._completions.pop(transactional_id, None)
            if task is not None:
                task.cancel()
        return len(gone)

    def replay(self, index: int) -> runtime.Replay:
        """(Shard) A load of one partition: the latest record per id wins (null = expired);
        once loaded, the transactions it left preparing are resumed."""
        replayed: set[str] = set()
        return runtime.Replay(
            functools.partial(self._replay_batch, replayed),
            functools.partial(self._resume, replayed),
        )

    def _resume(self, replayed: set[str]) -> runtime.Loaded:
        resumed = 0
        for transactional_id in replayed:
            meta = self.txns.get(transactional_id)
            if meta is not None and meta.state in PREPARING:
                self._spawn_completion(transactional_id)
                resumed += 1
        return runtime.Loaded(len(replayed), resumed)

    def _replay_batch(
        self, replayed: set[str], header: BatchHeader, _data: bytes, records: Decoded
    ) -> None:
        if header.is_control:
            return
        for _offset, _ts, key, value in records:
            if key is None:
                continue
            try:
                transactional_id = decode_key(key)
                replayed.add(transactional_id)
                if value is None:
                    self.txns.pop(transactional_id, None)
                else:
                    self.txns[transactional_id] = decode_value(transactional_id, value)
            except ValueError as exc:
                log.error("skipping a damaged %s record: %s", TRANSACTION_STATE_TOPIC, exc)

    @property
    def loaded(self) -> bool:
        """Every partition coordinated here is loaded."""
        return self.runtime.loaded

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.runtime.epoch(transactional_id)

    # -- one method per API ---------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
        enable_2pc: bool,
        keep_prepared: bool,
        may_two_phase: Callable[[], bool],
    ) -> ProducerIdAnswer:
        """InitProducerId with a transactional id (rules.init_producer_id). `may_two_phase`
        authorizes two-phase commit (and reports a denial); it is asked only when the request
        takes part in it (KIP-939: Enable2Pc, KeepPreparedTxn, or aborting the id's open
        two-phase transaction), once the id is known to be served here."""
        await self.wait_for_completion(transactional_id)
        if unavailable := self.unavailable(transactional_id):
            return ProducerIdAnswer(unavailable)
        meta = self.txns.get(transactional_id)
        two_phase = (
            enable_2pc
            or keep_prepared
            or (meta is not None and meta.two_phase_commit and meta.state == TxnState.ONGOING)
        )
        if two_phase and not may_two_phase():
            return ProducerIdAnswer(ErrorCode.transactional_id_authorization_failed)
        try:
            outcome = rules.init_producer_id(
                meta,
                transactional_id,
                timeout_ms,
                producer_id,
                producer_epoch,
                now_ms,
                self.max_timeout_ms,
                self.allocate,
                enable_2pc,
                keep_prepared,
            )
        except KafkaProtocolError as exc:  # no producer id could be allocated
            return ProducerIdAnswer(exc.code)
        if error := await self.apply(transactional_id, outcome):
            return ProducerIdAnswer(error)
        return ProducerIdAnswer(
            ErrorCode.none,
            outcome.producer_id,
            outcome.producer_epoch,
            outcome.ongoing_producer_id,
            outcome.ongoing_producer_epoch,
        )

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        now_ms: int,
        client_connection: int | None,
        verify_only: bool = False,
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn: each partition's answer. `client_connection` is the connection
        of a client's request (v0-3); None for a broker's (v4+, KIP-890), whose additions are
        a TV2 produce's implicit ones and which may only verify (`verify_only`)."""
        unknown = {tp for tp in partitions if not self.topics.exists(*tp)}
        if unknown:
            return {
                tp: ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
                for tp in partitions
            }
        await self.wait_for_completion(transactional_id)
        if unavailable := self.unavailable(transactional_id):
            return dict.fromkeys(partitions, unavailable)
        meta = self.txns.get(transactional_id)
        if client_connection is not None:
            producer = (producer_id, producer_epoch, client_connection)
            self._record_connection(transactional_id, *producer)
        if verify_only:
            return {
                tp: rules.verify_partition(meta, producer_id, producer_epoch, tp)
                for tp in partitions
            }
        version = TV2 if client_connection is None else 0
        outcome = rules.add_partitions(
            meta, producer_id, producer_epoch, partitions, now_ms, version
        )
        return dict.fromkeys(partitions, await self.apply(transactional_id, outcome))

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
        connection: int,
    ) -> ErrorCode:
        """AddOffsetsToTxn: adds the group's __consumer_offsets partition to the transaction."""
        await self.wait_for_completion(transactional_id)
        if unavailable := self.unavailable(transactional_id):
            return unavailable
        self._record_connection(transactional_id, producer_id, producer_epoch, connection)
        offsets = self.topics.topics[CONSUMER_OFFSETS_TOPIC]
        partition = (CONSUMER_OFFSETS_TOPIC, partition_for(group_id, offsets.partitions))
        outcome = rules.add_partitions(
            self.txns.get(transactional_id), producer_id, producer_epoch, [partition], now_ms
        )
        return await self.apply(transactional_id, outcome)

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        transaction_version: int,
        connection: int,
        peer: str,
    ) -> ProducerIdAnswer:
        """EndTxn: logs PrepareCommit/PrepareAbort and starts the markers (rules.end_txn).
        Before TV2, a request on a connection older than one the id's producer has since
        used is a delayed copy: INVALID_TXN_STATE, nothing changes."""
        await self.wait_for_completion(transactional_id)
        if unavailable := self.unavailable(transactional_id):
            return ProducerIdAnswer(unavailable)
        # TV2's epoch bump fences a delayed EndTxn; before it, only its connection tells
        producer = (producer_id, producer_epoch, connection)
        if transaction_version < TV2 and self._from_older_connection(transactional_id, *producer):
            log.warning("EndTxn for %r from %s refused: its client has moved to a newer connection "
                        "(a request delayed in the network)", transactional_id, peer)  # fmt: skip
            return ProducerIdAnswer(ErrorCode.invalid_txn_state)
        self._record_connection(transactional_id, *producer)
        try:
            outcome = rules.end_txn(
                self.txns.get(transactional_id),
                producer_id,
                producer_epoch,
                commit,
                now_ms,
                transaction_version,
                self.allocate,
            )
        except KafkaProtocolError as exc:  # epoch exhausted and no new producer id available
            return ProducerIdAnswer(exc.code)
        if error := await self.apply(transactional_id, outcome):
            return ProducerIdAnswer(error)
        return ProducerIdAnswer(ErrorCode.none, outcome.producer_id, outcome.producer_epoch)

    async def check_txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
        add: bool,
        timeout_s: float,
    ) -> ErrorCode:
        """TxnOffsetCommit's transaction check: the group's offsets `partition` must be in the
        producer's open transaction; `add` (v5, TV2) adds it if not. An id coordinated by
        another broker is that broker's answer (COORDINATOR_NOT_AVAILABLE for what may pass
        on another try, as Kafka)."""
        unavailable = self.unavailable(transactional_id)
        if unavailable == ErrorCode.not_coordinator:
            error = await self.verifier.ask(
                transactional_id, producer_id, producer_epoch, partition, add, timeout_s
            )
            if error in RETRIABLE_VERIFICATION:
                error = ErrorCode.coordinator_not_available  # Kafka's answer: clients retry it
            return error
        if unavailable:
            return unavailable
        error, _durable = self.verify_or_add(
            transactional_id, producer_id, producer_epoch, partition, add
        )
        return error

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        """DescribeTransactions: the id's metadata, or NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS or TRANSACTIONAL_ID_NOT_FOUND."""
        if error := self.serving(transactional_id):
            return error
        meta = self.txns.get(transactional_id)
        return ErrorCode.transactional_id_not_found if meta is None else meta

    def list_transactions(
        self,
        state_filters: Collection[str],
        producer_ids: Collection[int],
        min_duration_ms: int,
        id_pattern: str | None,
        now_ms: int,
    ) -> TransactionListing:
        """ListTransactions: the ids in one of the named states (all if none named), of one
        of the producer ids (all if none), open for longer than `min_duration_ms` (unless
        negative) and matching the regular expression `id_pattern` (an invalid one:
        INVALID_REQUEST). Until every partition is loaded: COORDINATOR_LOAD_IN_PROGRESS."""
        if not self.loaded:
            return TransactionListing(ErrorCode.coordinator_load_in_progress)
        wanted_states = {TxnState.from_name(name) for name in state_filters}
        unknown = [name for name in state_filters if TxnState.from_name(name) is None]
        try:
            pattern = re.compile(id_pattern) if id_pattern else None
        except re.error:
            return TransactionListing(ErrorCode.invalid_request, unknown)
        listed = []
        for transactional_id, meta in sorted(self.txns.items()):
            if state_filters and meta.state not in wanted_states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (
                meta.start_ms < 0 or now_ms - meta.start_ms <= min_duration_ms
            ):
                continue
            if pattern is not None and not pattern.fullmatch(transactional_id):
                continue
            listed.append(meta)
        return TransactionListing(ErrorCode.none, unknown, listed)

    # -- applying transitions ------------------------------------------------------------------

    def serving(self, transactional_id: str) -> ErrorCode:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for the id's partition, if so."""
        return self.runtime.serving(transactional_id)

    def _record_connection(
        self, transactional_id: str, producer_id: int, epoch: int, connection: int
    ) -> None:
        """Records the connection a client request of a known id came on (see
        _from_older_connection)."""
        if transactional_id not in self.txns:
            return
        session = self.connections.get(transactional_id)
        if session is None or session[:2] != (producer_id, epoch) or connection > session[2]:
            self.connections[transactional_id] = (producer_id, epoch, connection)

    def _from_older_connection(
        self, transactional_id: str, producer_id: int, epoch: int, connection: int
    ) -> bool:
        """Whether a request of the id's producer (this id and epoch) comes on a connection
        older than one that producer has already used. A client sends an id's coordinator
        requests on one connection at a time, so such a request is one it gave up on, held
        back in the network. Before TV2, an EndTxn of transaction N retried on a new
        connection lets the client start N+1 with the same epoch; the first copy, arriving
        late on the old connection, would end N+1 early, torn (KIP-890's delayed EndTxn).
        Another producer of the id (a zombie, or its successor) is told apart by its epoch."""
        session = self.connections.get(transactional_id)
        return (
            session is not None and session[:2] == (producer_id, epoch) and connection < session[2]
        )

    def unavailable(self, transactional_id: str) -> ErrorCode:
        """Why the id cannot be served now, answered before the rules are even consulted:
        NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, or CONCURRENT_TRANSACTIONS while a
        write of it is in flight; NONE when it can."""
        if serving := self.serving(transactional_id):
            return serving
        if transactional_id in self.pending:
            return ErrorCode.concurrent_transactions
        return ErrorCode.none

    def _append(self, meta: TxnMetadata | None, transactional_id: str) -> asyncio.Future[None]:
        """Appends the record (synchronously: callers must not await before this) and returns
        the future of its commit (CoordinatorRuntime.append)."""
        value = None if meta is None else encode_value(meta)
        batch = build_batch([(encode_key(transactional_id), value)], timestamp_ms=self.clock())
        return self.runtime.append(transactional_id, batch)

    async def apply(self, transactional_id: str, outcome: rules.Outcome) -> ErrorCode:
        """Logs the outcome's transition durably, installs it and starts its markers. Returns
        the error to answer (the outcome's own, or NOT_COORDINATOR if the log write failed)."""
        new = outcome.transition
        if new is None:
            return outcome.error
        epoch = self.coordinator_epoch(transactional_id)
        self.pending.add(transactional_id)
        try:
            await self._append(new, transactional_id)
        except writes.WriteFailure as exc:
            log.error("could not log %s for %r: %s", new.state.display_name, transactional_id, exc)
            return writes.write_error(exc)
        finally:
            self.pending.discard(transactional_id)
        if self.coordinator_epoch(transactional_id) != epoch:
            # moved meanwhile: the new coordinator read this record; the client asks it again
            return ErrorCode.not_coordinator
        self.txns[transactional_id] = new
        if new.state in PREPARING:
            self._spawn_completion(transactional_id)
        return outcome.error

    def add_implicitly(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> tuple[ErrorCode, asyncio.Future[None] | None]:
        """TV2 (Produce v12+): adds the partition inside the produce path, without awaiting, so
        pipelined produces keep their order. The transaction-log record is appended before
        the data and made durable by the same group commit the produce waits for."""
        if unavailable := self.unavailable(transactional_id):
            return unavailable, None
        outcome = rules.add_partitions(
            self.txns.get(transactional_id),
            producer_id,
            producer_epoch,
            [partition],
            self.clock(),
            TV2,
        )
        if outcome.error or outcome.transition is None:
            return outcome.error, None
        try:
            future = self._append(outcome.transition, transactional_id)
        except KafkaProtocolError as exc:
            return writes.write_error(exc), None
        self.txns[transactional_id] = outcome.transition
        return ErrorCode.none, future

    def verify_or_add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
        add: bool,
    ) -> tuple[ErrorCode, asyncio.Future[None] | None]:
        """KIP-890: whether `partition` is in the producer's open transaction; with `add`
        (TV2) a partition not yet in it is added as add_implicitly adds it (the future: the
        commit of that addition's record)."""
        meta = self.txns.get(transactional_id)
        error = rules.verify_partition(meta, producer_id, producer_epoch, partition)
        if error == ErrorCode.transaction_abortable and add:
            return self.add_implicitly(transactional_id, producer_id, producer_epoch, partition)
        return error, None

    def _spawn_completion(self, transactional_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._complete(transactional_id))
        self._completions[transactional_id] = task
        task.add_done_callback(functools.partial(self._completed, transactional_id))

    def _completed(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        if self._completions.get(transactional_id) is task:  # (not a later term's completion)
            del self._completions[transactional_id]

    def completing(self, transactional_id: str) -> bool:
        """Whether the id's last decision is still having its markers written (see
        wait_for_completion)."""
        task = self._completions.get(transactional_id)
        return task is not None and not task.done()

    async def wait_for_completion(self, transactional_id: str, timeout_s: float = 1.0) -> None:
        """Waits (bounded) for the id's markers to be written and its Complete state logged.
        A producer's next request usually arrives right after its commit was answered; waiting
        here spares it a CONCURRENT_TRANSACTIONS round trip and its client-side backoff."""
        task = self._completions.get(transactional_id)
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout_s)

    async def _complete(self, transactional_id: str) -> None:
        """Writes the markers of a prepared decision, waits until they are committed, then
        logs the Complete state. Retried on failures; the Prepare state stays until then (and
        a coordinator elected meanwhile resumes it)."""
        meta = self.txns[transactional_id]
        commit = meta.state == TxnState.PREPARE_COMMIT
        epoch = self.coordinator_epoch(transactional_id)
        self._crash_if_at("after-prepare")
        for attempt in range(1, 1000):
            try:
                await self._write_markers(transactional_id, meta, commit, epoch)
                self._crash_if_at("after-markers")
                done = rules.complete(meta, self.clock())
                self.pending.add(transactional_id)
                try:
                    await self._append(done, transactional_id)
                finally:
                    self.pending.discard(transactional_id)
            except writes.WriteFailure as exc:
                log.error("completing %r failed (attempt %d): %s", transactional_id, attempt, exc)
                await runtime.pause(self.timers, min(attempt, 10))
                continue
            self.txns[transactional_id] = done
            return

    async def _write_markers(
        self, transactional_id: str, meta: TxnMetadata, commit: bool, epoch: int
    ) -> None:
        partitions = sorted(meta.partitions)
        marker = (meta.producer_id, meta.producer_epoch, commit, epoch, meta.tv2)
        if self._crash_point == "between-markers" and len(partitions) > 1:
            # test hook: the first partition's marker is committed, the others unwritten
            await self.markers.write(*marker, partitions[:1])
            self._crash_if_at("between-markers")
        refused = await self.markers.write(*marker, partitions)
        if refused:  # as Kafka: nothing more to do for them (the sender logged why)
            log.warning("markers for %r refused on %s", transactional_id, sorted(refused))

    def _crash_if_at(self, point: str) -> None:
        """Test hook (see CRASH_POINT_VARIABLE): dies here, without any cleanup, if asked to."""
        if self._crash_point == point:
            log.warning("test hook: crashing at %r", point)
            logging.shutdown()
            os._exit(137)

    async def drain(self) -> None:
        """Shutdown: lets in-flight completions finish."""
        if self._completions:
            await asyncio.wait(list(self._completions.values()), timeout=10)
        await self.markers.close()

    # -- periodic work -------------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        aborted = 0
        now = self.clock()
        for transactional_id in list(self.txns):
            # Read the state now, not from a snapshot taken before the loop: each abort below
            # awaits its log write, and meanwhile requests change other ids' transactions (an
            # implicitly added partition missed here would never get its abort marker).
            meta = self.txns.get(transactional_id)
            if meta is None or transactional_id in self.pending:
                continue
            transition = rules.abort_if_timed_out(meta, now)
            if transition is None:
                continue
            log.info("aborting %r: open for longer than %d ms", transactional_id, meta.timeout_ms)
            await self.apply(transactional_id, rules.Outcome(ErrorCode.none, transition))
            aborted += 1
        return aborted

    async def expire_idle(self) -> int:
        now = self.clock()
        expired = []
        for transactional_id in list(self.txns):
            # checked right before its own write: earlier writes await, and the id may have
            # come back to life meanwhile
            meta = self.txns.get(transactional_id)
            if (
                meta is None
                or transactional_id in self.pending
                or not rules.expire_if_idle(meta, now, self.expiration_ms)
            ):
                continue
            expired.append(transactional_id)
            self.pending.add(transactional_id)
            try:
                await self._append(None, transactional_id)
                self.txns.pop(transactional_id, None)
                self.connections.pop(transactional_id, None)
            except writes.WriteFailure as exc:
                log.error("could not expire %r: %s", transactional_id, exc)
            finally:
                self.pending.discard(transactional_id)
        if expired:
            log.info("expired %d idle transactional ids", len(expired))
        return len(expired)
