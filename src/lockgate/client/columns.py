# client/columns.py — decoding a partition's Fetch records straight into Arrow column buffers
# (for readers that want columns, not Messages: the Spark source). Chooses the implementation
# as fastpath.py does: the compiled lockgate.client._columns when it was built and
# LOCKGATE_PURE_PYTHON is not "1", its pure-Python twin lockgate.client._purecolumns otherwise.
# Both give the same bytes; `IMPLEMENTATION` says which one is in use ("compiled" or "pure").
#
# ColumnDecoder plugs into Consumer(decoder=...): each Fetch response's records of a partition
# go into its builder with the rules of decode_fetched (CRC checks, control batches,
# read_committed), and the consumer moves its position as it does for Messages.
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

import crc32c

from lockgate.client import _purecolumns
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import FetchedPartition, is_abort_marker
from lockgate.client.errors import CorruptRecordError
from lockgate.protocol.records import decompress
from lockgate.protocol.twins import choose

if TYPE_CHECKING:
    from lockgate.client._purecolumns import ColumnBuilder


def load(pure: bool | None = None) -> ModuleType:
    """The implementation module (protocol/twins.py says which)."""
    return choose("lockgate.client._columns", _purecolumns, pure)


_implementation = load()
IMPLEMENTATION: str = _implementation.IMPLEMENTATION


class FetchColumns(NamedTuple):
    """The records taken from a builder, as Arrow buffers (native-endian, which Arrow's
    in-memory format is): `rows` records, and `headers` header entries over all of them."""

    rows: int
    offsets: bytes  # int64 per row
    timestamps: bytes  # int64 microseconds per row
    timestamp_types: bytes  # int32 per row: 0 create time, 1 log append time
    key_nulls: int
    key_validity: bytes  # bitmap, 1 = not null
    key_offsets: bytes  # int32, rows + 1
    key_data: bytes
    value_nulls: int
    value_validity: bytes
    value_offsets: bytes
    value_data: bytes
    header_offsets: bytes  # int32, rows + 1: each row's headers in the header columns
    headers: int
    header_key_offsets: bytes  # int32, headers + 1 (UTF-8 names, never null)
    header_key_data: bytes
    header_value_nulls: int
    header_value_validity: bytes
    header_value_offsets: bytes
    header_value_data: bytes


def new_builder(pure: bool | None = None) -> ColumnBuilder:
    """An empty builder using the client's own codecs, CRC-32C and ABORT marker test."""
    module = _implementation if pure is None else load(pure)
    builder: ColumnBuilder = module.ColumnBuilder(decompress, crc32c.crc32c, is_abort_marker)
    return builder


class ColumnDecoder:
    """A Consumer decoder that appends the records with offsets below `end` to `builder` and
    hands out no Messages."""

    def __init__(self, end: int, builder: ColumnBuilder | None = None) -> None:
        self.end = end
        self.builder = builder if builder is not None else new_builder()

    def __call__(
        self,
        tp: TopicPartition,
        records: bytes,
        position: int,
        aborted_transactions: Sequence[tuple[int, int]] | None,
        *,
        check_crcs: bool = True,
    ) -> FetchedPartition:
        try:
            next_position = self.builder.add(
                records, position, self.end, aborted_transactions, check_crcs
            )
        except ValueError as exc:
            raise CorruptRecordError(f"{tp}: {exc}") from exc
        return FetchedPartition([], next_position)

    def take(self) -> FetchColumns:
        return FetchColumns(*self.builder.take())


__all__ = ["IMPLEMENTATION", "ColumnDecoder", "FetchColumns", "load", "new_builder"]
