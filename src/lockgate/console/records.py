# console/records.py — the record browser's data: N entries of one partition from an offset
# (or the first offset at or after a time), read with Fetch straight from the partition's
# leader through the client's cluster connections, not through the Consumer: the Consumer
# hides control batches, and the browser shows transaction markers (COMMIT/ABORT) as entries
# of their own. read_committed is the broker's (data up to the last stable offset, and the
# aborted transactions listed) with the consumer's filtering of aborted records, which are
# counted instead of shown; read_uncommitted shows them, each transactional record marked with
# the outcome of the marker that ends its transaction when that marker is on the same page.
# Invariant: reading never moves anything (no group, no commit).
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_for,
)
from lockgate.client.fetched import TimestampType, batch_records, whole_batches
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, control_record

FIRST_FETCH_VERSION = 4  # isolation level and aborted transactions
FIRST_FETCH_TOPIC_ID_VERSION = 13
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
MAX_COUNT = 500
FETCH_BYTES = 1 << 20
MAX_FETCH_BYTES = 64 << 20  # a single batch larger than this is not shown
MAX_FETCHES = 50  # a page of aborted data can take several fetches to fill; not forever


@dataclass(frozen=True, slots=True)
class BrowsedRecord:
    offset: int
    timestamp: int
    timestamp_type: str  # "create time" or "log append time"
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    transactional: bool
    # the transaction's end when its marker is on this page ("committed", "aborted"), "open"
    # past the last stable offset, None otherwise
    outcome: str | None = None

    is_control = False


@dataclass(frozen=True, slots=True)
class ControlMarker:
    offset: int
    timestamp: int
    kind: str  # "COMMIT" or "ABORT" (or "UNKNOWN" for a control type Kafka may add)
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    is_control = True


Entry = BrowsedRecord | ControlMarker


@dataclass(frozen=True, slots=True)
class RecordPage:
    topic: str
    partition: int
    start_offset: int
    isolation: int
    entries: tuple[Entry, ...]
    next_offset: int  # where the next page starts
    log_start: int
    high_watermark: int
    last_stable_offset: int
    hidden_aborted: int  # read_committed: aborted records left out of this page


async def resolve_time(admin: Admin, topic: str, partition: int, timestamp_ms: int) -> int | None:
    """The first offset whose timestamp is at or after `timestamp_ms`; None when no record is
    that recent."""
    tp = TopicPartition(topic, partition)
    answer = (await admin.list_offsets({tp: timestamp_ms}))[tp]
    if isinstance(answer, Exception):
        raise answer
    return None if answer.offset < 0 else answer.offset


async def browse(
    admin: Admin,
    topic: str,
    partition: int,
    start_offset: int,
    count: int,
    isolation: int = READ_COMMITTED,
) -> RecordPage:
    """Up to `count` entries (records and markers) from `start_offset`. An offset below the
    log start or past the end raises OffsetOutOfRangeError naming the valid range."""
    cluster = admin.cluster
    tp = TopicPartition(topic, partition)
    info = await cluster.topic(topic)
    if not 0 <= partition < len(info.partitions):
        raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
    connection, partition_info = await cluster.leader_connection(tp)
    version = connection.version_for(ApiKey.FETCH, min_version=FIRST_FETCH_VERSION)
    use_ids = version >= FIRST_FETCH_TOPIC_ID_VERSION
    entries: list[Entry] = []
    position = start_offset
    hidden = 0
    bounds = (0, 0, 0)
    max_bytes = FETCH_BYTES
    for _ in range(MAX_FETCHES):
        response = await connection.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 0,
                "max_bytes": max_bytes,
                "isolation_level": isolation,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "topic_id": info.topic_id if use_ids else None,
                        "partitions": [
                            {
                                "partition": partition,
                                "current_leader_epoch": partition_info.leader_epoch,
                                "fetch_offset": position,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": max_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            version=version,
        )
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, None, "Fetch")
        data = _only_partition(response)
        error = ErrorCode(data.error_code)
        bounds = (
            int(data.log_start_offset),
            int(data.high_watermark),
            int(data.last_stable_offset),
        )
        if error == ErrorCode.offset_out_of_range:
            raise OffsetOutOfRangeError(
                f"offset {position} is outside {tp}'s log: "
                f"{bounds[0]} (log start) to {bounds[1]} (high watermark)"
            )
        if error != ErrorCode.none:
            raise error_for(error, None, f"Fetch {tp}")
        raw = bytes(data.records or b"")
        aborted = [
            (int(a.first_offset), int(a.producer_id)) for a in (data.aborted_transactions or ())
        ]
        before = position
        position, skipped = _decode(
            raw, str(tp), position, aborted if isolation == READ_COMMITTED else None, entries
        )
        hidden += skipped
        end = bounds[2] if isolation == READ_COMMITTED else bounds[1]
        if len(entries) >= count or position >= end:
            break
        if position == before:  # one batch larger than the fetch size: ask for more bytes
            if not raw or max_bytes >= MAX_FETCH_BYTES:
                break
            max_bytes *= 4
    shown = entries[:count]
    next_offset = shown[-1].offset + 1 if len(entries) > count else position
    return RecordPage(
        topic=topic,
        partition=partition,
        start_offset=start_offset,
        isolation=isolation,
        entries=tuple(_with_outcomes(shown, bounds[2])),
        next_offset=next_offset,
        log_start=bounds[0],
        high_watermark=bounds[1],
        last_stable_offset=bounds[2],
        hidden_aborted=hidden,
    )


def _only_partition(response: Any) -> Any:
    for topic in response.responses:
        for data in topic.partitions:
            return data
    raise error_for(ErrorCode.unknown_server_error, "Fetch answered no partition")


def _decode(
    raw: bytes,
    where: str,
    position: int,
    aborted_transactions: list[tuple[int, int]] | None,
    entries: list[Entry],
) -> tuple[int, int]:
    """Appends the entries of `raw` at or after `position`; returns the next position and
    how many aborted records were left out (read_committed)."""
    start = position
    queue = list(aborted_transactions or ())
    heapq.heapify(queue)
    aborting: set[int] = set()
    skipped = 0
    for chunk, header in whole_batches(raw, where):
        if header.last_offset < position:
            continue
        while queue and queue[0][0] <= header.last_offset:
            aborting.add(heapq.heappop(queue)[1])
        position = header.last_offset + 1
        if header.is_control:
            try:
                kind_code, coordinator_epoch = control_record(chunk)
            except (ValueError, IndexError):
                kind_code, coordinator_epoch = -1, -1
            kind = {CONTROL_COMMIT: "COMMIT", CONTROL_ABORT: "ABORT"}.get(kind_code, "UNKNOWN")
            if kind == "ABORT":
                aborting.discard(header.producer_id)
            entries.append(
                ControlMarker(
                    offset=header.base_offset,
                    timestamp=header.max_timestamp,
                    kind=kind,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                )
            )
            continue
        decoded, timestamp_type = batch_records(chunk, header, where)
        kept = [r for r in decoded if r.offset >= start]
        if (
            aborted_transactions is not None
            and header.is_transactional
            and header.producer_id in aborting
        ):
            skipped += len(kept)
            continue
        for record in kept:
            entries.append(
                BrowsedRecord(
                    offset=record.offset,
                    timestamp=record.timestamp,
                    timestamp_type="log append time"
                    if timestamp_type is TimestampType.LOG_APPEND_TIME
                    else "create time",
                    key=record.key,
                    value=record.value,
                    headers=tuple(record.headers),
                    producer_id=header.producer_id,
                    transactional=header.is_transactional,
                )
            )
    return position, skipped


def _with_outcomes(entries: list[Entry], last_stable_offset: int) -> list[Entry]:
    """Each transactional record marked with the marker ending its transaction on this page
    (the next marker of its producer), or "open" when it is past the last stable offset."""
    result: list[Entry] = []
    ending: dict[int, str] = {}  # producer id → outcome of its next marker, walking backwards
    for entry in reversed(entries):
        if isinstance(entry, ControlMarker):
            ending[entry.producer_id] = {"COMMIT": "committed", "ABORT": "aborted"}.get(
                entry.kind, "?"
            )
            result.append(entry)
            continue
        if entry.transactional:
            outcome = ending.get(entry.producer_id)
            if outcome is None and entry.offset >= last_stable_offset:
                outcome = "open"
            if outcome is not None:
                entry = dataclasses.replace(entry, outcome=outcome)
        result.append(entry)
    result.reverse()
    return result
