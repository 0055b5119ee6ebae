# The transaction coordinator's rules as pure functions:
#   (metadata or None, request, now) → Outcome(error, metadata to log, answer, markers?)
# No awaits, no sockets, no clocks: the coordinator (coordinator.py) logs the new metadata
# durably, then installs it, then (for PrepareCommit/PrepareAbort) writes markers and completes.
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from lockgate.coordinator.txn.metadata import (
    MAX_EPOCH,
    NO_EPOCH,
    NO_PRODUCER_ID,
    TV2,
    TopicPartition,
    TxnMetadata,
)
from lockgate.coordinator.txn.state import COMPLETE, PREPARING, TxnState
from lockgate.protocol.errors import ErrorCode

AllocateId = Callable[[], int]


@dataclass(frozen=True, slots=True)
class Outcome:
    error: ErrorCode
    transition: TxnMetadata | None = None  # to log durably before answering
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID  # KIP-939: the kept transaction's id/epoch
    ongoing_producer_epoch: int = NO_EPOCH

    @property
    def writes_markers(self) -> bool:
        return self.transition is not None and self.transition.state in PREPARING


def fail(error: ErrorCode) -> Outcome:
    return Outcome(error)


def _epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


# -- InitProducerId --


def init_producer_id(
    meta: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    producer_id: int,
    producer_epoch: int,
    now_ms: int,
    max_timeout_ms: int,
    allocate: AllocateId,
    enable_2pc: bool = False,
    keep_prepared: bool = False,
) -> Outcome:
    """KIP-98 + KIP-360. (-1, -1) is a new instance that fences the old one; a known
    (id, epoch) is a live producer bumping its epoch, and a retry with the epoch it had before
    the last bump gets the same answer again. KIP-939: `keep_prepared` keeps an open
    (prepared) transaction instead of aborting it and hands out the next id/epoch to finish it
    with; `enable_2pc` marks the id's transactions as two-phase (no timeout abort). Whether
    2PC is allowed at all is the caller's check (a broker setting)."""
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_EPOCH):
        return fail(ErrorCode.invalid_request)
    if not 0 < timeout_ms <= max_timeout_ms:
        return fail(ErrorCode.invalid_transaction_timeout)
    if meta is None or meta.state == TxnState.DEAD:
        new = TxnMetadata(
            transactional_id,
            allocate(),
            0,
            timeout_ms,
            TxnState.EMPTY,
            last_update_ms=now_ms,
            two_phase_commit=enable_2pc,
        )
        return Outcome(ErrorCode.none, new, new.producer_id, 0)
    known = (meta.producer_id, meta.prev_producer_id, meta.next_producer_id)
    if producer_id != NO_PRODUCER_ID and producer_id not in known:
        return fail(ErrorCode.producer_fenced)
    if (
        producer_id != NO_PRODUCER_ID
        and producer_id == meta.prev_producer_id
        and not _epoch_exhausted(producer_epoch)
    ):
        # Kafka: the id before a rotation can only be a retry from its exhausted epoch; an
        # older instance of that id must not fence (abort) the new id's transaction
        return fail(ErrorCode.producer_fenced)
    if meta.state in PREPARING or meta.state == TxnState.PREPARE_EPOCH_FENCE:
        return fail(ErrorCode.concurrent_transactions)
    if meta.state == TxnState.ONGOING:
        if (
            producer_id != NO_PRODUCER_ID
            and producer_epoch != meta.producer_epoch
            and producer_id != meta.next_producer_id
        ):
            # a fenced instance (KIP-360 bump with a stale epoch) must not abort the
            # transaction of the instance that fenced it; Kafka would (it checks the id only)
            return fail(ErrorCode.producer_fenced)
        if keep_prepared:
            return _keep_prepared(meta, now_ms, allocate, enable_2pc)
        return _fence_and_abort(meta, now_ms)
    # Empty, CompleteCommit, CompleteAbort
    if producer_id != NO_PRODUCER_ID:
        timed_out = producer_id == meta.producer_id and _timed_out_epoch(meta, producer_epoch)
        is_retry = producer_epoch == meta.last_producer_epoch and producer_id in (
            meta.producer_id,
            meta.prev_producer_id,
        )
        # the epoch the timeout aborter bumped to was never handed out: give it, unless it is
        # the last one, which only a fence may use (then a new producer id, as for a bump)
        if is_retry and not (timed_out and _epoch_exhausted(meta.producer_epoch)):
            return Outcome(ErrorCode.none, None, meta.producer_id, meta.producer_epoch)
        if not timed_out and (
            producer_id != meta.producer_id or producer_epoch != meta.producer_epoch
        ):
            return fail(ErrorCode.producer_fenced)
    # the epoch a retry of this bump carries; after (-1, -1) the epoch before the bump is the
    # fenced instance's, which must not pass for a retry (Kafka records none either)
    last_epoch = producer_epoch if producer_id != NO_PRODUCER_ID else NO_EPOCH
    if _epoch_exhausted(meta.producer_epoch):
        new = meta.to(
            TxnState.EMPTY,
            producer_id=allocate(),
            producer_epoch=0,
            prev_producer_id=(
                meta.prev_producer_id
                if meta.prev_producer_id != NO_PRODUCER_ID
                else meta.producer_id
            ),
            last_producer_epoch=last_epoch,
        )
    else:
        new = meta.to(
            TxnState.EMPTY,
            producer_epoch=meta.producer_epoch + 1,
            prev_producer_id=NO_PRODUCER_ID,
            last_producer_epoch=last_epoch,
        )
    new = replace(_reset(new, timeout_ms, now_ms), two_phase_commit=enable_2pc)
    return Outcome(ErrorCode.none, new, new.producer_id, new.producer_epoch)


def _next_id(producer_id: int, epoch: int, allocate: AllocateId) -> tuple[int, int]:
    """The id/epoch after (producer_id, epoch): the next epoch, or a new id at epoch 0 when the
    next epoch would reach MAX_EPOCH (never handed to a client; markers may use it)."""
    if epoch + 1 >= MAX_EPOCH:
        return allocate(), 0
    return producer_id, epoch + 1


def _keep_prepared(
    meta: TxnMetadata, now_ms: int, allocate: AllocateId, enable_2pc: bool
) -> Outcome:
    """KIP-939: the restarted client gets a fresh id/epoch (NextProducerId/NextProducerEpoch,
    bumped on every such restart) while the prepared transaction keeps its own, reported as
    OngoingTxnProducerId/Epoch; completing it later uses the fresh pair."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        base = (meta.next_producer_id, meta.next_producer_epoch)
    else:
        base = (meta.producer_id, meta.producer_epoch)
    next_id, next_epoch = _next_id(*base, allocate)
    new = meta.to(
        TxnState.ONGOING,
        next_producer_id=next_id,
        next_producer_epoch=next_epoch,
        last_update_ms=now_ms,
        two_phase_commit=meta.two_phase_commit or enable_2pc,
    )
    return Outcome(ErrorCode.none, new, next_id, next_epoch, meta.producer_id, meta.producer_epoch)


def _reset(meta: TxnMetadata, timeout_ms: int, now_ms: int) -> TxnMetadata:
    return replace(
        meta,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
        next_producer_id=NO_PRODUCER_ID,
        next_producer_epoch=NO_EPOCH,
    )


def _fence_and_abort(meta: TxnMetadata, now_ms: int) -> Outcome:
    """A new instance arrived while a transaction is open: bump the epoch (fencing the old
    instance's writes and markers) and abort. The caller retries after CONCURRENT_TRANSACTIONS."""
    fenced = meta.to(TxnState.PREPARE_EPOCH_FENCE)
    epoch = (
        fenced.producer_epoch + 1 if fenced.producer_epoch < MAX_EPOCH else fenced.producer_epoch
    )
    aborting = fenced.to(
        TxnState.PREPARE_ABORT,
        producer_epoch=epoch,
        last_producer_epoch=NO_EPOCH,
        last_update_ms=now_ms,
    )
    return Outcome(ErrorCode.concurrent_transactions, aborting)


# -- AddPartitionsToTxn / AddOffsetsToTxn --


def add_partitions(
    meta: TxnMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
    client_transaction_version: int = 0,
) -> Outcome:
    wanted = frozenset(partitions)
    if _answered_but_preparing(meta, producer_id, producer_epoch):
        return fail(ErrorCode.concurrent_transactions)
    error = _check_producer(meta, producer_id, producer_epoch)
    if error:
        return fail(error)
    if meta is None:  # _check_producer answers for a missing id; this keeps mypy and us honest
        return fail(ErrorCode.invalid_producer_id_mapping)
    if meta.state in PREPARING or meta.state == TxnState.PREPARE_EPOCH_FENCE:
        return fail(ErrorCode.concurrent_transactions)
    if meta.state == TxnState.DEAD:
        return fail(ErrorCode.invalid_producer_id_mapping)
    if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
        return Outcome(ErrorCode.none)
    start = meta.start_ms if meta.state == TxnState.ONGOING else now_ms
    version = max(meta.client_transaction_version, client_transaction_version)
    new = meta.to(
        TxnState.ONGOING,
        partitions=meta.partitions | wanted,
        start_ms=start,
        last_update_ms=now_ms,
        client_transaction_version=version,
        prev_producer_id=NO_PRODUCER_ID,  # Kafka: only right after a rotation
    )
    return Outcome(ErrorCode.none, new)


def verify_partition(
    meta: TxnMetadata | None, producer_id: int, producer_epoch: int, partition: TopicPartition
) -> ErrorCode:
    """KIP-890 part 1: a transactional produce must target a partition of the open transaction."""
    if _answered_but_preparing(meta, producer_id, producer_epoch):
        # the client's first batch under the epoch EndTxn v5 answered, before the markers are
        # written: it must wait (retriable), not be taken for a fenced producer
        return ErrorCode.concurrent_transactions
    error = _check_producer(meta, producer_id, producer_epoch)
    if error:
        return error
    if meta is None:
        return ErrorCode.invalid_producer_id_mapping
    if meta.state != TxnState.ONGOING or partition not in meta.partitions:
        return ErrorCode.transaction_abortable
    return ErrorCode.none


def _answered_but_preparing(
    meta: TxnMetadata | None, producer_id: int, producer_epoch: int
) -> bool:
    """TV2: EndTxn v5 answers with the next id/epoch before the markers are written. A client
    already using a new id from an epoch overflow must be told to wait, like one using the
    bumped epoch of the same id, not that its id is unknown."""
    return (
        meta is not None
        and meta.state in PREPARING
        and meta.next_producer_id != NO_PRODUCER_ID
        and (producer_id, producer_epoch) == (meta.next_producer_id, meta.next_producer_epoch)
    )


def _check_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode:
    if meta is None or producer_id != meta.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if producer_epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    return ErrorCode.none


# -- EndTxn --


def end_txn(
    meta: TxnMetadata | None,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    transaction_version: int,
    allocate: AllocateId,
) -> Outcome:
    """Returns the transition to log (if any) and the answer. Markers are written after it."""
    if meta is None:
        return fail(ErrorCode.invalid_producer_id_mapping)
    if transaction_version >= TV2:
        return _end_txn_v2(meta, producer_id, producer_epoch, commit, now_ms, allocate)
    if producer_id != meta.producer_id:
        return fail(ErrorCode.invalid_producer_id_mapping)
    if producer_epoch != meta.producer_epoch:
        if not commit and _timed_out_epoch(meta, producer_epoch):
            # the abort this producer asks for is the one the timeout aborter did (or is doing)
            return fail(
                ErrorCode.none
                if meta.state == TxnState.COMPLETE_ABORT
                else ErrorCode.concurrent_transactions
            )
        return fail(ErrorCode.producer_fenced)
    target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if meta.state == TxnState.ONGOING:
        return Outcome(ErrorCode.none, meta.to(target, last_update_ms=now_ms))
    if meta.state == done:
        return Outcome(ErrorCode.none)
    if meta.state == target:
        return fail(ErrorCode.concurrent_transactions)
    return fail(ErrorCode.invalid_txn_state)


def _end_txn_v2(
    meta: TxnMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    allocate: AllocateId,
) -> Outcome:
    """TV2: every commit/abort bumps the epoch; the answer names the id/epoch to use next.
    A retry whose first attempt completed (carrying the epoch before the bump, recorded as the
    last epoch, or the id before an exhaustion rotation) is recognised and answered with
    success."""
    target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    # a Complete state at the last epoch comes from a fence (a TV2 bump to it rotates the id):
    # taking the fenced producer's abort for a retry would hand it that epoch, with none left
    # above it for the next transaction's markers
    # the last bump must have been this producer's EndTxn (or the timeout aborter's, which
    # records the epoch too): after a newer instance's fence the old epoch is a zombie's
    retry_of_bump = (
        producer_id == meta.producer_id
        and producer_epoch == meta.producer_epoch - 1
        and producer_epoch == meta.last_producer_epoch
        and not (meta.state in COMPLETE and meta.producer_epoch >= MAX_EPOCH)
    )
    retry_of_rotation = (
        producer_id == meta.prev_producer_id
        and meta.prev_producer_id != NO_PRODUCER_ID
        and _epoch_exhausted(producer_epoch)
    )
    retry_while_preparing = meta.state in PREPARING and (producer_id, producer_epoch + 1) == (
        meta.next_producer_id,
        meta.next_producer_epoch,
    )
    is_retry = retry_of_bump or retry_of_rotation or retry_while_preparing
    if meta.state == TxnState.ONGOING and meta.next_producer_id != NO_PRODUCER_ID:
        return _end_kept(meta, producer_id, producer_epoch, target, now_ms, allocate)
    if _answered_but_preparing(meta, producer_id, producer_epoch):
        return fail(ErrorCode.concurrent_transactions)
    if meta.state in COMPLETE and is_retry:
        if meta.state == done:
            return Outcome(ErrorCode.none, None, meta.producer_id, meta.producer_epoch)
        return fail(ErrorCode.invalid_txn_state)
    if meta.state in PREPARING and is_retry:
        return fail(
            ErrorCode.concurrent_transactions
            if meta.state == target
            else ErrorCode.invalid_txn_state
        )
    if producer_id != meta.producer_id:
        return fail(ErrorCode.invalid_producer_id_mapping)
    if producer_epoch != meta.producer_epoch:
        return fail(ErrorCode.producer_fenced)
    if meta.state in PREPARING or meta.state == TxnState.PREPARE_EPOCH_FENCE:
        return fail(ErrorCode.concurrent_transactions)
    if meta.state != TxnState.ONGOING and commit:
        return fail(ErrorCode.invalid_txn_state)
    if meta.state == TxnState.DEAD:
        return fail(ErrorCode.invalid_producer_id_mapping)
    bumped = meta.producer_epoch + 1
    changes: dict[str, object] = {
        "producer_epoch": bumped,
        "last_update_ms": now_ms,
        "client_transaction_version": TV2,
        "prev_producer_id": NO_PRODUCER_ID,
        "last_producer_epoch": producer_epoch,
    }
    if bumped >= MAX_EPOCH:
        changes["next_producer_id"] = allocate()
        changes["next_producer_epoch"] = 0
    new = meta.to(target, **changes)
    if new.next_producer_id != NO_PRODUCER_ID:
        return Outcome(ErrorCode.none, new, new.next_producer_id, new.next_producer_epoch)
    return Outcome(ErrorCode.none, new, new.producer_id, new.producer_epoch)


def _end_kept(
    meta: TxnMetadata,
    producer_id: int,
    producer_epoch: int,
    target: TxnState,
    now_ms: int,
    allocate: AllocateId,
) -> Outcome:
    """Completing a transaction kept across a client restart (KIP-939): the client speaks with
    the latest id/epoch; markers go out under the transaction's own id with its epoch bumped;
    the answer is the id/epoch after the client's. PrevProducerId remembers the client's id
    when that answer is a new id, so that a retry is recognised."""
    if producer_id != meta.next_producer_id:
        return fail(ErrorCode.invalid_producer_id_mapping)
    if producer_epoch != meta.next_producer_epoch:
        return fail(ErrorCode.producer_fenced)
    next_id, next_epoch = _next_id(producer_id, producer_epoch, allocate)
    new = meta.to(
        target,
        producer_epoch=meta.producer_epoch + 1,
        next_producer_id=next_id,
        next_producer_epoch=next_epoch,
        prev_producer_id=producer_id if next_id != producer_id else NO_PRODUCER_ID,
        last_update_ms=now_ms,
        client_transaction_version=TV2,
    )
    return Outcome(ErrorCode.none, new, next_id, next_epoch)


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """After every marker of a PrepareCommit/PrepareAbort is durable: the Complete state, and
    under TV2 with an exhausted epoch the switch to the next producer id."""
    done = (
        TxnState.COMPLETE_COMMIT
        if meta.state == TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    changes: dict[str, object] = {
        "partitions": frozenset(),
        "last_update_ms": now_ms,
        "start_ms": -1,
    }
    if meta.next_producer_id != NO_PRODUCER_ID:
        changes.update(
            producer_id=meta.next_producer_id,
            producer_epoch=meta.next_producer_epoch,
            prev_producer_id=(
                meta.prev_producer_id
                if meta.prev_producer_id != NO_PRODUCER_ID
                else meta.producer_id
            ),
            next_producer_id=NO_PRODUCER_ID,
            next_producer_epoch=NO_EPOCH,
        )
    return meta.to(done, **changes)


# -- timeouts and expiry --


def abort_if_timed_out(meta: TxnMetadata, now_ms: int) -> TxnMetadata | None:
    """An Ongoing transaction older than its timeout is aborted with an epoch bump, so the
    producer that let it time out is fenced. Unlike a new instance's fence, the bump remembers
    the timed-out epoch as the last one (KIP-588's idea; Kafka records none here): that
    producer's KIP-360 InitProducerId, or its EndTxn(abort), is then recognised and answered
    instead of fenced, so it learns its transaction timed out and goes on. A new instance's
    InitProducerId clears the mark, after which the old epoch is fenced for good."""
    if meta.state != TxnState.ONGOING or now_ms - meta.start_ms <= meta.timeout_ms:
        return None
    if meta.two_phase_commit:
        return None  # KIP-939: only the external transaction manager decides
    aborting = _fence_and_abort(meta, now_ms).transition
    assert aborting is not None
    return replace(aborting, last_producer_epoch=meta.producer_epoch)


def _timed_out_epoch(meta: TxnMetadata, producer_epoch: int) -> bool:
    """Whether `producer_epoch` is the one the timeout aborter fenced, with no new instance
    since (abort_if_timed_out records it; InitProducerId (-1, -1) clears it)."""
    return (
        meta.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        and producer_epoch == meta.last_producer_epoch
        and producer_epoch == meta.producer_epoch - 1
    )


def expire_if_idle(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    idle = meta.state in COMPLETE or meta.state == TxnState.EMPTY
    return idle and now_ms - meta.last_update_ms > expiration_ms
