# Producer state of one partition, KAFKA-12207 style: for each producer id only the latest
# batch (epoch, first and last sequence, last offset, write time) plus the open transaction's
# first offset; an earlier batch is looked up in the log when it is resent (log/duplicates.py).
# Kept as parallel typed arrays sorted by producer id (about 46 bytes an entry) rather than
# objects, because a broker may track millions of (producer, partition) pairs.
#
# Sequence rules (PROTOCOL.md): a lower epoch is INVALID_PRODUCER_EPOCH; a higher epoch must
# start at 0; within an epoch a batch continues at last+1 (wrapping at 2^31-1 for old
# clients); an exact retry of the latest batch gets its original offset, and so does a resend
# of an earlier batch still found in the log (same first and last sequence); any other
# sequence up to 1000 behind the latest is DUPLICATE_SEQUENCE_NUMBER (clients take it as
# delivered, without an offset); anything else is out of order. An unknown producer must
# start at 0, else UNKNOWN_PRODUCER_ID so that it bumps its epoch.
# A transaction marker from a coordinator older than the one that wrote the producer's previous
# marker is a zombie coordinator's: TRANSACTION_COORDINATOR_FENCED (Kafka's ProducerStateManager).
from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

SEQUENCE_MODULUS = 1 << 31
DUPLICATE_WINDOW = 1000
NO_OFFSET = -1
NO_SEQUENCE = -1
NO_COORDINATOR_EPOCH = -1

_ROW = struct.Struct(">qhiiqqqi")
_SNAPSHOT_HEADER = struct.Struct(">4sHqI")  # magic, version, offset, row count
_SNAPSHOT_MAGIC = b"LGPS"
_SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int
    last_offset: int
    timestamp: int  # broker time of the latest write, for expiry and retry answers
    txn_first_offset: int  # first offset of the open transaction, or -1
    coordinator_epoch: int

    @property
    def first_offset(self) -> int:
        """Base offset of the latest batch (for answering its exact retry)."""
        if self.last_sequence < 0:
            return self.last_offset
        return self.last_offset - (self.last_sequence - self.first_sequence) % SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A resend of a batch already in the log: answer with its original offset (and its
    log append time, -1 when it has none)."""

    base_offset: int
    timestamp: int


# (the producer's latest entry, first sequence, last sequence) -> the earlier batch with those
# sequences as stored in the log, or None when the log no longer has it
EarlierBatchLookup = Callable[[ProducerEntry, int, int], Duplicate | None]


def next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


class ProducerStateTable:
    def __init__(self) -> None:
        self.ids = array("q")
        self.epochs = array("h")
        self.first_sequences = array("i")
        self.last_sequences = array("i")
        self.last_offsets = array("q")
        self.timestamps = array("q")
        self.txn_first_offsets = array("q")
        self.coordinator_epochs = array("i")

    def __len__(self) -> int:
        return len(self.ids)

    def _columns(self) -> tuple[array[int], ...]:
        return (
            self.ids,
            self.epochs,
            self.first_sequences,
            self.last_sequences,
            self.last_offsets,
            self.timestamps,
            self.txn_first_offsets,
            self.coordinator_epochs,
        )

    def _find(self, producer_id: int) -> int:
        ids = self.ids
        i = bisect.bisect_left(ids, producer_id)
        return i if i < len(ids) and ids[i] == producer_id else -1

    def get(self, producer_id: int) -> ProducerEntry | None:
        i = self._find(producer_id)
        if i < 0:
            return None
        return ProducerEntry(*(column[i] for column in self._columns()))

    def entries(self) -> list[ProducerEntry]:
        return [ProducerEntry(*row) for row in zip(*self._columns(), strict=True)]

    def put(self, entry: ProducerEntry) -> None:
        values = (
            entry.producer_id,
            entry.epoch,
            entry.first_sequence,
            entry.last_sequence,
            entry.last_offset,
            entry.timestamp,
            entry.txn_first_offset,
            entry.coordinator_epoch,
        )
        i = self._find(entry.producer_id)
        if i >= 0:
            for column, value in zip(self._columns(), values, strict=True):
                column[i] = value
            return
        i = bisect.bisect_left(self.ids, entry.producer_id)
        if i == len(self.ids):
            for column, value in zip(self._columns(), values, strict=True):
                column.append(value)
        else:
            for column, value in zip(self._columns(), values, strict=True):
                column.insert(i, value)

    def remove(self, producer_id: int) -> None:
        i = self._find(producer_id)
        if i >= 0:
            for column in self._columns():
                del column[i]

    # -- the sequence rules --------------------------------------------------------------------

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        find_earlier: EarlierBatchLookup | None = None,
    ) -> Duplicate | None:
        """Validates a batch against the producer's latest one. Returns None to append it, a
        Duplicate for an exact retry (or, through `find_earlier`, for a resend of an earlier
        batch the log still holds), or raises KafkaProtocolError."""
        i = self._find(producer_id)
        if i < 0:
            if first_sequence != 0:
                raise KafkaProtocolError(
                    ErrorCode.unknown_producer_id,
                    f"producer {producer_id} is unknown here and starts at {first_sequence}",
                )
            return None
        current_epoch = self.epochs[i]
        if epoch < current_epoch:
            raise KafkaProtocolError(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} is older than {current_epoch}",
            )
        last = self.last_sequences[i]
        if epoch > current_epoch or last == NO_SEQUENCE:
            if first_sequence != 0:
                raise KafkaProtocolError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id} epoch {epoch} must start at sequence 0, "
                    f"not {first_sequence}",
                )
            return None
        if first_sequence == next_sequence(last):
            return None
        if first_sequence == self.first_sequences[i] and last_sequence == last:
            return Duplicate(
                self.last_offsets[i] - (last - first_sequence) % SEQUENCE_MODULUS,
                self.timestamps[i],
            )
        behind = (last - first_sequence) % SEQUENCE_MODULUS
        if behind <= DUPLICATE_WINDOW:
            if find_earlier is not None and first_sequence != self.first_sequences[i]:
                entry = ProducerEntry(*(column[i] for column in self._columns()))
                found = find_earlier(entry, first_sequence, last_sequence)
                if found is not None:
                    return found
            raise KafkaProtocolError(
                ErrorCode.duplicate_sequence_number,
                f"producer {producer_id} sequence {first_sequence} is {behind} behind {last}",
            )
        raise KafkaProtocolError(
            ErrorCode.out_of_order_sequence_number,
            f"producer {producer_id} sent {first_sequence}, expected {next_sequence(last)}",
        )

    def check_coordinator_epoch(self, producer_id: int, coordinator_epoch: int) -> None:
        """Refuses a marker whose coordinator epoch is below the one recorded from the
        producer's previous marker: a coordinator that lost its partition of the transaction
        log must not end a transaction its successor now owns. Equal or higher passes. An
        unknown epoch (-1) is not checked: no coordinator sends it (its epoch is the leader
        epoch of its log partition), only tools passing on what DescribeProducers showed, and
        it never replaces the recorded epoch."""
        if coordinator_epoch == NO_COORDINATOR_EPOCH:
            return
        i = self._find(producer_id)
        if i >= 0 and coordinator_epoch < self.coordinator_epochs[i]:
            raise KafkaProtocolError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {self.coordinator_epochs[i]}",
            )

    def record_append(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        last_offset: int,
        timestamp: int,
        txn_first_offset: int,
    ) -> None:
        i = self._find(producer_id)
        coordinator_epoch = self.coordinator_epochs[i] if i >= 0 else -1
        self.put(
            ProducerEntry(
                producer_id,
                epoch,
                first_sequence,
                last_sequence,
                last_offset,
                timestamp,
                txn_first_offset,
                coordinator_epoch,
            )
        )

    def expire(self, older_than_ms: int) -> int:
        """Drops producers idle since before `older_than_ms` with no open transaction."""
        doomed = [
            pid
            for pid, ts, txn in zip(self.ids, self.timestamps, self.txn_first_offsets, strict=True)
            if ts < older_than_ms and txn == NO_OFFSET
        ]
        for pid in doomed:
            self.remove(pid)
        return len(doomed)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot(self, offset: int) -> bytes:
        body = b"".join(_ROW.pack(*row) for row in zip(*self._columns(), strict=True))
        header = _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, offset, len(self))
        payload = header + body
        return payload + struct.pack(">I", crc32c.crc32c(payload))

    @classmethod
    def from_snapshot(cls, data: bytes) -> tuple[ProducerStateTable, int] | None:
        """(table, offset) from snapshot bytes, or None when the file is damaged."""
        if len(data) < _SNAPSHOT_HEADER.size + 4:
            return None
        payload, (crc,) = data[:-4], struct.unpack(">I", data[-4:])
        if crc32c.crc32c(payload) != crc:
            return None
        magic, version, offset, count = _SNAPSHOT_HEADER.unpack_from(payload)
        if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION:
            return None
        if len(payload) != _SNAPSHOT_HEADER.size + count * _ROW.size:
            return None
        table = cls()
        columns = table._columns()
        for row in _ROW.iter_unpack(payload[_SNAPSHOT_HEADER.size :]):
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        if any(a >= b for a, b in zip(table.ids, table.ids[1:], strict=False)):
            return None
        return table, offset
