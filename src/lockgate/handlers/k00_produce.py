"""Produce (key 0), versions 3–13 (advertised from 0).

Behaviour:
- v0–2 (magic 0/1 message sets) get UNSUPPORTED_VERSION for every partition; they are
  advertised anyway because librdkafka disables compression when Produce v0 is missing.
- acks other than 0, 1, -1: INVALID_REQUIRED_ACKS. acks=0 gets no response at all.
- Unknown topic: created when auto.create.topics.enable is true, else
  UNKNOWN_TOPIC_OR_PARTITION (also for an illegal name, as Kafka); unknown partition:
  UNKNOWN_TOPIC_OR_PARTITION; unknown topic id (v13): UNKNOWN_TOPIC_ID.
- KIP-359: a CurrentLeaderEpoch tagged field older than the leader's epoch gets
  FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, and nothing is appended.
- The records must be exactly one v2 batch with a valid CRC-32C (CORRUPT_MESSAGE otherwise),
  consistent header counts and no control flag (INVALID_RECORD), at most max.message.bytes
  (MESSAGE_TOO_LARGE). A rejected partition appends nothing; other partitions are unaffected.
- A CreateTime record further from the broker's clock than message.timestamp.before.max.ms /
  message.timestamp.after.max.ms (1 hour ahead by default, as Kafka 4.4): INVALID_TIMESTAMP;
  a compressed record larger once decompressed than max.decompressed.message.bytes:
  INVALID_RECORD (the record's message is the partition's error_message, lockgate sends no
  record_errors). The order of these checks: log/validator.py.
- A topic whose compression.type names a codec (not `producer`) gets every batch of another
  codec re-encoded with it before the append, header fields kept (protocol/recompress.py);
  inner offsets not running 0..n-1 get INVALID_RECORD, a re-encoded batch over
  max.message.bytes MESSAGE_TOO_LARGE.
- Idempotent batches follow the producer-state rules (INVALID_PRODUCER_EPOCH,
  OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID). A resent batch gets its original base
  offset (and log append time), as in Kafka: the latest one from producer state, an earlier
  one (same epoch, same first and last sequence, up to 1000 behind) looked up in the log
  within a bound (log/duplicates.py); one no longer in the log (retention, compaction,
  DeleteRecords), past the bound or cut differently gets DUPLICATE_SEQUENCE_NUMBER, which
  clients take as delivered without an offset. Either answer waits like an append (acks=-1:
  durable, and in a cluster the high watermark past it). Transactional batches must belong to
  the producer's open transaction on a partition added to it: INVALID_TXN_STATE (v≤10) or
  TRANSACTION_ABORTABLE (v11+) otherwise, INVALID_PRODUCER_EPOCH for a stale epoch; v12+ adds
  the partition implicitly (TV2). A batch arriving while the producer's previous transaction
  still has its markers written here is held until they are (at most the request's timeout;
  the producer's later batches to the partition wait behind it), then checked; a check that
  still cannot pass answers CONCURRENT_TRANSACTIONS for v12+ (as Kafka 4.0+, KAFKA-18662) and
  NOT_ENOUGH_REPLICAS (retriable, no metadata refresh) for older versions. In a cluster whose
  coordinator for the transactional id is another broker, the first batch of a transaction on
  a partition waits while the leader asks that broker (AddPartitionsToTxn v4+, VerifyOnly, or
  adding the partition for v12+, which that broker holds the same way); an unreachable,
  loading or moving coordinator gives NOT_ENOUGH_REPLICAS.
- acks=-1 is answered after the data is durable (fsync, group commit) in the default
  durability mode; acks=1 after it is written.
- Cluster mode: only the partition's leader appends (NOT_LEADER_OR_FOLLOWER elsewhere, also
  on a leader whose registration lapsed); acks=-1 into an ISR smaller than
  min.insync.replicas gets NOT_ENOUGH_REPLICAS with nothing appended, and is otherwise
  answered once the high watermark (the ISR's minimum) passes it:
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
  REQUEST_TIMED_OUT after the request's timeout. Unknown topics are not auto-created here
  (Kafka creates them on Metadata only).
- Client quotas: the request's record bytes count against producer_byte_rate and its handling
  time against request_percentage; past either, the answer carries throttle_time_ms and the
  connection is not read for that long (KIP-219), acks=0 included.
- A write that storage refuses (disk full, I/O error, out of file handles) gets
  KAFKA_STORAGE_ERROR for that partition with nothing appended; other partitions and the
  connection are unaffected. A failed fsync answers KAFKA_STORAGE_ERROR to every acks=-1
  waiter of that flush, and the log directory is offline until a restart.
- Authorization: a transactional produce needs WRITE on the transactional id
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition); every topic needs WRITE
  (TOPIC_AUTHORIZATION_FAILED for its partitions, the others are appended); idempotence needs
  nothing more (KIP-679); auto-creation needs CREATE on the cluster or the topic.
Version notes: v2+ log append time; v5+ log start offset; v8+ error message; v9+ flexible and
lockgate's KIP-359 tag; v13 topic ids.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from lockgate.handlers.common import check_leader
from lockgate.handlers.registry import HandlerResult, RawBody, RequestContext, handles
from lockgate.handlers.txn_common import RETRIABLE_VERIFICATION, map_abortable
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.produce import (
    PartitionResult,
    ProducePartition,
    ProduceRequestData,
    ProduceTopic,
    decode_produce,
    encode_produce_response,
)
from lockgate.protocol.records import BatchHeader
from lockgate.replication import writer as partition_writer
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.quotas import QuotaType, charge

log = logging.getLogger(__name__)

FIRST_IMPLICIT_ADD_VERSION = 12
STORAGE_ERROR_LOG_INTERVAL_S = 10.0


class _StorageErrorLog:
    """One log line per storage error, then at most one per interval with a count: a full
    disk refuses every produce, and one line per request would fill what is left."""

    def __init__(self) -> None:
        self._last = -STORAGE_ERROR_LOG_INTERVAL_S
        self._suppressed = 0

    def report(self, topic: str, index: int, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._last < STORAGE_ERROR_LOG_INTERVAL_S:
            self._suppressed += 1
            return
        log.error(
            "produce to %s-%d: KAFKA_STORAGE_ERROR: %s (%d more storage errors since the last "
            "report)",
            topic,
            index,
            exc,
            self._suppressed,
        )
        self._last = now
        self._suppressed = 0


_storage_errors = _StorageErrorLog()


@dataclass(slots=True)
class Waits(partition_writer.Waits[PartitionResult]):
    """What a produce's answer waits for: the partition writer's waits (flushes, durable
    transaction changes, in a cluster each acks=all partition's high watermark), and the
    batches waiting for a transaction coordinator on another broker (their answer's slot)."""

    deferred: list[tuple[list[PartitionResult], int, asyncio.Task[PartitionResult]]] = field(
        default_factory=list
    )


Outcome = PartitionResult | asyncio.Task[PartitionResult]


def _verify_locally(
    ctx: RequestContext,
    transactional_id: str,
    partition: tuple[str, int],
    header: BatchHeader,
    pending: list[asyncio.Future[None]],
) -> ErrorCode:
    """KIP-890 against this broker's coordinator: a transactional batch must belong to the
    producer's open transaction and to a partition added to it; Produce v12+ (TV2) adds the
    partition implicitly."""
    error, durable = ctx.services.transactions.verify_or_add(
        transactional_id,
        header.producer_id,
        header.producer_epoch,
        partition,
        add=ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION,
    )
    if durable is not None:
        pending.append(durable)
    return error


def _verification(
    ctx: RequestContext,
    request: ProduceRequestData,
    topic_name: str,
    data: ProducePartition,
    partition: Partition,
    header: BatchHeader,
    waits: Waits,
) -> ErrorCode | asyncio.Task[PartitionResult]:
    """The transaction check's answer, or the task appending the batch once it can be checked:
    in a cluster whose coordinator for the id is another broker, once that broker has answered;
    while the producer's previous transaction is still writing its markers here, once they are
    written. Batches already in the producer's open transaction on this partition need no
    question (Kafka's rule); a batch behind a waiting one waits too, to keep their order."""
    transactional_id = request.transactional_id
    if transactional_id is None:
        return ErrorCode.invalid_txn_state
    key = (topic_name, data.index, header.producer_id)

    def later() -> asyncio.Task[PartitionResult]:
        return ctx.services.append_order.in_order(
            key, lambda: _append_when_verified(ctx, request, topic_name, data, header, waits)
        )

    if ctx.services.append_order.waiting(key):
        return later()
    coordinator = ctx.services.transactions
    if coordinator.unavailable(transactional_id) == ErrorCode.not_coordinator:
        return ErrorCode.none if _in_open_transaction(partition, header) else later()
    error = _verify_locally(ctx, transactional_id, (topic_name, data.index), header, waits.durable)
    if error == ErrorCode.concurrent_transactions and coordinator.completing(transactional_id):
        # the previous transaction's markers are being written: hold the batch until they are
        # rather than bounce it, so a chain of transactions never waits on client backoff
        return later()
    return error


def _in_open_transaction(partition: Partition, header: BatchHeader) -> bool:
    entry = partition.producers.get(header.producer_id)
    return (
        header.producer_id in partition.open_txns
        and entry is not None
        and entry.epoch == header.producer_epoch
    )


async def _append_when_verified(
    ctx: RequestContext,
    request: ProduceRequestData,
    topic_name: str,
    data: ProducePartition,
    header: BatchHeader,
    waits: Waits,
) -> PartitionResult:
    """Once the batches ahead of it are appended: asks the coordinator (another broker's, unless
    an earlier batch of the producer opened the transaction here meanwhile; or this broker's
    once the previous transaction's markers are written, bounded by the request's timeout),
    then appends with every check made again."""
    transactional_id = request.transactional_id
    assert transactional_id is not None
    partition = ctx.services.topics.get(topic_name, data.index)
    timeout_s = max(request.timeout_ms, 1000) / 1000
    coordinator = ctx.services.transactions
    if partition is not None and _in_open_transaction(partition, header):
        verified = ErrorCode.none
    elif coordinator.unavailable(transactional_id) == ErrorCode.not_coordinator:
        verified = await ctx.services.verifier.ask(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            (topic_name, data.index),
            add=ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION,
            timeout_s=timeout_s,
        )
    else:
        await coordinator.wait_for_completion(transactional_id, timeout_s)
        verified = _verify_locally(
            ctx, transactional_id, (topic_name, data.index), header, waits.durable
        )
    outcome = _attempt(ctx, request, topic_name, data, waits, verified)
    assert isinstance(outcome, PartitionResult)  # a verified batch is never deferred again
    return outcome


def _transaction_error(error: ErrorCode, version: int) -> ErrorCode:
    """Produce's answer for a failed transaction check, as Kafka 4.0+ maps it (KAFKA-18662):
    what clients retry becomes the retriable NOT_ENOUGH_REPLICAS (no metadata refresh in the
    Java client), except CONCURRENT_TRANSACTIONS to a transaction-version-2 Produce (v12+),
    whose clients know it."""
    if error == ErrorCode.concurrent_transactions and version >= FIRST_IMPLICIT_ADD_VERSION:
        return error
    if error in RETRIABLE_VERIFICATION:
        return ErrorCode.not_enough_replicas
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return map_abortable(error, version, 11)


def _append(
    ctx: RequestContext,
    request: ProduceRequestData,
    topic_name: str,
    data: ProducePartition,
    waits: Waits,
    verified: ErrorCode | None = None,
) -> Outcome:
    services = ctx.services
    result = PartitionResult(data.index)
    partition = services.topics.get(topic_name, data.index)
    if partition is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
    result.log_start_offset = partition.log_start_offset
    check_leader(partition, data.current_leader_epoch)
    writer = services.writer
    records, header = writer.validate(partition, request.acks, data.records, ctx.received_ms)
    if header.is_transactional:
        if verified is None:
            checked = _verification(ctx, request, topic_name, data, partition, header, waits)
            if isinstance(checked, asyncio.Task):
                return checked
            verified = checked
        if verified:
            raise KafkaProtocolError(
                _transaction_error(verified, ctx.api_version),
                f"transaction {request.transactional_id!r}",
            )
    base_offset, append_time = writer.append(
        partition, records, header, ctx.received_ms, request.acks, waits, result
    )
    services.metrics.appended(topic_name, len(records), header.last_offset_delta + 1)
    result.base_offset = base_offset
    result.log_append_time_ms = append_time
    return result


def _topic_name(ctx: RequestContext, topic: ProduceTopic) -> tuple[str | None, ErrorCode]:
    topics = ctx.services.topics
    if topic.topic_id is not None:
        record = topics.by_id.get(topic.topic_id)
        return (record.name, ErrorCode.none) if record else (None, ErrorCode.unknown_topic_id)
    if topic.name is None:
        return None, ErrorCode.unknown_topic_or_partition
    if topic.name not in topics.topics:
        if not ctx.services.produce_creates_topics:
            return None, ErrorCode.unknown_topic_or_partition
        if not may_create_topic(ctx, topic.name):
            return None, ErrorCode.topic_authorization_failed
        try:
            topics.create(topic.name, -1, -1, {})
        except KafkaProtocolError as exc:
            # an illegal name is no topic: Kafka answers a Produce to it as to any missing
            # topic (Metadata is where clients learn INVALID_TOPIC_EXCEPTION)
            if exc.code == ErrorCode.invalid_topic_exception:
                return None, ErrorCode.unknown_topic_or_partition
            return None, exc.code
    return topic.name, ErrorCode.none


def may_create_topic(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic."""
    return authorize(ctx, Operation.CREATE, ResourceType.CLUSTER, log_denied=False) or authorize(
        ctx, Operation.CREATE, ResourceType.TOPIC, name
    )


def _may_write(ctx: RequestContext, topic: ProduceTopic) -> bool:
    name = topic.name
    if topic.topic_id is not None:
        record = ctx.services.topics.by_id.get(topic.topic_id)
        if record is None:  # answered UNKNOWN_TOPIC_ID
            return True
        name = record.name
    return name is None or authorize(ctx, Operation.WRITE, ResourceType.TOPIC, name)


def produce(
    ctx: RequestContext, request: ProduceRequestData, waits: Waits
) -> list[tuple[ProduceTopic, list[PartitionResult]]]:
    """Appends every partition's batch (synchronously, before any await, so pipelined requests
    are applied in order) and returns the per-partition results. A batch waiting for another
    broker's transaction coordinator is appended later (`waits.deferred`), and so are its
    producer's later batches to the partition."""
    version = request.version
    request_error = ErrorCode.none
    if version < 3:
        request_error = ErrorCode.unsupported_version
    elif request.acks not in (0, 1, -1):
        request_error = ErrorCode.invalid_required_acks
    if request_error:
        log.info(
            "produce v%d from %s (client id %r) rejected: %s",
            version,
            ctx.peer,
            ctx.client_id,
            request_error.name,
        )
    authorizer = ctx.services.authorizer  # None: no ACLs to check on this hot path
    if (
        authorizer is not None
        and not request_error
        and request.transactional_id is not None
        and not authorize(
            ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
    ):
        request_error = ErrorCode.transactional_id_authorization_failed
    answer = []
    for topic in request.topics:
        results = []
        if request_error:
            name, topic_error = None, request_error
        elif authorizer is not None and not _may_write(ctx, topic):
            name, topic_error = None, ErrorCode.topic_authorization_failed
        else:
            name, topic_error = _topic_name(ctx, topic)
        for data in topic.partitions:
            if topic_error or name is None:
                results.append(
                    PartitionResult(data.index, topic_error or ErrorCode.unknown_topic_or_partition)
                )
                continue
            outcome = _attempt(ctx, request, name, data, waits)
            if isinstance(outcome, asyncio.Task):
                waits.deferred.append((results, len(results), outcome))
                outcome = PartitionResult(data.index)  # its slot, filled once it is appended
            results.append(outcome)
        answer.append((topic, results))
    return answer


def _attempt(
    ctx: RequestContext,
    request: ProduceRequestData,
    name: str,
    data: ProducePartition,
    waits: Waits,
    verified: ErrorCode | None = None,
) -> Outcome:
    """One partition's append, or its refusal as the partition's answer."""
    try:
        return _append(ctx, request, name, data, waits, verified)
    except KafkaProtocolError as exc:
        if exc.code == ErrorCode.duplicate_sequence_number:
            # the original is no longer in the log (or past the lookup's bound), yet clients
            # count this as delivered: answer only once the original is durable
            partition = ctx.services.topics.get(name, data.index)
            if partition is not None:
                duplicate = PartitionResult(data.index)  # its wait delays, no more
                ctx.services.writer.wait(partition, request.acks, waits, duplicate)
        log.info(
            "produce to %s-%d from %s (client id %r) rejected: %s",
            name,
            data.index,
            ctx.peer,
            ctx.client_id,
            exc,
        )
        return PartitionResult(data.index, exc.code, error_message=exc.message or None)
    except OSError as exc:  # storage's contract: nothing of this batch was appended
        _storage_errors.report(name, data.index, exc)
        return PartitionResult(data.index, ErrorCode.kafka_storage_error, error_message=str(exc))


@handles(ApiKey.PRODUCE, 3, 13, advertised_min=0, decoder=lambda d, o, v: decode_produce(d, o, v))
async def handle(ctx: RequestContext, request: ProduceRequestData) -> HandlerResult:
    started = time.perf_counter()
    waits = Waits()
    answer = produce(ctx, request, waits)
    throttle_ms = 0
    if ctx.services.quotas.kinds:  # client quotas: the request's bytes and handler time
        size = sum(len(p.records or b"") for topic in request.topics for p in topic.partitions)
        busy = time.perf_counter() - started
        throttle_ms = charge(ctx.services.quotas, ctx, QuotaType.PRODUCE, size, busy)
    for results, position, task in waits.deferred:
        results[position] = await task
    if request.acks == 0:
        for _result, waiter in waits.replicated:
            waiter.cancel()
        return None
    if request.acks == -1 and not await ctx.services.writer.acknowledged(
        waits, request.timeout_ms, _refuse
    ):
        # the flush failed: none of this request's appends may be acknowledged
        for _topic, results in answer:
            for result in results:
                _refuse(result, ErrorCode.kafka_storage_error)
    codes = (result.error_code for _topic, results in answer for result in results)
    ctx.services.metrics.partition_errors(ApiKey.PRODUCE, codes)
    return RawBody(encode_produce_response(request.version, answer, throttle_ms))


def _refuse(result: PartitionResult, answer: ErrorCode) -> None:
    """acks=all: the answer of a partition appended without error becomes `answer` when its
    ISR did not take it (or not in time) or its flush failed (its records stay in the log)."""
    if result.error_code == 0:
        result.error_code = answer
        result.base_offset = -1
