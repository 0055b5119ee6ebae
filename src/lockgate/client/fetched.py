# client/fetched.py — the record batches of one partition's fetch answer as a consumer (plain
# or share) reads them: only whole batches (one cut by the fetch size ends the walk: it is
# fetched again), v2 only, each checked (CRC-32C) before it is trusted, then its records
# decoded with the batch's timestamp type.
from __future__ import annotations

import enum
from collections.abc import Iterator

from lockgate.client.errors import CorruptRecordError
from lockgate.protocol.records import (
    BatchHeader,
    Record,
    batch_is_intact,
    parse_header,
    peek_batch_size,
    read_records,
)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def whole_batches(
    records: bytes, where: str, *, check_crcs: bool = True
) -> Iterator[tuple[bytes, BatchHeader]]:
    """Each complete batch of `records` (of partition `where`, for the errors) with its header;
    CorruptRecordError for a batch not v2 or failing its CRC."""
    pos = 0
    while pos < len(records):
        prefix = peek_batch_size(records, pos)
        if prefix is None:
            return
        _base, size, magic = prefix
        if pos + size > len(records):
            return  # cut by the fetch size: fetched again from its start
        if magic != 2:
            raise CorruptRecordError(f"{where}: batch with magic {magic} at byte {pos}")
        chunk = records[pos : pos + size]
        pos += size
        header = batch_is_intact(chunk, 0) if check_crcs else parse_header(chunk)
        if header is None:
            raise CorruptRecordError(f"{where}: batch failed its CRC-32C check")
        yield chunk, header


def batch_records(
    chunk: bytes, header: BatchHeader, where: str
) -> tuple[list[Record], TimestampType]:
    """The records of a data batch and their timestamp type; CorruptRecordError if they do
    not decode."""
    try:
        decoded = read_records(chunk)
    except Exception as exc:  # decompressors raise their own types
        raise CorruptRecordError(
            f"{where}: undecodable batch at offset {header.base_offset}: {exc}"
        ) from exc
    if header.log_append_time:
        return decoded, TimestampType.LOG_APPEND_TIME
    return decoded, TimestampType.CREATE_TIME
