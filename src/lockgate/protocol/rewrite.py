# Rewriting a stored v2 batch with a subset of its records, for the log cleaner.
#
# Kept records are copied byte for byte: the batch keeps its base offset, last offset delta,
# producer id, epoch and base sequence (as Kafka's cleaner does), so every record's offset and
# sequence stay what they were. Only a delete horizon (KIP-534: attributes bit 6, the base
# timestamp then holds the horizon) changes each record's timestamp delta.
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from lockgate.protocol.records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compress,
    decompress,
    parse_header,
    read_varint,
    zigzag_varint,
)

DELETE_HORIZON_BIT = 0x40

_AFTER_CRC = struct.Struct(">hiqqqhii")


def has_delete_horizon(header: BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_BIT)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of a decompressed batch body: its bytes are body[start:end]."""

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool
    delta_start: int  # where the timestamp delta varint begins (after the attributes byte)
    delta_end: int


def split_records(batch: bytes) -> tuple[BatchHeader, bytes, list[RawRecord]]:
    """The batch's records, decompressed. Raises ValueError if they do not parse."""
    header = parse_header(batch)
    try:
        body = decompress(header.compression, bytes(batch[HEADER_SIZE : header.size]))
    except Exception as exc:  # each codec library has its own error type
        raise ValueError(f"records do not decompress: {exc}") from exc
    records: list[RawRecord] = []
    pos = 0
    try:
        for _ in range(header.record_count):
            start = pos
            length, pos = read_varint(body, pos)
            end = pos + length
            delta_start = pos + 1  # after the attributes byte
            timestamp_delta, delta_end = read_varint(body, delta_start)
            offset_delta, pos = read_varint(body, delta_end)
            key_size, pos = read_varint(body, pos)
            key = None if key_size < 0 else body[pos : pos + key_size]
            pos += max(key_size, 0)
            value_size, pos = read_varint(body, pos)
            if end > len(body) or pos > end:
                raise ValueError(f"record at offset delta {offset_delta} overruns the batch")
            records.append(
                RawRecord(
                    start,
                    end,
                    offset_delta,
                    timestamp_delta,
                    key,
                    value_size < 0,
                    delta_start,
                    delta_end,
                )
            )
            pos = end
    except IndexError as exc:
        raise ValueError("records end before the batch's record count") from exc
    return header, body, records


def rebuild_batch(
    header: BatchHeader,
    body: bytes,
    kept: list[RawRecord],
    delete_horizon: int | None,
) -> bytes:
    """The batch with only `kept` records (in order), recompressed with its codec; with a
    `delete_horizon` (ms) it is marked KIP-534 style. With nothing kept it is Kafka's empty
    batch: the header alone, uncompressed, keeping the producer's last sequence."""
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    rebase = 0
    if delete_horizon is not None and not attributes & DELETE_HORIZON_BIT:
        attributes |= DELETE_HORIZON_BIT
        rebase = base_timestamp - delete_horizon
        base_timestamp = delete_horizon
    parts: list[bytes] = []
    max_timestamp = -1
    for record in kept:
        # a record's time is base + delta, a horizon already set included (KIP-534)
        max_timestamp = max(max_timestamp, header.base_timestamp + record.timestamp_delta)
        if rebase == 0:
            parts.append(body[record.start : record.end])
            continue
        inner = b"".join(
            (
                body[record.delta_start - 1 : record.delta_start],
                zigzag_varint(record.timestamp_delta + rebase),
                body[record.delta_end : record.end],
            )
        )
        parts.append(zigzag_varint(len(inner)) + inner)
    if header.log_append_time or not kept:
        max_timestamp = header.max_timestamp
    records = b"".join(parts)
    if not kept:
        attributes &= ~COMPRESSION_MASK
    elif header.compression:
        records = compress(header.compression, records)
    after_crc = _AFTER_CRC.pack(
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    crc = crc32c.crc32c(after_crc + records)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    return (
        struct.pack(
            ">qiibI", header.base_offset, batch_length, header.partition_leader_epoch, 2, crc
        )
        + after_crc
        + records
    )
