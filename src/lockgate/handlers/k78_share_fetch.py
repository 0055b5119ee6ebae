"""ShareFetch (key 78), versions 1–2.

Behaviour (KIP-932; the share-partition leader in share/, sessions in share/sessions.py):
- Top level, in Kafka's order (an error answer has no partitions and lock timeout 0): GroupId
  null: INVALID_REQUEST; no READ on the group: GROUP_AUTHORIZATION_FAILED; MemberId null, empty
  or over 36 characters: INVALID_REQUEST; v2 IsRenewAck with MaxBytes, MinBytes, MaxRecords or
  MaxWaitMs non-zero: INVALID_REQUEST; then the share session keyed by (group, member): epoch
  -1 without a session: SHARE_SESSION_NOT_FOUND; epoch 0 carrying acknowledgements:
  INVALID_REQUEST; epoch 0 with group.share.max.share.sessions sessions of other members:
  SHARE_SESSION_LIMIT_REACHED, after waiting MaxWaitMs; another epoch without a session:
  SHARE_SESSION_NOT_FOUND; not the expected epoch: INVALID_SHARE_SESSION_EPOCH.
- Epoch 0 opens the session with the listed partitions; N adds the listed ones and removes
  ForgottenTopicsData; -1 applies the acknowledgements, fetches nothing, ends the session and
  releases the member's records. A partition listed only to carry acknowledgements joins the
  session (as Kafka).
- Piggy-backed acknowledgements are applied first (AcknowledgeErrorCode per partition, answered
  once their write is durable: share_acks.py for the checks); v2 IsRenewAck fetches nothing.
- The fetch acquires records for the member in each session partition: whole log batches
  (never split or rewritten), AcquiredRecords naming the member's offsets, MaxRecords shared by
  the request (batch_optimized may pass it at a batch boundary; record_limit, v2, never does).
  Records is never null (empty when nothing was acquired). Long polling: waits up to MaxWaitMs
  until something is acquired, woken by new data or records released. Per partition: unknown
  topic id UNKNOWN_TOPIC_ID; no READ on the topic TOPIC_AUTHORIZATION_FAILED; unknown partition
  UNKNOWN_TOPIC_OR_PARTITION; not the leader NOT_LEADER_OR_FOLLOWER; the log directory
  offline KAFKA_STORAGE_ERROR; the share partition's
  load failing: the persister's error as clients see it (share/manager.py). An error is
  answered at once (no long poll). NOT_LEADER_OR_FOLLOWER carries CurrentLeader and the
  leader's address in NodeEndpoints (KIP-951).
- When the session's epoch moved while the fetch waited (another request of the session):
  INVALID_SHARE_SESSION_EPOCH with no partitions.
- An incremental answer (epoch > 0) carries only partitions with records, an error,
  acknowledgements, new to the session, or whose error of the previous answer cleared; epoch 0
  answers every partition.
- AcquisitionLockTimeoutMs: the group's share.record.lock.duration.ms.
- Not checked, as Kafka: that the member belongs to the group or is assigned the partition.
Version notes: v1 adds MaxRecords and BatchSize; v2 ShareAcquireMode and IsRenewAck.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from lockgate.handlers.common import millis, wait_for_any
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_acks import (
    AckOutcome,
    LeaderHints,
    Refusal,
    ack_batches,
    acknowledge_all,
    check_request,
    lock_timeout_ms,
    no_leader,
)
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.share.manager import Fetched, PersistError, RemoteBatches, ShareKey
from lockgate.share.partition import AckBatch
from lockgate.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, next_epoch

PartitionKey = tuple[uuid.UUID, int]


def _refused(refusal: Refusal) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": refusal.code,
        "error_message": refusal.message,
        "acquisition_lock_timeout": 0,
        "responses": [],
        "node_endpoints": [],
    }


def _entry(index: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acknowledge_error_code": ErrorCode.none,
        "acknowledge_error_message": None,
        "current_leader": no_leader(),
        "records": b"",  # never null from v1
        "acquired_records": [],
    }


async def _session(
    ctx: RequestContext, request: Any, listed: list[PartitionKey], has_acks: bool
) -> ShareSession | Refusal:
    """Kafka's newContext: the session this request uses, or the refusal."""
    sessions = ctx.services.share_leader.sessions
    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    session = sessions.get(group, member)
    if epoch == FINAL_EPOCH:
        if session is None:
            return Refusal(ErrorCode.share_session_not_found)
        return session
    if epoch == INITIAL_EPOCH:
        if has_acks:
            return Refusal(
                ErrorCode.invalid_request, "Acknowledgements are not allowed in a new session."
            )
        opened = sessions.open(group, member, ctx.connection, listed)
        if opened is None:
            await asyncio.sleep(millis(request.max_wait) / 1000)  # as Kafka: after MaxWaitMs
            return Refusal(ErrorCode.share_session_limit_reached)
        return opened
    if session is None:
        return Refusal(ErrorCode.share_session_not_found)
    if session.epoch != epoch:
        return Refusal(ErrorCode.invalid_share_session_epoch)
    for key in listed:
        session.partitions.setdefault(key, True)  # new to the session: answered once
    for topic in request.forgotten_topics_data:
        for index in topic.partitions:
            session.partitions.pop((topic.topic_id, index), None)
    session.epoch = next_epoch(session.epoch)
    session.connection = ctx.connection
    return session


def _log_partition(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> Partition | ErrorCode:
    topics = ctx.services.topics
    record = topics.by_id.get(topic_id)
    if record is None:
        return ErrorCode.unknown_topic_id
    if not authorize(ctx, Operation.READ, ResourceType.TOPIC, record.name):
        return ErrorCode.topic_authorization_failed
    if not topics.exists(record.name, index):
        return ErrorCode.unknown_topic_or_partition
    partition = topics.get(record.name, index)
    if partition is None or not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    return partition


async def _fetch(
    ctx: RequestContext, request: Any, session: ShareSession, entries: dict[PartitionKey, Any]
) -> None:
    """Acquires records for the member across the session's partitions, long polling."""
    manager = ctx.services.share_leader
    group = request.group_id
    logs: dict[PartitionKey, Partition] = {}
    for key in list(session.partitions):
        topic_id, index = key
        entry = entries.setdefault(key, _entry(index))
        found = _log_partition(ctx, topic_id, index)
        if isinstance(found, ErrorCode):
            entry["error_code"] = found
            continue
        try:
            await manager.load((group, topic_id, index), found)
        except PersistError as exc:
            entry["error_code"], entry["error_message"] = exc.code, exc.message
            continue
        if key in session.partitions:  # (a concurrent request may have forgotten it)
            logs[key] = found
    # an error is answered at once (as Kafka); the other partitions are still served
    errors = any(entry["error_code"] for entry in entries.values())
    await _serve(ctx, request, session, entries, logs, wait=not errors)


async def _serve(
    ctx: RequestContext,
    request: Any,
    session: ShareSession,
    entries: dict[PartitionKey, Any],
    logs: dict[PartitionKey, Partition],
    wait: bool,
) -> None:
    if not logs:
        return
    manager = ctx.services.share_leader
    group, member = request.group_id, request.member_id
    mode = getattr(request, "share_acquire_mode", 0)
    budget_bytes = min(request.max_bytes, ctx.services.config.integer("fetch.max.bytes"))
    deadline = time.monotonic() + millis(request.max_wait) / 1000
    # served in turn from a place moved at each fetch of the session: no partition starves
    order = list(logs)
    shift = session.fetches % len(order)
    session.fetches += 1
    order = order[shift:] + order[:shift]
    while True:
        records_left = request.max_records
        bytes_left = budget_bytes
        acquired = False
        for key in order:
            if records_left <= 0 or (bytes_left <= 0 and acquired):
                break
            share_key = (group, key[0], key[1])
            log_partition = logs[key]
            if not log_partition.is_leader:  # the leadership moved while the fetch waited
                entries[key]["error_code"] = ErrorCode.not_leader_or_follower
                continue
            try:
                if manager.cached(share_key) is None:  # dropped (fenced) since: loaded again
                    await manager.load(share_key, log_partition)
                remote = await _read_remote(ctx, group, share_key, log_partition, bytes_left)
                if isinstance(remote, ErrorCode):
                    entries[key]["error_code"] = remote
                    continue
                fetched: Fetched = manager.fetch(
                    share_key, member, log_partition, records_left, max(bytes_left, 1),
                    mode=mode, batch_size=request.batch_size, remote=remote,
                )  # fmt: skip
            except (PersistError, KafkaProtocolError) as exc:  # KAFKA_STORAGE_ERROR, ...
                entries[key]["error_code"] = exc.code
                entries[key]["error_message"] = exc.message or None
                continue
            if fetched.acquired:
                acquired = True
                count = sum(r.last_offset - r.first_offset + 1 for r in fetched.acquired)
                records_left -= count
                bytes_left -= len(fetched.records)
                entries[key]["records"] = fetched.records
                entries[key]["acquired_records"] = [
                    {
                        "first_offset": r.first_offset,
                        "last_offset": r.last_offset,
                        "delivery_count": r.delivery_count,
                    }
                    for r in fetched.acquired
                ]
        remaining = deadline - time.monotonic()
        errors = any(entries[key]["error_code"] for key in order)
        if acquired or errors or not wait or remaining <= 0 or request.min_bytes <= 0:
            return
        # until new data is visible in one of the partitions, or records are released
        watched = [p.hw_listeners for p in logs.values()] + [
            manager.available_listeners((group, *key)) for key in logs
        ]
        await wait_for_any(watched, remaining)


async def _read_remote(
    ctx: RequestContext, group: str, share_key: ShareKey, log_partition: Partition,
    bytes_left: int,
) -> RemoteBatches | ErrorCode | None:  # fmt: skip
    """A tiered topic's share partition whose next records are below the local log start:
    they are read from the object store first (None: they are local)."""
    tiered = ctx.services.tiered
    manager = ctx.services.share_leader
    offset = manager.remote_offset(share_key, log_partition) if tiered is not None else None
    if tiered is None or offset is None:
        return None
    wait_ms = ctx.services.config.integer("remote.fetch.max.wait.ms")
    committed = manager.read_committed(group)
    read = await tiered.fetch(log_partition, offset, max(bytes_left, 1), committed, wait_ms)
    return read.error or RemoteBatches(read.records, read.aborted)


def _response(
    ctx: RequestContext,
    group: str,
    entries: dict[PartitionKey, Any],
    shown: list[PartitionKey],
) -> dict[str, Any]:
    grouped: dict[uuid.UUID, list[Any]] = {}
    hints = LeaderHints(ctx)
    for key in shown:
        hints.fill(key[0], key[1], entries[key])
        grouped.setdefault(key[0], []).append(entries[key])
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": lock_timeout_ms(ctx, group),
        "responses": [
            {"topic_id": topic_id, "partitions": partitions}
            for topic_id, partitions in grouped.items()
        ],
        "node_endpoints": hints.node_endpoints(),
    }


def _changed(entry: Any) -> bool:
    return bool(entry["acquired_records"] or entry["error_code"] or entry["acknowledge_error_code"])


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    refusal = check_request(ctx, request)
    if refusal is not None:
        return _refused(refusal)
    renew = ctx.api_version >= 2 and request.is_renew_ack
    if renew and (
        request.max_bytes or request.min_bytes or request.max_records or millis(request.max_wait)
    ):
        return _refused(Refusal(ErrorCode.invalid_request, "Fetch limits must be 0 to renew."))
    listed: list[PartitionKey] = []
    acks: list[tuple[uuid.UUID, int, list[AckBatch]]] = []
    for topic in request.topics:
        for p in topic.partitions:
            listed.append((topic.topic_id, p.partition_index))
            if p.acknowledgement_batches:
                acks.append((topic.topic_id, p.partition_index, ack_batches(p)))
    session = await _session(ctx, request, listed, bool(acks))
    if isinstance(session, Refusal):
        return _refused(session)
    group, member = request.group_id, request.member_id
    entries: dict[PartitionKey, Any] = {}
    outcomes: list[AckOutcome] = await acknowledge_all(ctx, group, member, acks, renew)
    for outcome in outcomes:
        entry = entries.setdefault((outcome.topic_id, outcome.index), _entry(outcome.index))
        entry["acknowledge_error_code"] = outcome.code
        entry["acknowledge_error_message"] = outcome.message
    epoch = request.share_session_epoch
    manager = ctx.services.share_leader
    if epoch == FINAL_EPOCH:
        manager.sessions.remove(session)
        manager.release_session(session)
        return _response(ctx, group, entries, list(entries))
    if not renew:
        expected = session.epoch
        await _fetch(ctx, request, session, entries)
        if manager.sessions.get(group, member) is not session or session.epoch != expected:
            # another request of the session ran meanwhile (as Kafka: what this one acquired
            # stays locked until its locks expire)
            return _refused(Refusal(ErrorCode.invalid_share_session_epoch))
    if epoch == INITIAL_EPOCH:
        shown = list(dict.fromkeys([*session.partitions, *entries]))
        for key in shown:
            entries.setdefault(key, _entry(key[1]))
    else:  # acknowledged partitions are answered too: the client completes their acks
        acknowledged = {(o.topic_id, o.index) for o in outcomes}
        flagged = [k for k, flag in session.partitions.items() if flag] if not renew else []
        for key in flagged:
            entries.setdefault(key, _entry(key[1]))
        shown = [
            k
            for k, entry in entries.items()
            if k in acknowledged or _changed(entry) or k in flagged
        ]
    if not renew:
        for key in session.partitions:  # an error that clears is answered once more
            entry = entries.get(key)
            session.partitions[key] = entry is not None and bool(entry["error_code"])
    by_id = ctx.services.topics.by_id
    ctx.services.metrics.share_fetched(
        (by_id[key[0]].name, len(entries[key]["records"] or b""))
        for key in shown
        if key[0] in by_id and entries[key]["records"]
    )
    return _response(ctx, group, entries, shown)
