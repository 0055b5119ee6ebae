"""Produce (key 0), versions 3–13 (advertised from 0).

Behaviour:
- v0–2 (magic 0/1 message sets) get UNSUPPORTED_VERSION for every partition; they are
  advertised anyway because librdkafka disables compression when Produce v0 is missing.
- acks other than 0, 1, -1: INVALID_REQUIRED_ACKS. acks=0 gets no response at all.
- Unknown topic: created when auto.create.topics.enable is true, else
  UNKNOWN_TOPIC_OR_PARTITION; unknown partition: UNKNOWN_TOPIC_OR_PARTITION; unknown topic
  id (v13): UNKNOWN_TOPIC_ID.
- KIP-359: a CurrentLeaderEpoch tagged field older than the leader's epoch gets
  FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, and nothing is appended.
- The records must be exactly one v2 batch with a valid CRC-32C (CORRUPT_MESSAGE otherwise),
  consistent header counts and no control flag (INVALID_RECORD), at most max.message.bytes
  (MESSAGE_TOO_LARGE). A rejected partition appends nothing; other partitions are unaffected.
- Idempotent batches follow the producer-state rules (INVALID_PRODUCER_EPOCH,
  OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID; an exact
  retry of the latest batch gets its original offset). Transactional batches must belong to
  the producer's open transaction on a partition added to it: INVALID_TXN_STATE (v≤10) or
  TRANSACTION_ABORTABLE (v11+) otherwise, INVALID_PRODUCER_EPOCH for a stale epoch,
  NOT_ENOUGH_REPLICAS (retriable) while the transaction is changing state; v12+ adds the
  partition implicitly (TV2).
- acks=-1 is answered after the data is durable (fsync, group commit) in the default
  durability mode; acks=1 after it is written.
- Cluster mode: only the partition's leader appends (NOT_LEADER_OR_FOLLOWER elsewhere, also
  on a leader whose registration lapsed); acks=-1 into an ISR smaller than
  min.insync.replicas gets NOT_ENOUGH_REPLICAS with nothing appended, and is otherwise
  answered once the high watermark (the ISR's minimum) passes it:
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
  REQUEST_TIMED_OUT after the request's timeout. Unknown topics are not auto-created here
  (Kafka creates them on Metadata only).
- A write that storage refuses (disk full, I/O error, out of file handles) gets
  KAFKA_STORAGE_ERROR for that partition with nothing appended; other partitions and the
  connection are unaffected. A failed fsync answers KAFKA_STORAGE_ERROR to every acks=-1
  waiter of that flush, and the log directory is offline until a restart.
Version notes: v2+ log append time; v5+ log start offset; v8+ error message; v9+ flexible and
lockgate's KIP-359 tag; v13 topic ids.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockgate.coordinator.txn import coordinator as rules
from lockgate.handlers.common import check_leader
from lockgate.handlers.registry import HandlerResult, RawBody, RequestContext, handles
from lockgate.handlers.txn_common import map_abortable
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
from lockgate.protocol.records import BatchHeader, validate_produced_batch
from lockgate.protocol.rewrite import split_records

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

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
class Waits:
    """What a produce's answer waits for: flushes (and durable transaction changes), and in a
    cluster each acks=all partition's high watermark (its answer, per partition)."""

    durable: list[asyncio.Future[None]] = field(default_factory=list)
    replicated: list[tuple[PartitionResult, asyncio.Future[ErrorCode]]] = field(
        default_factory=list
    )


def _verify_transaction(
    ctx: RequestContext,
    transactional_id: str | None,
    partition: tuple[str, int],
    header: BatchHeader,
    pending: list[asyncio.Future[None]],
) -> None:
    """KIP-890: a transactional batch must belong to the producer's open transaction and to a
    partition added to it; Produce v12+ (TV2) adds the partition implicitly."""
    if transactional_id is None:
        raise KafkaProtocolError(
            ErrorCode.invalid_txn_state, "transactional batch without a transactional id"
        )
    coordinator = ctx.broker.transactions
    meta = coordinator.txns.get(transactional_id)
    error = rules.verify_partition(meta, header.producer_id, header.producer_epoch, partition)
    if error == ErrorCode.transaction_abortable and ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION:
        error, durable = coordinator.add_implicitly(
            transactional_id, header.producer_id, header.producer_epoch, partition
        )
        if durable is not None:
            pending.append(durable)
    if error in (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress):
        error = ErrorCode.not_enough_replicas  # retriable for every client version
    elif error == ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    if error:
        raise KafkaProtocolError(
            map_abortable(error, ctx.api_version, 11), f"transaction {transactional_id!r}"
        )


def _append(
    ctx: RequestContext,
    request: ProduceRequestData,
    topic_name: str,
    data: ProducePartition,
    waits: Waits,
) -> PartitionResult:
    broker = ctx.broker
    result = PartitionResult(data.index)
    partition = broker.topics.get(topic_name, data.index)
    if partition is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
    result.log_start_offset = partition.log_start_offset
    check_leader(partition, data.current_leader_epoch)
    if broker.replicas is not None:
        broker.replicas.check_append(partition, request.acks)
    records = data.records
    if records is None:
        raise KafkaProtocolError(ErrorCode.invalid_record, "null records")
    config = partition.config
    if len(records) > config.max_message_bytes:
        raise KafkaProtocolError(
            ErrorCode.message_too_large,
            f"batch of {len(records)} bytes exceeds max.message.bytes",
        )
    header = validate_produced_batch(records)
    if config.compact:
        _require_keys(records)
    if header.is_transactional:
        _verify_transaction(
            ctx, request.transactional_id, (topic_name, data.index), header, waits.durable
        )
    base_offset, append_time = partition.append(bytearray(records), header, ctx.received_ms)
    _wait_for(broker, partition, request.acks, result, waits)
    result.base_offset = base_offset
    result.log_append_time_ms = append_time
    return result


def _wait_for(
    broker: Broker, partition: Partition, acks: int, result: PartitionResult, waits: Waits
) -> None:
    """The flush covering the partition's end, and in a cluster its ISR's (acks=all)."""
    waits.durable.append(broker.group_commit.appended(partition))
    if broker.replicas is not None and acks == -1:
        end = partition.log_end_offset
        waits.replicated.append((result, broker.replicas.acknowledged(partition, end)))


def _require_keys(records: bytes) -> None:
    """A compacted topic keeps the latest record per key: a record without one is refused, as
    Kafka does (it would be dropped by the first cleaning)."""
    try:
        keyless = [r.offset_delta for r in split_records(records)[2] if r.key is None]
    except ValueError as exc:
        raise KafkaProtocolError(ErrorCode.corrupt_message, str(exc)) from None
    if keyless:
        raise KafkaProtocolError(
            ErrorCode.invalid_record,
            f"compacted topic cannot accept a record without a key (offset delta {keyless[0]})",
        )


def _topic_name(ctx: RequestContext, topic: ProduceTopic) -> tuple[str | None, ErrorCode]:
    topics = ctx.broker.topics
    if topic.topic_id is not None:
        record = topics.by_id.get(topic.topic_id)
        return (record.name, ErrorCode.none) if record else (None, ErrorCode.unknown_topic_id)
    if topic.name is None:
        return None, ErrorCode.unknown_topic_or_partition
    if topic.name not in topics.topics:
        # a cluster creates topics on Metadata requests only, as Kafka does
        auto_create = ctx.broker.config.flag("auto.create.topics.enable")
        if not auto_create or ctx.broker.cluster is not None:
            return None, ErrorCode.unknown_topic_or_partition
        try:
            topics.create(topic.name, -1, -1, {})
        except KafkaProtocolError as exc:
            return None, exc.code
    return topic.name, ErrorCode.none


def produce(
    ctx: RequestContext, request: ProduceRequestData, waits: Waits
) -> list[tuple[ProduceTopic, list[PartitionResult]]]:
    """Appends every partition's batch (synchronously, before any await, so pipelined requests
    are applied in order) and returns the per-partition results."""
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
    answer = []
    for topic in request.topics:
        results = []
        name, topic_error = (None, request_error) if request_error else _topic_name(ctx, topic)
        for data in topic.partitions:
            if topic_error or name is None:
                results.append(
                    PartitionResult(data.index, topic_error or ErrorCode.unknown_topic_or_partition)
                )
                continue
            try:
                results.append(_append(ctx, request, name, data, waits))
            except KafkaProtocolError as exc:
                if exc.code == ErrorCode.duplicate_sequence_number:
                    # clients count this as delivered: answer only once the original is durable
                    partition = ctx.broker.topics.get(name, data.index)
                    if partition is not None:
                        duplicate = PartitionResult(data.index)  # its wait delays, no more
                        _wait_for(ctx.broker, partition, request.acks, duplicate, waits)
                log.info(
                    "produce to %s-%d from %s (client id %r) rejected: %s",
                    name,
                    data.index,
                    ctx.peer,
                    ctx.client_id,
                    exc,
                )
                results.append(
                    PartitionResult(data.index, exc.code, error_message=exc.message or None)
                )
            except OSError as exc:  # storage's contract: nothing of this batch was appended
                _storage_errors.report(name, data.index, exc)
                results.append(
                    PartitionResult(
                        data.index, ErrorCode.kafka_storage_error, error_message=str(exc)
                    )
                )
        answer.append((topic, results))
    return answer


@handles(ApiKey.PRODUCE, 3, 13, advertised_min=0, decoder=lambda d, o, v: decode_produce(d, o, v))
async def handle(ctx: RequestContext, request: ProduceRequestData) -> HandlerResult:
    waits = Waits()
    answer = produce(ctx, request, waits)
    if request.acks == 0:
        for _result, waiter in waits.replicated:
            waiter.cancel()
        return None
    if request.acks == -1 and waits.replicated:
        await _replicated(waits.replicated, request.timeout_ms)
    if request.acks == -1 and waits.durable:
        outcomes = await asyncio.gather(*waits.durable, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, OSError):
                raise outcome
        if any(isinstance(outcome, OSError) for outcome in outcomes):
            # the flush failed: none of this request's appends may be acknowledged
            for _topic, results in answer:
                for result in results:
                    if result.error_code == 0:
                        result.error_code = ErrorCode.kafka_storage_error
                        result.base_offset = -1
    return RawBody(encode_produce_response(request.version, answer))


async def _replicated(
    waits: list[tuple[PartitionResult, asyncio.Future[ErrorCode]]], timeout_ms: int
) -> None:
    """acks=all in a cluster: each partition's answer once its ISR has the records, or
    REQUEST_TIMED_OUT after the request's timeout (the records stay on the leader's log)."""
    futures = [waiter for _result, waiter in waits]
    _done, late = await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
    for result, waiter in waits:
        if waiter in late:
            waiter.cancel()
            answer: ErrorCode = ErrorCode.request_timed_out
        elif isinstance(exc := waiter.exception(), KafkaProtocolError):
            answer = exc.code
        else:
            answer = waiter.result()
        if answer and result.error_code == 0:
            result.error_code = answer
            result.base_offset = -1
