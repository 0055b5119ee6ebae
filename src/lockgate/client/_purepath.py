# client/_purepath.py — the producer's per-record work in pure Python: the twin of the compiled
# lockgate.client._fastpath, with the same classes, methods and results (client/fastpath.py
# chooses one). Both are checked against each other (tests/unit/client/test_fastpath.py).
#
# What it owns, per record: queueing a send() or send_batch() record in its partition's
# RecordQueue (partition choice, size and buffer accounting, timestamp, future, tracking for
# flush), cutting a batch's records off the front of a queue (a RecordRun), framing them as
# v2 records, and completing their futures with RecordMetadata.
#
# Invariants:
# - A queue keeps its records in the order they were queued; a run is always a prefix of it.
# - `RecordQueue.size` and `Accumulator.buffered_bytes` are sums of the records' size bounds
#   (batches.size_bound), which never undercount the encoded record.
# - Accumulator.append() either queues the record and returns its future, or (None) changes
#   nothing: the producer then takes its general path, which raises or waits as needed.
from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from itertools import count as count_from
from itertools import repeat
from operator import itemgetter
from typing import Any

from lockgate.client.batches import RECORD_OVERHEAD_BOUND, OutgoingRecord, encode_records
from lockgate.client.partitioner import KEY_CACHE_SIZE, murmur2

IMPLEMENTATION = "pure"

# A queued record: (key, value, headers, timestamp, size, waiter, enqueued, slot). The waiter
# is the record's own future (slot -1) or the RecordGroup of its send_batch() call.
_Entry = tuple[bytes | None, bytes | None, tuple[Any, ...], int, int, Any, float, int]
_new_tuple = tuple.__new__
# Per-record work below goes through map/zip where it can: C speed without a Python loop.
_SIZE = itemgetter(4)
_RECORD = itemgetter(0, 1, 2, 3)
_TIMESTAMP = itemgetter(3)


class RecordGroup:
    """The records of one send_batch() call, behind one future."""

    __slots__ = ("future", "remaining", "results")

    def __init__(self, future: asyncio.Future[Any], count: int) -> None:
        self.future = future
        self.results: list[Any] = [None] * count
        self.remaining = count

    def deliver(self, index: int, metadata: Any) -> None:
        self.results[index] = metadata
        self.remaining -= 1
        if not self.remaining and not self.future.done():
            self.future.set_result(self.results)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class RecordRun:
    """Records cut from a queue for one batch (or failed together), in order."""

    __slots__ = ("_entries", "size")

    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = entries
        self.size = sum(map(_SIZE, entries))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def first_enqueued(self) -> float:
        return self._entries[0][6]

    def records(self) -> list[OutgoingRecord]:
        return list(map(_RECORD, self._entries))

    def frame(self) -> tuple[bytes, int, int]:
        """(the records' v2 encodings with offset deltas from 0, base timestamp, max timestamp)."""
        records = self.records()
        base = records[0][3]
        return encode_records(records, base), base, max(record[3] for record in records)

    def futures(self) -> list[asyncio.Future[Any]]:
        """Each record's future (a send_batch() call's one future for each of its records)."""
        return [e[5].future if isinstance(e[5], RecordGroup) else e[5] for e in self._entries]

    def complete(
        self,
        metadata_type: type[tuple[Any, ...]],
        topic: str,
        partition: int,
        base_offset: int,
        log_append_time: int,
    ) -> None:
        """Delivers `metadata_type(topic, partition, offset, timestamp)` to every record: offsets
        from `base_offset` (all -1 when it is negative), the record's timestamp unless
        `log_append_time` is one (≥ 0)."""
        entries = self._entries
        offsets: Iterator[int] = repeat(-1) if base_offset < 0 else count_from(base_offset)
        timestamps: Iterator[int] = (
            repeat(log_append_time) if log_append_time >= 0 else map(_TIMESTAMP, entries)
        )
        fields = zip(repeat(topic), repeat(partition), offsets, timestamps, strict=False)
        # The metadata built at C speed; the loop only hands them out.
        metadatas = map(_new_tuple, repeat(metadata_type), fields)
        for entry, metadata in zip(entries, metadatas, strict=False):
            waiter = entry[5]
            if type(waiter) is RecordGroup:
                waiter.deliver(entry[7], metadata)
            elif not waiter.done():
                waiter.set_result(metadata)


class RecordQueue:
    """A partition's records waiting to be batched."""

    __slots__ = ("_entries", "partition", "size", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._entries: deque[_Entry] = deque()
        self.size = 0  # the sum of the queued records' size bounds

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def first_enqueued(self) -> float:
        return self._entries[0][6]

    def extend(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        sizes: Sequence[int],
        timestamp: int,
        waiter: Any,
        enqueued: float,
        slots: Sequence[int],
    ) -> None:
        """Appends records whose keys, values and sizes are checked already, in one pass."""
        self._entries.extend(
            zip(
                keys,
                values,
                repeat(()),
                repeat(timestamp),
                sizes,
                repeat(waiter),
                repeat(enqueued),
                slots,
                strict=False,
            )
        )
        self.size += sum(sizes)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Any, ...],
        timestamp: int,
        size: int,
        waiter: Any,
        enqueued: float,
        slot: int = -1,
    ) -> None:
        if not (key is None or type(key) is bytes) or not (value is None or type(value) is bytes):
            raise TypeError("a record's key and value are bytes or None")
        if not isinstance(headers, tuple):
            raise TypeError("headers must be a tuple")
        if slot < -1:  # the compiled twin marks its own futures' entries below -1
            raise ValueError("a slot is -1 or a group's index")
        self._entries.append((key, value, headers, timestamp, size, waiter, enqueued, slot))
        self.size += size

    def take(self, max_bytes: int, limit: int | None) -> RecordRun:
        """The longest prefix within `max_bytes` and `limit` records; at least one record."""
        entries = self._entries
        if not entries:
            raise IndexError("take from an empty queue")
        if self.size <= max_bytes and (limit is None or len(entries) <= limit):
            run = RecordRun(list(entries))
            entries.clear()
        else:
            taken: list[_Entry] = [entries.popleft()]
            total = taken[0][4]
            while entries and (limit is None or len(taken) < limit):
                if total + entries[0][4] > max_bytes:
                    break
                total += entries[0][4]
                taken.append(entries.popleft())
            run = RecordRun(taken)
        self.size -= run.size
        return run

    def take_expired(self, cutoff: float) -> RecordRun | None:
        """The records queued at or before `cutoff` (a prefix: queueing times only grow)."""
        entries = self._entries
        taken: list[_Entry] = []
        while entries and entries[0][6] <= cutoff:
            taken.append(entries.popleft())
        if not taken:
            return None
        run = RecordRun(taken)
        self.size -= run.size
        return run

    def take_all(self) -> RecordRun | None:
        if not self._entries:
            return None
        run = RecordRun(list(self._entries))
        self._entries.clear()
        self.size = 0
        return run


class Accumulator:
    """send()'s and send_batch()'s per-record work. The producer registers each topic it has
    looked up (`register`) with the metadata snapshot it came from; a record for a topic whose
    snapshot has been replaced since goes back to the producer's general path."""

    __slots__ = (
        "_clock",
        "_key_caches",
        "_loop",
        "batch_records",
        "batch_size",
        "buffer_memory",
        "buffered_bytes",
        "cluster",
        "filled",
        "max_request_size",
        "new_queue",
        "prune_at",
        "prune_base",
        "sendable",
        "since_yield",
        "topics",
        "txn_check",
        "unfinished",
        "wakeup",
        "yield_every",
    )

    def __init__(
        self,
        cluster: Any,
        new_queue: Callable[[str, int], RecordQueue],
        wakeup: Callable[[], None],
        txn_check: Callable[[], None] | None,
        batch_size: int,
        max_request_size: int,
        buffer_memory: int,
        prune_at: int,
    ) -> None:
        self.cluster = cluster
        self.new_queue = new_queue
        self.wakeup = wakeup
        self.txn_check = txn_check
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.prune_at = self.prune_base = prune_at
        self.buffered_bytes = 0
        self.filled = False  # the caller should yield (a batch filled, or yield_every records)
        self.yield_every = 0  # 0: only a full batch asks for a yield
        self.batch_records = 0  # the most records a batch may take (full then); 0: no limit
        self.since_yield = 0
        self.sendable = False  # started and not closing
        self.unfinished: list[asyncio.Future[Any]] = []
        # topic → [metadata snapshot, partition count, queues by partition, round-robin
        # counter, custom partitioner or None]
        self.topics: dict[str, list[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: Callable[[], float] = time.monotonic
        # murmur2 is slow in Python and keys repeat: partition count → key → partition
        self._key_caches: dict[int, dict[bytes | None, int]] = {}

    @property
    def direct_futures(self) -> bool:
        """Whether send()'s futures are built without Future's constructor: never here (the
        compiled twin does, where it can)."""
        return False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._clock = loop.time
        self.sendable = True

    def register(
        self,
        topic: str,
        metadata: Any,
        partition_count: int,
        counter: Iterator[int],
        custom_partitioner: Callable[[str, bytes | None, int], int] | None,
    ) -> None:
        entry = self.topics.get(topic)
        queues: list[RecordQueue | None] = [None] * partition_count
        if entry is not None:
            for index, queue in enumerate(entry[2][:partition_count]):
                queues[index] = queue
        self.topics[topic] = [metadata, partition_count, queues, counter, custom_partitioner]

    def track(self, future: asyncio.Future[Any]) -> None:
        """Keeps `future` for flush() and close() until it is done."""
        unfinished = self.unfinished
        unfinished.append(future)
        if len(unfinished) >= self.prune_at:
            self.prune()

    def prune(self) -> None:
        """Drops the done futures from `unfinished`. In place: the list lives as long as the
        producer, in the collector's oldest generation, while a new one would be young and
        scanned (all of its futures) by the next collections."""
        unfinished = self.unfinished
        unfinished[:] = [f for f in unfinished if not f.done()]
        self.prune_at = max(self.prune_base, 2 * len(unfinished))

    def queue_for(self, topic: str, partition: int) -> RecordQueue:
        queues: list[RecordQueue | None] = self.topics[topic][2]
        queue = queues[partition]
        if queue is None:
            queue = queues[partition] = self.new_queue(topic, partition)
        return queue

    def partition_of(self, topic: str, key: bytes | None) -> int:
        _metadata, partition_count, _queues, counter, custom = self.topics[topic]
        count: int = partition_count
        if custom is not None:
            chosen = int(custom(topic, key, count))
            if not 0 <= chosen < count:
                raise ValueError("the partitioner chose no partition of the topic")
            return chosen
        if key is None:
            return int(next(counter)) % count
        cache = self._key_cache(count)
        cached = cache.get(key)
        if cached is None:
            if len(cache) >= KEY_CACHE_SIZE:
                cache.clear()
            cached = cache[key] = (murmur2(key) & 0x7FFFFFFF) % count
        return cached

    def _key_cache(self, count: int) -> dict[bytes | None, int]:
        cache = self._key_caches.get(count)
        if cache is None:
            cache = self._key_caches[count] = {}
        return cache

    def _partitions(self, topic: str, keys: list[bytes | None]) -> list[int]:
        """partition_of() for many records: the cached keys in one pass at C speed, the rest
        (and the round robin of records without a key) in order."""
        entry = self.topics[topic]
        if entry[4] is not None:
            return [self.partition_of(topic, key) for key in keys]
        chosen: list[int | None] = list(map(self._key_cache(entry[1]).get, keys))
        if None in chosen:
            for index, partition in enumerate(chosen):
                if partition is None:
                    chosen[index] = self.partition_of(topic, keys[index])
        return chosen  # type: ignore[return-value]  # no None is left

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: Any,
        timestamp_ms: int | None,
    ) -> asyncio.Future[Any] | None:
        """send()'s whole per-record body for the common record; None (nothing done) for
        anything else."""
        if not self.sendable or headers:
            return None
        if self.txn_check is not None:  # first, as on the general path
            self.txn_check()  # raises outside a transaction
        entry = self.topics.get(topic)
        if entry is None or entry[0] is not self.cluster.metadata:
            return None
        if not (key is None or type(key) is bytes) or not (value is None or type(value) is bytes):
            return None
        size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"")
        if size > self.max_request_size:
            return None
        if self.buffered_bytes and self.buffered_bytes + size > self.buffer_memory:
            return None
        if partition is not None and not (type(partition) is int and 0 <= partition < entry[1]):
            return None
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        elif type(timestamp_ms) is not int or not -(2**63) <= timestamp_ms < 2**63:
            return None
        # after the checks: a record going the general way must not move the round robin
        chosen = self.partition_of(topic, key) if partition is None else partition
        future: asyncio.Future[Any] = asyncio.Future(loop=self._loop)
        self.track(future)
        self._queue(topic, chosen, key, value, timestamp_ms, size, future, -1, self._clock())
        return future

    def _queue(
        self,
        topic: str,
        chosen: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        size: int,
        waiter: Any,
        slot: int,
        enqueued: float,
    ) -> None:
        queue = self.queue_for(topic, chosen)
        before = queue.size
        queue.append(key, value, (), timestamp_ms, size, waiter, enqueued, slot)
        self.buffered_bytes += size
        self._count_queued(1)
        if self._filled(before, len(queue) - 1, queue):
            self.filled = True  # the sender should write the full batch now
            self.wakeup()
        elif len(queue) == 1:
            self.wakeup()

    def _filled(self, before: int, before_count: int, queue: RecordQueue) -> bool:
        """Whether the records just queued filled a batch: in bytes, or in records."""
        if before // self.batch_size != queue.size // self.batch_size:
            return True
        limit = self.batch_records
        return limit > 0 and before_count // limit != len(queue) // limit

    def _count_queued(self, count: int) -> None:
        """Every yield_every records the caller yields too: only then can the loop read
        answers and write the batches they make room for, while a caller queueing in a loop
        of its own never waits for anything. A count of all records, whatever else asked for
        a yield."""
        if self.yield_every > 0:
            self.since_yield += count
            if self.since_yield >= self.yield_every:
                self.since_yield %= self.yield_every
                self.filled = True

    def measure(self, items: list[tuple[bytes | None, bytes | None]]) -> tuple[int, int]:
        """(the sum, the largest) of the records' size bounds; TypeError for anything but
        (key, value) pairs of bytes or None."""
        total = largest = 0
        for item in items:
            if not isinstance(item, tuple) or len(item) != 2:
                raise TypeError("send_batch() takes (key, value) pairs")
            key, value = item
            if not (key is None or type(key) is bytes) or not (
                value is None or type(value) is bytes
            ):
                raise TypeError("send_batch() takes (key, value) pairs of bytes or None")
            size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"")
            total += size
            largest = max(largest, size)
        return total, largest

    def append_group(
        self,
        topic: str,
        partition: int | None,
        items: list[tuple[bytes | None, bytes | None]],
        timestamp_ms: int,
        group: RecordGroup,
    ) -> None:
        """Queues send_batch()'s records in order, each in its partition (`partition` when
        given), the i-th delivered to `group` as its i-th result; items are measured first."""
        enqueued = self._clock()  # one time for the call's records
        keys = [key for key, _value in items]
        values = [value for _key, value in items]
        sizes = [RECORD_OVERHEAD_BOUND + len(k or b"") + len(v or b"") for k, v in items]
        if partition is not None:
            runs: dict[int, Sequence[int]] = {partition: range(len(items))}
        else:
            runs = _slots_by_partition(self._partitions(topic, keys))
        self._count_queued(len(items))
        for chosen, slots in runs.items():
            queue = self.queue_for(topic, chosen)
            before, before_count = queue.size, len(queue)
            if isinstance(slots, range):  # the whole call
                queue.extend(keys, values, sizes, timestamp_ms, group, enqueued, slots)
            else:
                queue.extend(
                    list(map(keys.__getitem__, slots)),
                    list(map(values.__getitem__, slots)),
                    list(map(sizes.__getitem__, slots)),
                    timestamp_ms,
                    group,
                    enqueued,
                    slots,
                )
            self.buffered_bytes += queue.size - before
            if self._filled(before, before_count, queue):
                self.filled = True
                self.wakeup()
            elif before == 0:
                self.wakeup()


def _slots_by_partition(partitions: list[int]) -> dict[int, Sequence[int]]:
    """Each partition's slots, in order: a stable sort and slices rather than a Python loop."""
    order = sorted(range(len(partitions)), key=partitions.__getitem__)
    runs: dict[int, Sequence[int]] = {}
    start = 0
    for partition, size in sorted(Counter(partitions).items()):
        runs[partition] = order[start : start + size]
        start += size
    return runs
