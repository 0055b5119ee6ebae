# client/transactions.py — the transactional producer's side of the transaction protocol:
# its state machine, finding coordinators, and the coordinator requests (InitProducerId,
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit) with their retries.
#
# Invariants:
# - Every state change goes through `transition`, which refuses moves the table below does
#   not list: an illegal call raises INVALID_TXN_STATE and changes nothing.
# - FATAL_ERROR is final (the producer was fenced by a newer instance, or is not allowed to
#   use the transactional id): every later call raises the error that caused it.
# - In ABORTABLE_ERROR the open transaction can only be aborted; the error that caused it is
#   raised by any other call.
# - An epoch bump inside a transaction (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) is abortable,
#   not fatal, until the abort (or the commit that met it) settles whether the coordinator
#   timed the transaction out (go on) or a newer instance fenced this one (fatal). KIP-939
#   transactions never time out: there a fence is always fatal.
# - Coordinator requests are retried (with backoff, rediscovering the coordinator when told
#   it moved) only while the caller's deadline lasts; CONCURRENT_TRANSACTIONS is retried
#   quickly because it usually only means the previous transaction's markers are being
#   written.
# - Transaction version 2 (KIP-890) is used when the broker finalized `transaction.version`
#   ≥ 2: EndTxn v5 returns the producer id/epoch of the next transaction, and partitions and
#   the offsets partition are added implicitly (Produce v12+, TxnOffsetCommit v5). KIP-939
#   (two-phase commit) needs it.
from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate.client.batches import ProducerIdentity
from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import (
    ErrorCode,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    UnsupportedVersionError,
    error_for,
)
from lockgate.protocol.api import ApiKey

log = logging.getLogger(__name__)

TRANSACTION_VERSION_FEATURE = "transaction.version"
FIRST_TV2_END_TXN = 5
FIRST_TV2_PRODUCE = 12
FIRST_TV2_TXN_OFFSET_COMMIT = 5
FIRST_KIP360_INIT = 3  # InitProducerId carrying the current producer id/epoch
FIRST_KIP939_INIT = 6  # Enable2Pc, KeepPreparedTxn
FIRST_KIP447_TXN_OFFSET_COMMIT = 3  # generation, member id, group instance id
LAST_CLIENT_ADD_PARTITIONS = 3  # v4+ is broker to coordinator
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1

# The quick retry for CONCURRENT_TRANSACTIONS, doubling up to the producer's backoff.
CONCURRENT_TRANSACTIONS_BACKOFF = 0.02

COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
# Errors after which this producer must never be used again.
FATAL = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
    }
)


# The epoch moved under the producer: a newer instance fenced it, or (lockgate's coordinator
# tells the two apart) the coordinator aborted its transaction for running too long.
EPOCH_BUMPED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    PREPARED = "prepared"  # KIP-939: prepared here, or kept from a previous instance
    ABORTABLE_ERROR = "abortable-error"
    FATAL_ERROR = "fatal-error"


_S = TransactionState
LEGAL_PREVIOUS: Mapping[TransactionState, frozenset[TransactionState]] = {
    _S.UNINITIALIZED: frozenset({_S.INITIALIZING}),  # an init that timed out may be retried
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.INITIALIZING}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING, _S.ABORTING}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING: frozenset({_S.IN_TRANSACTION, _S.PREPARED, _S.COMMITTING}),
    _S.ABORTING: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR, _S.PREPARED, _S.ABORTING}),
    _S.PREPARED: frozenset({_S.IN_TRANSACTION, _S.INITIALIZING}),
    _S.ABORTABLE_ERROR: frozenset(
        {_S.IN_TRANSACTION, _S.COMMITTING, _S.PREPARED, _S.ABORTABLE_ERROR}
    ),
    _S.FATAL_ERROR: frozenset(TransactionState),
}


def is_legal(current: TransactionState, target: TransactionState) -> bool:
    return current in LEGAL_PREVIOUS[target]


class TransactionAbortedError(KafkaError):
    """A record that was still queued when its transaction was aborted (never sent)."""

    code = ErrorCode.transaction_abortable


class TransactionTimedOutError(TransactionAbortableError):
    """The coordinator aborted the open transaction because it stayed open longer than
    transaction_timeout_ms, and bumped the producer's epoch; no other instance fenced this
    one. Abortable: abort_transaction() (nothing is sent) and go on with the same producer."""


class ProducerIdExpiredError(InvalidProducerIdMappingError):
    """The coordinator no longer knows this producer's transactional id (it expired after
    transactional.id.expiration.ms idle). Fatal: nothing remembers whether a newer instance
    had fenced this one before the id expired, and a zombie that took a new producer id would
    write again (KAFKA-18019). Nothing of the failed transaction is durable. If this is the
    only instance, close the producer and start a new one with the same id."""


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """KIP-939: the producer id and epoch of a prepared transaction, kept by the external
    transaction manager and handed to complete_transaction after a restart. (-1, -1) means no
    transaction."""

    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_EPOCH

    def to_json(self) -> str:
        return json.dumps({"producer_id": self.producer_id, "epoch": self.epoch})

    @classmethod
    def from_json(cls, text: str) -> PreparedTxnState:
        data = json.loads(text)
        try:
            producer_id, epoch = data["producer_id"], data["epoch"]
        except (KeyError, TypeError):
            raise ValueError(f"not a prepared transaction state: {text!r}") from None
        if not (isinstance(producer_id, int) and isinstance(epoch, int)):
            raise ValueError(f"not a prepared transaction state: {text!r}")
        return cls(producer_id, epoch)

    @property
    def has_transaction(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What TxnOffsetCommit v3+ needs to fence a consumer that left its group (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


@dataclass(slots=True)
class _Transaction:
    """What the open transaction holds, to know whether EndTxn is needed."""

    partitions: set[TopicPartition] = field(default_factory=set)  # in the transaction
    adding: set[TopicPartition] = field(default_factory=set)  # AddPartitionsToTxn was tried
    offsets_sent: bool = False
    kept: bool = False  # KIP-939: kept open from a previous instance


class TransactionManager:
    """The client half of one transactional id. The producer calls it; it owns no records."""

    def __init__(
        self,
        cluster: Cluster,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        transaction_version: int | None,
        retry_backoff_ms: int,
        request_timeout_ms: int,
    ) -> None:
        if transaction_version not in (None, 1, 2):
            raise ValueError(f"transaction_version must be None, 1 or 2, not {transaction_version}")
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.requested_version = transaction_version
        self.retry_backoff = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.state = TransactionState.UNINITIALIZED
        self.identity: ProducerIdentity | None = None
        self.tv2 = False
        self.two_phase_commit = False
        self.error: KafkaError | None = None  # the abortable or fatal error
        self.prepared: PreparedTxnState | None = None
        self.kept_nothing = False  # init_transactions(keep_prepared_txn=True) found none
        # ABORTABLE_ERROR after an epoch bump not yet told apart (see settle_epoch_bump)
        self.epoch_bump_unsettled = False
        # An EndTxn went out and its answer was lost (timeout, connection cut): the request may
        # still reach the coordinator later, so the classic protocol needs a new epoch before
        # the next transaction (see Producer._end_transaction)
        self.end_txn_in_doubt = False
        self.transaction = _Transaction()
        self._coordinators: dict[tuple[int, str], int] = {}

    # ------------------------------------------------------------------------------------------
    # State

    def transition(self, target: TransactionState) -> None:
        if self.state is TransactionState.FATAL_ERROR and target is not self.state:
            self.raise_error()
        if not is_legal(self.state, target):
            if self.state is TransactionState.ABORTABLE_ERROR and self.error is not None:
                self.raise_error()
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {target.value}"
            )
        self.state = target

    def raise_error(self) -> None:
        error = self.error
        assert error is not None
        raise type(error)(error.message)

    def check_sendable(self) -> None:
        """send() is allowed only inside a transaction."""
        if self.state is TransactionState.IN_TRANSACTION:
            return
        if self.state in (TransactionState.FATAL_ERROR, TransactionState.ABORTABLE_ERROR):
            self.raise_error()
        raise InvalidTxnStateError(
            f"cannot send in state {self.state.value}: call begin_transaction() first"
        )

    @property
    def sending_allowed(self) -> bool:
        return self.state is TransactionState.IN_TRANSACTION

    def fail_fatally(self, error: KafkaError) -> None:
        if self.state is not TransactionState.FATAL_ERROR:
            log.warning("transactional id %r: fatal error: %s", self.transactional_id, error)
            self.error = error
            self.state = TransactionState.FATAL_ERROR

    def fail_abortably(self, error: KafkaError) -> None:
        """The open transaction can only be aborted now."""
        if self.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.PREPARED,
        ):
            log.info(
                "transactional id %r: transaction must abort: %s", self.transactional_id, error
            )
            self.error = error
            self.state = TransactionState.ABORTABLE_ERROR

    def fail(self, error: KafkaError) -> None:
        """A request of the open transaction failed with `error`. An epoch bump, fatal in
        Kafka's clients, is abortable here while a transaction is open (not a KIP-939 one,
        which never times out): it may be the coordinator's timeout abort rather than a newer
        instance, which the abort settles. A lost transactional id stays fatal, with an error
        that says so."""
        bumped = error.code in EPOCH_BUMPED and not self.two_phase_commit
        if bumped and self.state in (TransactionState.ABORTABLE_ERROR, TransactionState.ABORTING):
            # more batches of the same transaction, or the abort's own wait for them: the
            # abort settles it (settle_epoch_bump)
            self.epoch_bump_unsettled = True
        elif bumped and self.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
        ):
            self.fail_abortably(
                TransactionAbortableError(
                    f"the producer's epoch was bumped ({error}): the coordinator timed the "
                    "transaction out, or another instance fenced this one; "
                    "abort_transaction() tells which"
                )
            )
            self.epoch_bump_unsettled = True
        elif error.code == ErrorCode.invalid_producer_id_mapping:
            self.fail_fatally(
                ProducerIdExpiredError(
                    f"the coordinator no longer knows transactional id "
                    f"{self.transactional_id!r} (idle past transactional.id.expiration.ms?): "
                    f"{error}; if no other instance runs, start a new producer"
                )
            )
        elif error.code in FATAL:
            self.fail_fatally(error)
        else:
            self.fail_abortably(error)

    def epoch_bump_was_timeout(self) -> None:
        """settle_epoch_bump's happy end: the coordinator had aborted the transaction itself."""
        self.epoch_bump_unsettled = False
        self.transaction = _Transaction()  # already aborted: nothing left to end
        self.error = TransactionTimedOutError(
            f"transactional id {self.transactional_id!r}: the coordinator aborted the "
            f"transaction after transaction_timeout_ms ({self.transaction_timeout_ms} ms)"
        )

    def epoch_bump_was_fence(self, error: KafkaError) -> ProducerFencedError:
        self.epoch_bump_unsettled = False
        fenced = ProducerFencedError(
            f"transactional id {self.transactional_id!r}: fenced by a newer instance "
            f"(or by a broker that cannot tell a timeout from one): {error}"
        )
        self.fail_fatally(fenced)
        return fenced

    def begin(self) -> None:
        self.transition(TransactionState.IN_TRANSACTION)
        self.transaction = _Transaction()
        self.error = None
        self.epoch_bump_unsettled = False
        self.prepared = None
        self.kept_nothing = False

    @property
    def has_anything(self) -> bool:
        """Whether the coordinator may know of the open transaction (EndTxn is needed)."""
        transaction = self.transaction
        return bool(
            transaction.partitions
            or transaction.adding
            or transaction.offsets_sent
            or transaction.kept
        )

    # ------------------------------------------------------------------------------------------
    # Coordinators

    async def coordinator(self, key_type: int, key: str) -> BrokerConnection:
        node_id = self._coordinators.get((key_type, key))
        if node_id is None:
            node_id = await self.cluster.find_coordinator(key_type, key)
            self._coordinators[(key_type, key)] = node_id
        return await self.cluster.connection(node_id)

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    async def call(
        self,
        api_key: ApiKey,
        body: Callable[[int], Mapping[str, Any]],
        errors_of: Callable[[Any], list[ErrorCode]],
        *,
        deadline: float,
        key_type: int = TRANSACTION_KEY_TYPE,
        key: str | None = None,
        min_version: int = 0,
        max_version: int | None = None,
        on_lost_answer: Callable[[], None] | None = None,
    ) -> tuple[Any, int]:
        """Sends a coordinator request until it succeeds, retrying retriable errors until
        `deadline` (loop time). Returns (response, version); raises the first non-retriable
        error, or KafkaTimeoutError with the last retriable one. `on_lost_answer` is called
        when an attempt may have reached the coordinator but its answer did not come back."""
        loop = asyncio.get_running_loop()
        key = self.transactional_id if key is None else key
        last: KafkaError | None = None
        concurrent_backoff = CONCURRENT_TRANSACTIONS_BACKOFF
        for _attempt in range(10_000):  # bounded; the deadline ends it long before
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            backoff = self.retry_backoff
            try:
                async with asyncio.timeout(remaining):
                    connection = await self.coordinator(key_type, key)
                    version = connection.version_for(
                        api_key, min_version=min_version, max_version=max_version
                    )
                    response = await connection.request(api_key, body(version), version=version)
                codes = [c for c in errors_of(response) if c != ErrorCode.none]
                if not codes:
                    return response, version
                code = codes[0]
                # A partial failure reports the real cause alongside OPERATION_NOT_ATTEMPTED.
                for candidate in codes:
                    if candidate != ErrorCode.operation_not_attempted:
                        code = candidate
                        break
                error = error_for(code, None, f"{api_key.name} for {key!r}")
                if code in COORDINATOR_MOVED:
                    self.forget_coordinator(key_type, key)
                elif code == ErrorCode.concurrent_transactions:
                    backoff = concurrent_backoff
                    concurrent_backoff = min(concurrent_backoff * 2, self.retry_backoff)
                elif not error.retriable and code != ErrorCode.operation_not_attempted:
                    raise error
                last = error
            except UnsupportedVersionError:
                raise
            except TimeoutError:
                if on_lost_answer is not None:
                    on_lost_answer()
                break
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                if on_lost_answer is not None:
                    on_lost_answer()
                self.forget_coordinator(key_type, key)
                last = exc
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self.forget_coordinator(key_type, key)
                last = exc
            log.debug("%s for %r: retrying after %s", api_key.name, key, last)
            await asyncio.sleep(max(0.0, min(backoff, deadline - loop.time())))
        raise KafkaTimeoutError(
            f"{api_key.name} for {key!r} did not succeed in time"
            + (f"; last error: {last}" if last is not None else "")
        )

    # ------------------------------------------------------------------------------------------
    # The requests

    async def init_producer_id(
        self,
        *,
        deadline: float,
        current: ProducerIdentity | None,
        enable_2pc: bool = False,
        keep_prepared_txn: bool = False,
    ) -> tuple[ProducerIdentity, PreparedTxnState]:
        """InitProducerId for the transactional id. `current` set: KIP-360 epoch bump of a live
        producer; None: a new instance, which fences the previous one. Returns the identity to
        use and (KIP-939) the ongoing transaction kept for us, (-1, -1) when none."""
        min_version = 0
        if enable_2pc or keep_prepared_txn:
            min_version = FIRST_KIP939_INIT
        elif current is not None:
            min_version = FIRST_KIP360_INIT
        producer_id = NO_PRODUCER_ID if current is None else current.producer_id
        epoch = NO_EPOCH if current is None else current.producer_epoch

        def body(_version: int) -> dict[str, Any]:
            return {
                "transactional_id": self.transactional_id,
                "transaction_timeout": self.transaction_timeout_ms,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "enable2_pc": enable_2pc,
                "keep_prepared_txn": keep_prepared_txn,
            }

        response, _version = await self.call(
            ApiKey.INIT_PRODUCER_ID,
            body,
            lambda r: [r.error_code],
            deadline=deadline,
            min_version=min_version,
        )
        identity = ProducerIdentity(int(response.producer_id), int(response.producer_epoch), True)
        ongoing = PreparedTxnState(
            int(getattr(response, "ongoing_txn_producer_id", NO_PRODUCER_ID)),
            int(getattr(response, "ongoing_txn_producer_epoch", NO_EPOCH)),
        )
        return identity, ongoing

    async def decide_version(self) -> None:
        """Chooses transaction version 2 or the classic protocol from what the coordinator
        advertises, unless the producer was told which to use."""
        connection = await self.coordinator(TRANSACTION_KEY_TYPE, self.transactional_id)
        finalized = connection.finalized_features.get(TRANSACTION_VERSION_FEATURE, 0)
        end_txn = connection.version_range(ApiKey.END_TXN)
        produce = connection.version_range(ApiKey.PRODUCE)
        offsets = connection.version_range(ApiKey.TXN_OFFSET_COMMIT)
        capable = (
            finalized >= 2
            and end_txn is not None
            and end_txn.max >= FIRST_TV2_END_TXN
            and produce is not None
            and produce.max >= FIRST_TV2_PRODUCE
            and offsets is not None
            and offsets.max >= FIRST_TV2_TXN_OFFSET_COMMIT
        )
        if self.requested_version == 2 and not capable:
            raise UnsupportedVersionError(
                f"{connection.address} does not run transaction version 2 "
                f"(transaction.version finalized at {finalized})"
            )
        self.tv2 = capable if self.requested_version is None else self.requested_version == 2

    async def add_partitions(
        self, identity: ProducerIdentity, partitions: Iterable[TopicPartition], deadline: float
    ) -> None:
        """AddPartitionsToTxn v0-3 (the classic protocol, before producing to a partition)."""
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]

        def body(_version: int) -> dict[str, Any]:
            return {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": identity.producer_id,
                "v3_and_below_producer_epoch": identity.producer_epoch,
                "v3_and_below_topics": topics,
            }

        def errors_of(response: Any) -> list[ErrorCode]:
            return [
                p.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]

        await self.call(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            body,
            errors_of,
            deadline=deadline,
            max_version=LAST_CLIENT_ADD_PARTITIONS,
        )

    async def add_offsets(self, identity: ProducerIdentity, group_id: str, deadline: float) -> None:
        """AddOffsetsToTxn (the classic protocol, before TxnOffsetCommit)."""

        def body(_version: int) -> dict[str, Any]:
            return {
                "transactional_id": self.transactional_id,
                "producer_id": identity.producer_id,
                "producer_epoch": identity.producer_epoch,
                "group_id": group_id,
            }

        await self.call(
            ApiKey.ADD_OFFSETS_TO_TXN, body, lambda r: [r.error_code], deadline=deadline
        )

    async def commit_offsets(
        self,
        identity: ProducerIdentity,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
        deadline: float,
    ) -> None:
        """TxnOffsetCommit to the group coordinator; v3+ carries the group metadata (KIP-447),
        v5 adds the offsets partition to the transaction implicitly (TV2)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in sorted(offsets):
            value = offsets[tp]
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": value.offset,
                    "committed_leader_epoch": value.leader_epoch,
                    "committed_metadata": value.metadata,
                }
            )
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]

        def body(_version: int) -> dict[str, Any]:
            return {
                "transactional_id": self.transactional_id,
                "group_id": group.group_id,
                "producer_id": identity.producer_id,
                "producer_epoch": identity.producer_epoch,
                "generation_id": group.generation_id,
                "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": topics,
            }

        def errors_of(response: Any) -> list[ErrorCode]:
            return [p.error_code for t in response.topics for p in t.partitions]

        uses_group = (
            group.generation_id >= 0 or bool(group.member_id) or group.group_instance_id is not None
        )
        await self.call(
            ApiKey.TXN_OFFSET_COMMIT,
            body,
            errors_of,
            deadline=deadline,
            key_type=GROUP_KEY_TYPE,
            key=group.group_id,
            min_version=(
                FIRST_TV2_TXN_OFFSET_COMMIT
                if self.tv2
                else FIRST_KIP447_TXN_OFFSET_COMMIT
                if uses_group
                else 0
            ),
            max_version=None if self.tv2 else FIRST_TV2_TXN_OFFSET_COMMIT - 1,
        )

    def _end_txn_lost(self) -> None:
        self.end_txn_in_doubt = True

    async def end_txn(
        self, identity: ProducerIdentity, commit: bool, deadline: float
    ) -> ProducerIdentity:
        """EndTxn. Returns the identity for the next transaction: the one from EndTxn v5
        under TV2 (the epoch bumped, or a new producer id on exhaustion), else unchanged."""

        def body(_version: int) -> dict[str, Any]:
            return {
                "transactional_id": self.transactional_id,
                "producer_id": identity.producer_id,
                "producer_epoch": identity.producer_epoch,
                "committed": commit,
            }

        response, version = await self.call(
            ApiKey.END_TXN,
            body,
            lambda r: [r.error_code],
            deadline=deadline,
            min_version=FIRST_TV2_END_TXN if self.tv2 else 0,
            max_version=None if self.tv2 else FIRST_TV2_END_TXN - 1,
            on_lost_answer=self._end_txn_lost,
        )
        if version >= FIRST_TV2_END_TXN and int(response.producer_id) >= 0:
            return ProducerIdentity(int(response.producer_id), int(response.producer_epoch), True)
        return identity
