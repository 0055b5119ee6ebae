"""Fetch (key 1), versions 4–18.

Behaviour:
- Returns whole batches from the fetch offset up to the high watermark (read_uncommitted) or
  the last stable offset (read_committed), at most partition_max_bytes per partition and
  min(max_bytes, the broker's fetch.max.bytes) overall, except that the first batch of the
  first partition with data is returned whole even if larger (KIP-74), so consumers progress;
  later partitions get nothing rather than an oversized batch.
- Long polling: waits up to max_wait for min_bytes of data, waking when data becomes visible.
- Offsets below the log start or past the log end: OFFSET_OUT_OF_RANGE. Unknown partition:
  UNKNOWN_TOPIC_OR_PARTITION; unknown topic id (v13+): UNKNOWN_TOPIC_ID.
- v9+: CurrentLeaderEpoch older than the leader's → FENCED_LEADER_EPOCH, newer →
  UNKNOWN_LEADER_EPOCH. v12+: LastFetchedEpoch whose history diverges from the leader's gets
  DivergingEpoch (epoch, end offset).
- Fetch sessions (KIP-227, v7+): epoch 0 opens a session, a matching epoch fetches
  incrementally (only changed partitions are answered), -1 closes it; an unknown session gets
  FETCH_SESSION_ID_NOT_FOUND and a wrong epoch INVALID_FETCH_SESSION_EPOCH.
- Authorization: a consumer needs READ on each topic, a follower (replica id >= 0) CLUSTER_ACTION
  on the cluster; TOPIC_AUTHORIZATION_FAILED for the partitions it may not read.
- Client quotas: the answer's encoded size counts against consumer_byte_rate and the reading
  time against request_percentage; past either, the answer carries no data and
  throttle_time_ms, and the connection is not read for that long (KIP-219). A follower's
  fetch (replica id >= 0) is never throttled.
Version notes: v4 adds isolation level and aborted transactions; v5 log start offset;
v7 sessions; v9 current leader epoch; v11 rack id; v12 flexible, diverging epoch; v13 topic ids;
v15 replica id in ReplicaState.
- Cluster mode: a follower's fetch (replica id >= 0) is served by the leader only, up to the
  log end rather than the high watermark; its fetch offset is what the follower has, which
  moves the high watermark and the ISR. Long polling waits for new data at the log end.
- Fetch from follower (KIP-392, v11+ consumers, as Kafka): any replica serves a consumer, a
  follower up to its own high watermark (read_committed: its own last stable offset and
  aborted transactions, tracked as the leader's are); epochs are checked against the epoch
  this replica knows (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); an offset past its log end
  is OFFSET_OUT_OF_RANGE; a broker holding no replica of an existing partition answers
  NOT_LEADER_OR_FOLLOWER. With replica.selector.class set, the leader answers a consumer
  whose rack_id matches another in-sync replica's broker.rack with preferred_read_replica
  and no records, at once (no long poll); an incremental session always carries that answer.
  Consumers older than v11, and followers, are served by the leader only.
- Tiered storage (KIP-405): a consumer's fetch below the local log start offset (and not below
  the log start offset) is read from the object store, after the local reads of the same
  request, within what the budget left (one remote partition per request: Kafka 4.4 reads
  several, docs/deviations.md); read_committed takes its aborted transactions
  from the remote transaction index. A follower below the local log start gets
  OFFSET_MOVED_TO_TIERED_STORAGE. An object store failure is KAFKA_STORAGE_ERROR for that
  partition; a remote read that takes longer than remote.fetch.max.wait.ms is cancelled and
  the partition answered with no records (as Kafka), so a hung store never holds a fetch.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from lockgate.handlers.common import check_epoch, check_leader, field, millis, wait_for_any
from lockgate.handlers.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    PartitionKey,
    SessionPartition,
    next_epoch,
)
from lockgate.handlers.registry import HandlerResult, RawBody, RequestContext, handles
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.fetch import body_size, encode_fetch_response
from lockgate.protocol.file_range import close_ranges
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.quotas import QuotaType, charge

READ_COMMITTED = 1
CONSUMER = -1
NO_PREFERENCE = -1  # preferred_read_replica: stay on this broker
FIRST_CLIENT_METADATA_VERSION = 11  # rack_id: a consumer may read from a follower (KIP-392)


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What Kafka's replica selection knows of a v11+ consumer: its rack (rack_id, empty for
    none) and the listener it came through (the brokers it can reach are those on it)."""

    rack: str
    listener: str


@dataclass(slots=True)
class Wanted:
    key: PartitionKey
    topic: str | None
    topic_id: uuid.UUID | None
    index: int
    state: SessionPartition


def _topic_key(ctx: RequestContext, topic: Any) -> tuple[str, str | None, uuid.UUID | None]:
    """(session key, topic name if known, topic id) of a request topic entry."""
    topic_id = field(topic, "topic_id", None)
    if topic_id is not None and ctx.api_version >= 13:
        record = ctx.services.topics.by_id.get(topic_id)
        return str(topic_id), record.name if record else None, topic_id
    name = topic.topic
    record = ctx.services.topics.topics.get(name)
    return name, name, record.topic_id if record else None


def _requested(ctx: RequestContext, request: Any) -> list[Wanted]:
    wanted = []
    for topic in request.topics:
        key, name, topic_id = _topic_key(ctx, topic)
        for p in topic.partitions:
            state = SessionPartition(
                fetch_offset=p.fetch_offset,
                max_bytes=p.partition_max_bytes,
                current_leader_epoch=field(p, "current_leader_epoch", -1),
                last_fetched_epoch=field(p, "last_fetched_epoch", -1),
                log_start_offset=field(p, "log_start_offset", -1),
            )
            wanted.append(Wanted((key, p.partition), name, topic_id, p.partition, state))
    return wanted


def _resolve(ctx: RequestContext, wanted: Wanted) -> Partition:
    if wanted.topic is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_id)
    topics = ctx.services.topics
    partition = topics.get(wanted.topic, wanted.index)
    if partition is None:
        if topics.exists(wanted.topic, wanted.index):  # its replicas are on other brokers
            raise KafkaProtocolError(ErrorCode.not_leader_or_follower)
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
    return partition


def _replica_id(ctx: RequestContext, request: Any) -> int:
    """The fetching follower's broker id; -1 for a consumer (and on a single node, where a
    fetch naming a replica is read as a consumer's: it has no followers)."""
    replica = _requested_replica(request)
    return replica if ctx.services.followers.is_follower(replica) else CONSUMER


def _client_metadata(ctx: RequestContext, request: Any, replica: int) -> ClientMetadata | None:
    """A v11+ consumer's rack and listener (Kafka's ClientMetadata); None for older consumers
    and for followers, which only a leader serves."""
    if replica != CONSUMER or ctx.api_version < FIRST_CLIENT_METADATA_VERSION:
        return None
    return ClientMetadata(field(request, "rack_id", "") or "", ctx.session.listener)


def _requested_replica(request: Any) -> int:
    """The replica id the request names (in ReplicaState from v15), -1 for a consumer."""
    state = field(request, "replica_state", None)
    return int(state.replica_id if state is not None else field(request, "replica_id", CONSUMER))


def _read(
    ctx: RequestContext,
    wanted: Wanted,
    budget: int,
    isolation: int,
    first: bool,
    replica: int = -1,
    client: ClientMetadata | None = None,
) -> tuple[dict[str, Any], int]:
    """One partition's response entry and the bytes it carries: at most `budget` and the
    partition's own limit, unless it is the `first` partition with data (KIP-74). A follower
    (`replica`) reads up to the log end and tells the leader what it has. A v11+ consumer
    (`client`) reads from any replica, unless the leader sends it to another one."""
    state = wanted.state
    entry = _entry(wanted.index)
    try:
        partition = _resolve(ctx, wanted)
        entry["high_watermark"] = partition.high_watermark
        entry["last_stable_offset"] = partition.last_stable_offset
        entry["log_start_offset"] = partition.log_start_offset
        if client is None:
            check_leader(partition, state.current_leader_epoch)
        else:
            check_epoch(partition, state.current_leader_epoch)
            if partition.is_leader:
                preferred = ctx.services.followers.preferred_read_replica(
                    partition, client.rack, client.listener, state.fetch_offset
                )
                if preferred != NO_PREFERENCE:  # as Kafka: the offsets, and no read
                    entry["preferred_read_replica"] = preferred
                    return entry, 0
        offset = state.fetch_offset
        if state.last_fetched_epoch >= 0:
            epoch, end = partition.epochs.end_offset_for(
                state.last_fetched_epoch, partition.log_end_offset
            )
            if epoch != state.last_fetched_epoch or end < offset:
                entry["diverging_epoch"] = {"epoch": epoch, "end_offset": end}
                return entry, 0
        tiered = ctx.services.tiered
        unknown = tiered is not None and tiered.unknown(partition)  # its remote log not read yet
        if (offset < partition.log_start_offset and not unknown) or (
            offset > partition.log_end_offset
        ):
            raise KafkaProtocolError(ErrorCode.offset_out_of_range)
        if offset < partition.local_log_start_offset:
            if replica != CONSUMER:
                raise KafkaProtocolError(ErrorCode.offset_moved_to_tiered_storage)
            # read after the local partitions (handle), from the object store
            entry["remote"] = (partition, offset)
            return entry, 0
        upper = partition.high_watermark
        if replica != CONSUMER:
            ctx.services.followers.on_follower_fetch(
                partition, replica, offset, state.log_start_offset
            )
            upper = partition.log_end_offset
            entry["high_watermark"] = partition.high_watermark
        elif isolation == READ_COMMITTED:
            upper = partition.last_stable_offset
            entry["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in partition.aborted.overlapping(offset, upper)
            ]
        limit = min(state.max_bytes, budget)
        if limit <= 0 and not first:
            return entry, 0
        # a range of the segment file, sent from there (or read) when the answer is written
        data = partition.read_range(offset, limit, upper)
        if len(data) > limit and not first:
            close_ranges([data])
            data = b""  # an oversized first batch: only the response's first one may be
        entry["records"] = data
        return entry, len(data)
    except KafkaProtocolError as exc:
        entry["error_code"] = exc.code
        return entry, 0


async def _read_remote(
    ctx: RequestContext,
    results: list[tuple[Wanted, dict[str, Any]]],
    budget: int,
    isolation: int,
    first: bool,
) -> int:
    """The reads `_read` left to the object store: the first one gets what the budget left
    (the whole first batch if nothing was read before it, KIP-74); the others answer no
    records this time, as Kafka reads one remote partition per fetch. Returns the bytes."""
    pending = [(w, entry) for w, entry in results if "remote" in entry]
    if not pending:
        return 0
    tiered = ctx.services.tiered
    for _w, entry in pending[1:]:
        del entry["remote"]
    w, entry = pending[0]
    partition, offset = entry.pop("remote")
    if tiered is None:  # (a partition with remote segments has a manager)
        entry["error_code"] = ErrorCode.kafka_storage_error
        return 0
    limit = min(w.state.max_bytes, budget)
    if limit <= 0 and not first:
        return 0
    wait_ms = ctx.services.config.integer("remote.fetch.max.wait.ms")
    read = await tiered.fetch(partition, offset, limit, isolation == READ_COMMITTED, wait_ms)
    entry["error_code"] = read.error
    if read.error or (len(read.records) > limit and not first):
        return 0
    if read.aborted is not None:
        entry["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in read.aborted
        ]
    entry["records"] = read.records
    return len(read.records)


def _changed(entry: dict[str, Any], state: SessionPartition) -> bool:
    return bool(
        entry["records"]
        or entry["error_code"]
        or "diverging_epoch" in entry
        or entry["preferred_read_replica"] != NO_PREFERENCE
        or entry["high_watermark"] != state.sent_high_watermark
        or entry["last_stable_offset"] != state.sent_last_stable_offset
        or entry["log_start_offset"] != state.sent_log_start_offset
    )


def _open_session(
    ctx: RequestContext, request: Any
) -> tuple[list[Wanted], FetchSession | None, int]:
    """Applies the KIP-227 session rules; returns (partitions to fetch, session, error)."""
    cache = ctx.services.fetch_sessions
    session_id = field(request, "session_id", 0)
    epoch = field(request, "session_epoch", FINAL_EPOCH)
    wanted = _requested(ctx, request)
    if epoch == FINAL_EPOCH:
        if session_id:
            cache.remove(session_id)
        return wanted, None, 0
    if epoch == INITIAL_EPOCH:
        if session_id:
            cache.remove(session_id)
        session = cache.create()
        if session is not None:
            session.partitions = {w.key: w.state for w in wanted}
        return wanted, session, 0
    session = cache.get(session_id)
    if session is None:
        return [], None, ErrorCode.fetch_session_id_not_found
    if session.epoch != epoch:
        return [], None, ErrorCode.invalid_fetch_session_epoch
    for w in wanted:
        old = session.partitions.get(w.key)
        if old is not None:
            w.state.sent_high_watermark = old.sent_high_watermark
            w.state.sent_last_stable_offset = old.sent_last_stable_offset
            w.state.sent_log_start_offset = old.sent_log_start_offset
        session.partitions[w.key] = w.state
    for topic in field(request, "forgotten_topics_data", ()):
        key, _name, _id = _topic_key(ctx, topic)
        for index in topic.partitions:
            session.partitions.pop((key, index), None)
    session.epoch = next_epoch(session.epoch)
    by_key = {w.key: w for w in wanted}
    everything = []
    for session_key, state in session.partitions.items():
        known = by_key.get(session_key)
        if known is None:
            topic_key, index = session_key
            name, topic_id = _names_of(ctx, topic_key)
            known = Wanted(session_key, name, topic_id, index, state)
        everything.append(known)
    return everything, session, 0


def _names_of(ctx: RequestContext, key: str) -> tuple[str | None, uuid.UUID | None]:
    if ctx.api_version >= 13:
        try:
            topic_id = uuid.UUID(key)
        except ValueError:
            return None, None
        record = ctx.services.topics.by_id.get(topic_id)
        return (record.name if record else None), topic_id
    record = ctx.services.topics.topics.get(key)
    return key, record.topic_id if record else None


def _response(
    ctx: RequestContext, error: int, session_id: int, topics: list[tuple[Wanted, dict[str, Any]]]
) -> dict[str, Any]:
    grouped: dict[PartitionKey | str, dict[str, Any]] = {}
    for wanted, entry in topics:
        topic_key = wanted.key[0]
        if topic_key not in grouped:
            grouped[topic_key] = {
                "topic": wanted.topic or "",
                "topic_id": wanted.topic_id or uuid.UUID(int=0),
                "partitions": [],
            }
        grouped[topic_key]["partitions"].append(entry)
    return {
        "throttle_time": 0,
        "error_code": error,
        "session_id": session_id,
        "responses": list(grouped.values()),
    }


def _denied_topics(ctx: RequestContext, request: Any, wanted: list[Wanted]) -> set[str]:
    """The topics this fetch may not read: a follower (replica id >= 0) needs CLUSTER_ACTION
    on the cluster for all of them, a consumer READ on each."""
    names = {w.topic for w in wanted if w.topic is not None}
    if _requested_replica(request) >= 0:
        return set() if authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER) else names
    return {name for name in names if not authorize(ctx, Operation.READ, ResourceType.TOPIC, name)}


def _entry(index: int, code: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """A partition's response entry without data (offsets unknown: -1)."""
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


@handles(ApiKey.FETCH, 4, 18)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    wanted, session, error = _open_session(ctx, request)
    if error:
        return _response(ctx, error, 0, [])
    incremental = session is not None and field(request, "session_epoch", 0) > 0
    isolation = request.isolation_level
    min_bytes = request.min_bytes
    deadline = time.monotonic() + millis(request.max_wait) / 1000
    # the broker's cap: a client asking for gigabytes must not make the broker hold them
    budget = min(request.max_bytes, ctx.services.config.integer("fetch.max.bytes"))
    replica = _replica_id(ctx, request)
    client = _client_metadata(ctx, request, replica)
    denied = _denied_topics(ctx, request, wanted) if ctx.services.authorizer is not None else None
    busy = 0.0  # the time spent reading, what request_percentage charges
    results: list[tuple[Wanted, dict[str, Any]]] = []
    try:
        while True:
            results = []
            total = 0
            started = time.perf_counter()
            for w in wanted:
                if denied and w.topic in denied:
                    results.append((w, _entry(w.index, ErrorCode.topic_authorization_failed)))
                    continue
                entry, size = _read(ctx, w, budget - total, isolation, total == 0, replica, client)
                total += size
                results.append((w, entry))
            busy += time.perf_counter() - started
            total += await _read_remote(ctx, results, budget - total, isolation, total == 0)
            # an error, or a consumer sent to another replica, is answered at once (as Kafka)
            answer_now = any(
                entry["error_code"] or entry["preferred_read_replica"] != NO_PREFERENCE
                for _, entry in results
            )
            remaining = deadline - time.monotonic()
            if total >= min_bytes or answer_now or remaining <= 0 or not wanted:
                break
            _release(results)  # read again once woken
            results = []
            partitions = [
                p for w in wanted if w.topic and (p := ctx.services.topics.get(w.topic, w.index))
            ]
            log_end = replica != CONSUMER  # a follower waits for the log end, not the HW
            watched = [p.end_listeners if log_end else p.hw_listeners for p in partitions]
            await wait_for_any(watched, remaining)
        if incremental:  # an entry with records is changed: no range is dropped here
            results = [(w, e) for w, e in results if _changed(e, w.state)]
        started = time.perf_counter()
        # encoded by hand: the records go to the socket as read, not copied (protocol/fetch.py)
        body = encode_fetch_response(
            ctx.api_version, _response(ctx, 0, session.session_id if session else 0, results)
        )
        busy += time.perf_counter() - started
        if ctx.services.quotas.kinds and replica == CONSUMER:  # a follower is never throttled
            throttled = _charge_quotas(ctx, body_size(body), session, incremental, busy)
            if throttled is not None:
                _release(results)
                return throttled  # nothing was sent, the session's partitions unchanged
        ctx.services.metrics.fetched(
            ((w.topic, entry) for w, entry in results), replica != CONSUMER
        )
    except BaseException:  # failed or cancelled: the file ranges read are never written
        _release(results)
        raise
    for w, entry in results:
        w.state.sent_high_watermark = entry["high_watermark"]
        w.state.sent_last_stable_offset = entry["last_stable_offset"]
        w.state.sent_log_start_offset = entry["log_start_offset"]
    # the connection owns the file ranges in the body from here: it writes them, or closes them
    return RawBody(body, error=0)


def _release(results: list[tuple[Wanted, dict[str, Any]]]) -> None:
    """Closes the file ranges of answers that will not be written."""
    close_ranges([entry["records"] for _, entry in results])


def _charge_quotas(
    ctx: RequestContext,
    size: int,
    session: FetchSession | None,
    incremental: bool,
    busy: float,
) -> dict[str, Any] | None:
    """The encoded answer's `size` counts against consumer_byte_rate (and the reading and
    encoding time, `busy`, against request_percentage). Within quota: None, the answer goes.
    Past it: as Kafka, an answer without data carrying throttle_time_ms, after which the
    connection is not read for that long; a session this request opened is dropped (Kafka does
    not open it either)."""
    throttle = charge(ctx.services.quotas, ctx, QuotaType.FETCH, size, busy)
    if not throttle:
        return None
    session_id = 0
    if session is not None and incremental:
        session_id = session.session_id
    elif session is not None:
        ctx.services.fetch_sessions.remove(session.session_id)
    return {**_response(ctx, 0, session_id, []), "throttle_time": throttle}
