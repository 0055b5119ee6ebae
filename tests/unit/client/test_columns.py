# Decoding a partition's Fetch records into Arrow column buffers, compiled
# (lockgate.client._columns) and pure (lockgate.client._purecolumns): both must give the same
# bytes, the same position and the same errors, and the rows they hold must be exactly the
# Messages of consumer.decode_fetched (control batches, read_committed, positions, cut batches,
# compression, null keys and values, headers). Under CI (CI=true) the compiled one must have
# been built: a missing compiler must not go unnoticed behind the fallback.
from __future__ import annotations

import os
from array import array
from types import ModuleType
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.client import Admin, Consumer, Producer, _purecolumns, columns
from lockgate.client.batches import OutgoingRecord, ProducerIdentity, build_producer_batch
from lockgate.client.cluster import TopicPartition
from lockgate.client.columns import ColumnDecoder, FetchColumns, new_builder
from lockgate.client.consumer import FetchedPartition, Message, decode_fetched, is_abort_marker
from lockgate.client.errors import CorruptRecordError
from lockgate.client.fastpath import PURE_PYTHON_VARIABLE
from lockgate.protocol.records import (
    assign_offset,
    build_batch,
    build_control_batch,
    decompress,
    set_log_append_time,
    zigzag_varint,
)
from lockgate.server.broker import Broker

COMPILED = columns.load(pure=False)
BUILT = COMPILED.IMPLEMENTATION == "compiled"
TP = TopicPartition("t", 3)
NO_END = 2**63 - 1
needs_compiled = pytest.mark.skipif(
    not BUILT and os.environ.get("CI") != "true", reason="the extension is not built"
)


def implementations() -> list[Any]:
    return [
        pytest.param(COMPILED, id="compiled", marks=needs_compiled),
        pytest.param(_purecolumns, id="pure"),
    ]


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    assert request.node.callspec.id.split("-")[0] == module.IMPLEMENTATION
    return module


def test_ci_runs_the_compiled_decoder() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("checked under CI, where the build must have compiled the extension")
    assert BUILT, "lockgate.client._columns was not built: pip install -e . needs gcc"
    expected = "pure" if os.environ.get(PURE_PYTHON_VARIABLE) == "1" else "compiled"
    assert expected == columns.IMPLEMENTATION


def test_the_environment_variable_selects_the_pure_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "1")
    assert columns.load() is _purecolumns
    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "0")
    assert columns.load() is COMPILED


# -- building logs ------------------------------------------------------------------------------


def _at(batch: bytes, base_offset: int) -> bytes:
    data = bytearray(batch)
    assign_offset(data, base_offset, 4)
    return bytes(data)


def _data(
    records: list[OutgoingRecord],
    producer_id: int = -1,
    *,
    codec: int = 0,
    log_append: bool = False,
) -> bytes:
    if producer_id >= 0:
        identity = ProducerIdentity(producer_id, 0, transactional=True)
        batch = build_producer_batch(records, codec=codec, identity=identity, base_sequence=0)
    else:
        batch = build_producer_batch(records, codec=codec)
    if log_append:
        stamped = bytearray(batch)
        set_log_append_time(stamped, 1_700_000_123_456)
        batch = bytes(stamped)
    return batch


def _marker(producer_id: int, commit: bool) -> bytes:
    return build_control_batch(producer_id, 0, commit, coordinator_epoch=0, timestamp_ms=2000)


def _raw_batch(records: list[tuple[bytes | None, bytes | None, list[tuple[Any, Any]]]]) -> bytes:
    """A batch whose header names are raw bytes (possibly not UTF-8, or null)."""

    def field(item: bytes | None) -> bytes:
        return zigzag_varint(-1) if item is None else zigzag_varint(len(item)) + item

    encoded = b""
    for delta, (key, value, headers) in enumerate(records):
        body = b"\x00" + zigzag_varint(0) + zigzag_varint(delta) + field(key) + field(value)
        body += zigzag_varint(len(headers)) + b"".join(field(n) + field(v) for n, v in headers)
        encoded += zigzag_varint(len(body)) + body
    return build_batch([], encoded=encoded, record_count=len(records), timestamp_ms=5)


# offsets: 0-1 plain, 2-3 txn of 7 (aborted), 4 txn of 8 (gzip), 5 ABORT(7), 6 COMMIT(8),
# 7 txn of 7 (a later transaction, log append time), 8 COMMIT(7)
LOG = b"".join(
    [
        _at(_data([(b"k0", b"a", (("h", b"1"),), 1000), (None, b"b", (), 1001)]), 0),
        _at(_data([(None, b"aborted-1", (), 1), (None, b"aborted-2", (), 2)], 7), 2),
        _at(_data([(b"k4", None, (("x", None), ("é", b"2")), 1003)], 8, codec=1), 4),
        _at(_marker(7, commit=False), 5),
        _at(_marker(8, commit=True), 6),
        _at(_data([(None, b"later", (), 1004)], 7, log_append=True), 7),
        _at(_marker(7, commit=True), 8),
    ]
)
ABORTED = [(2, 7)]


# -- reading the columns back ---------------------------------------------------------------------


def _binary_items(count: int, validity: bytes | None, offsets: bytes, data: bytes) -> list[Any]:
    ends = array("i")
    ends.frombytes(offsets)
    assert len(ends) == count + 1 and ends[0] == 0 and ends[-1] == len(data)
    items: list[bytes | None] = []
    for i in range(count):
        valid = validity is None or bool(validity[i // 8] >> (i % 8) & 1)
        assert valid or ends[i] == ends[i + 1]
        items.append(data[ends[i] : ends[i + 1]] if valid else None)
    return items


def _rows(c: FetchColumns) -> list[tuple[Any, ...]]:
    """The rows of the columns as (offset, timestamp µs, type, key, value, headers), checking
    the layout on the way: bitmaps sized and zero-padded, null counts right."""
    for count, nulls, validity in (
        (c.rows, c.key_nulls, c.key_validity),
        (c.rows, c.value_nulls, c.value_validity),
        (c.headers, c.header_value_nulls, c.header_value_validity),
    ):
        assert len(validity) == (count + 7) // 8
        bits = int.from_bytes(validity, "little")
        assert bits >> count == 0 and bin(bits).count("1") == count - nulls
    offsets, timestamps, types, header_offsets = array("q"), array("q"), array("i"), array("i")
    offsets.frombytes(c.offsets)
    timestamps.frombytes(c.timestamps)
    types.frombytes(c.timestamp_types)
    header_offsets.frombytes(c.header_offsets)
    assert len(offsets) == len(timestamps) == len(types) == c.rows == len(header_offsets) - 1
    keys = _binary_items(c.rows, c.key_validity, c.key_offsets, c.key_data)
    values = _binary_items(c.rows, c.value_validity, c.value_offsets, c.value_data)
    names = _binary_items(c.headers, None, c.header_key_offsets, c.header_key_data)
    header_values = _binary_items(
        c.headers, c.header_value_validity, c.header_value_offsets, c.header_value_data
    )
    assert header_offsets[0] == 0 and header_offsets[-1] == c.headers
    return [
        (
            offsets[i],
            timestamps[i],
            types[i],
            keys[i],
            values[i],
            tuple(
                (names[h].decode(), header_values[h])
                for h in range(header_offsets[i], header_offsets[i + 1])
            ),
        )
        for i in range(c.rows)
    ]


def _expected(messages: list[Message], end: int = NO_END) -> list[tuple[Any, ...]]:
    return [
        (m.offset, m.timestamp * 1000, int(m.timestamp_type), m.key, m.value, m.headers)
        for m in messages
        if m.offset < end
    ]


def _decode(
    impl: ModuleType,
    records: bytes,
    position: int = 0,
    aborted: list[tuple[int, int]] | None = None,
    end: int = NO_END,
    check_crcs: bool = True,
) -> tuple[FetchedPartition, FetchColumns]:
    decoder = ColumnDecoder(end, new_builder(impl is _purecolumns))
    assert type(decoder.builder).__module__ == impl.__name__
    result = decoder(TP, records, position, aborted, check_crcs=check_crcs)
    return result, decoder.take()


# -- the rules, on both ---------------------------------------------------------------------------


def test_read_uncommitted_has_every_data_record_with_nulls_headers_and_timestamps(
    impl: ModuleType,
) -> None:
    result, taken = _decode(impl, LOG)
    assert result == FetchedPartition([], 9)
    assert _rows(taken) == _expected(decode_fetched(TP, LOG, 0, None).messages)
    assert [row[0] for row in _rows(taken)] == [0, 1, 2, 3, 4, 7]
    assert _rows(taken)[0] == (0, 1_000_000, 0, b"k0", b"a", (("h", b"1"),))
    assert _rows(taken)[4] == (4, 1_003_000, 0, b"k4", None, (("x", None), ("é", b"2")))
    assert _rows(taken)[5][1:3] == (1_700_000_123_456_000, 1)  # log append time


def test_read_committed_drops_aborted_transactions_until_their_marker(impl: ModuleType) -> None:
    result, taken = _decode(impl, LOG, aborted=ABORTED)
    assert result.next_position == 9
    assert [row[0] for row in _rows(taken)] == [0, 1, 4, 7]
    assert _rows(taken) == _expected(decode_fetched(TP, LOG, 0, ABORTED).messages)


def test_only_the_aborting_producer_is_filtered(impl: ModuleType) -> None:
    log = b"".join(
        [
            _at(_data([(None, b"x", (), 1)], 7), 0),
            _at(_data([(None, b"y", (), 1)], 9), 1),
            _at(_marker(7, commit=False), 2),
            _at(_marker(9, commit=True), 3),
        ]
    )
    assert [row[4] for row in _rows(_decode(impl, log, aborted=[(0, 7)])[1])] == [b"y"]


def test_position_and_end_bound_the_rows_but_not_the_next_position(impl: ModuleType) -> None:
    result, taken = _decode(impl, LOG, position=1, aborted=ABORTED, end=5)
    assert [row[0] for row in _rows(taken)] == [1, 4]
    assert result.next_position == 9  # the consumer moves past what it fetched whole
    result, taken = _decode(impl, LOG, position=9)
    assert result.next_position is None and taken.rows == 0


def _compacted(base: int, kept: list[tuple[int, bytes]], last_delta: int) -> bytes:
    """A batch as compaction leaves it: the records at offset deltas `kept` (value only), and
    the header's last offset delta still covering the records removed after them (none kept:
    an empty batch, which compaction keeps for its producer's state)."""
    encoded = b""
    for delta, value in kept:
        body = b"\x00" + zigzag_varint(0) + zigzag_varint(delta) + zigzag_varint(-1)
        body += zigzag_varint(len(value)) + value + zigzag_varint(0)
        encoded += zigzag_varint(len(body)) + body
    batch = bytearray(build_batch([], encoded=encoded, record_count=len(kept), timestamp_ms=5))
    batch[23:27] = last_delta.to_bytes(4, "big")
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return _at(bytes(batch), base)


def test_offset_gaps_left_by_compaction(impl: ModuleType) -> None:
    """Records keep their offsets across gaps, an emptied batch still moves the position past
    its last offset, and a position inside a gap starts at the next record kept."""
    log = b"".join(
        [
            _compacted(0, [(1, b"a"), (4, b"b")], 6),  # offsets 1 and 4 of 0-6
            _compacted(7, [], 2),  # 7-9, all removed
            _compacted(10, [(3, b"c")], 3),  # 13 of 10-13
        ]
    )
    for position, expected in ((0, [1, 4, 13]), (2, [4, 13]), (5, [13]), (8, [13])):
        result, taken = _decode(impl, log, position=position)
        assert result.next_position == 14
        assert [(row[0], row[4]) for row in _rows(taken)] == [
            (m.offset, m.value) for m in decode_fetched(TP, log, position, None).messages
        ]
        assert [row[0] for row in _rows(taken)] == expected
    result, taken = _decode(impl, _compacted(7, [], 2), position=7)
    assert result.next_position == 10 and taken.rows == 0


def test_a_cut_trailing_batch_is_left_for_the_next_fetch(impl: ModuleType) -> None:
    first = _at(_data([(None, b"a", (), 1), (None, b"b", (), 1)]), 0)
    second = _at(_data([(None, b"c", (), 1)]), 2)
    result, taken = _decode(impl, first + second[:-3])
    assert result.next_position == 2 and taken.rows == 2
    assert _decode(impl, second[:30], position=2)[0].next_position is None
    assert _decode(impl, second[:10], position=2)[0].next_position is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_decode_as_plain_ones(impl: ModuleType, codec: int) -> None:
    records: list[OutgoingRecord] = [
        (f"k{i}".encode(), b"v" * i, (("n", str(i).encode()),), 1000 + i) for i in range(50)
    ]
    plain = _rows(_decode(impl, _at(_data(records), 10))[1])
    assert _rows(_decode(impl, _at(_data(records, codec=codec), 10))[1]) == plain
    assert [row[0] for row in plain] == list(range(10, 60))


def test_header_names_are_utf8_with_invalid_bytes_replaced_and_null_as_empty(
    impl: ModuleType,
) -> None:
    batch = _raw_batch(
        [(b"k", b"v", [(b"ok", b"1"), (b"\xff\xfebad", None), (None, b"3"), (b"\xc3\xa9", b"")])]
    )
    _, taken = _decode(impl, batch)
    assert _rows(taken)[0][5] == (
        ("ok", b"1"),
        ("\ufffd\ufffdbad", None),
        ("", b"3"),
        ("é", b""),
    )
    assert _rows(taken) == _expected(decode_fetched(TP, batch, 0, None).messages)


def test_a_batch_that_fails_its_crc_is_reported(impl: ModuleType) -> None:
    batch = bytearray(_at(_data([(None, b"hello", (), 1)]), 0))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="t-3: batch failed its CRC-32C check"):
        _decode(impl, bytes(batch))
    # with checks off the (still parseable) records come through
    assert _decode(impl, bytes(batch), check_crcs=False)[1].rows == 1


def test_other_magic_and_short_batches_are_corrupt(impl: ModuleType) -> None:
    batch = bytearray(_at(_data([(None, b"x", (), 1)]), 0))
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="batch with magic 1 at byte 0"):
        _decode(impl, bytes(batch))
    short = bytearray(_at(_data([(None, b"x", (), 1)]), 0))[:40]
    short[8:12] = (28).to_bytes(4, "big")  # batchLength: 40 bytes in all, under the header
    with pytest.raises(CorruptRecordError, match="shorter than its header"):
        _decode(impl, bytes(short), check_crcs=False)


def test_undecodable_records_name_the_batch_and_leave_the_builder_as_it_was(
    impl: ModuleType,
) -> None:
    decoder = ColumnDecoder(NO_END, new_builder(impl is _purecolumns))
    decoder(TP, LOG, 0, ABORTED)
    good = _at(_data([(b"k", b"fine", (("h", b"v"),), 1)]), 20)
    broken = bytearray(_at(_data([(b"k", b"value", (), 1), (b"k", b"value", (), 2)]), 21))
    broken[57:61] = (3).to_bytes(4, "big")  # a record count past the records
    with pytest.raises(
        CorruptRecordError,
        match="t-3: undecodable batch at offset 21: records end before the batch's record count",
    ):
        decoder(TP, good + bytes(broken), 20, None, check_crcs=False)
    assert _rows(decoder.take()) == _expected(decode_fetched(TP, LOG, 0, ABORTED).messages)


def test_a_decompression_failure_is_corrupt(impl: ModuleType) -> None:
    batch = bytearray(_at(_data([(None, b"x" * 100, (), 1)], codec=4), 0))
    batch[70:80] = b"\x00" * 10
    with pytest.raises(CorruptRecordError, match="undecodable batch at offset 0: ") as caught:
        _decode(impl, bytes(batch), check_crcs=False)
    assert caught.value.__cause__ is not None


def test_callbacks_cannot_change_a_builder_inside_add(impl: ModuleType) -> None:
    builder: Any = None

    def crc(view: Any) -> int:
        builder.take()
        return 0

    builder = impl.ColumnBuilder(decompress, crc, is_abort_marker)
    with pytest.raises(RuntimeError, match=r"ColumnBuilder is in add\(\)"):
        builder.add(LOG, 0, NO_END, None, True)
    assert builder.add(LOG, 0, NO_END, None, False) == 9
    assert builder.rows == 6


@needs_compiled
def test_a_compiled_builder_without_init_refuses_work() -> None:
    builder = COMPILED.ColumnBuilder.__new__(COMPILED.ColumnBuilder)
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        builder.add(LOG, 0, NO_END, None, True)
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        builder.take()


def test_builders_accumulate_fetches_until_taken(impl: ModuleType) -> None:
    builder = new_builder(impl is _purecolumns)
    decoder = ColumnDecoder(NO_END, builder)
    decoder(TP, LOG, 0, ABORTED)
    # keys k0 k4, values a b later, header names h x é (two bytes), header values 1 2
    assert (builder.rows, builder.size) == (4, 4 + 7 + 4 + 2)
    decoder(TP, _at(_data([(None, b"more", (), 9)]), 9), 9, ABORTED)
    taken = decoder.take()
    assert [row[0] for row in _rows(taken)] == [0, 1, 4, 7, 9]
    assert (builder.rows, builder.size, builder.take()[0]) == (0, 0, 0)


# -- both twins against each other and against decode_fetched -------------------------------

header_lists = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
).map(tuple)
record_lists = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=12)),
        st.one_of(st.none(), st.binary(max_size=40)),
        header_lists,
        st.integers(1_700_000_000_000 - 100_000, 1_700_000_000_000 + 100_000),
    ),
    min_size=1,
    max_size=6,
)


@st.composite
def fetched_logs(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]], int]:
    """A partition's records as a Fetch returns them: plain and transactional batches of two
    producers, some compressed or stamped with log append time, commit and abort markers, and
    the aborted transactions the broker would list; returns (records, aborted, next offset)."""
    parts: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    open_since: dict[int, int] = {}
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 7))):
        producer = draw(st.sampled_from([-1, 7, 8]))
        if producer >= 0 and producer in open_since and draw(st.booleans()):
            commit = draw(st.booleans())
            if not commit:
                aborted.append((open_since[producer], producer))
            del open_since[producer]
            parts.append(_at(_marker(producer, commit), offset))
            offset += 1
            continue
        records: list[OutgoingRecord] = draw(record_lists)
        codec = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
        log_append = draw(st.booleans())
        if producer >= 0:
            open_since.setdefault(producer, offset)
        parts.append(_at(_data(records, producer, codec=codec, log_append=log_append), offset))
        offset += len(records)
    for producer, first in open_since.items():  # still open: abort some of them too
        if draw(st.booleans()):
            aborted.append((first, producer))
            parts.append(_at(_marker(producer, False), offset))
            offset += 1
    return b"".join(parts), aborted, offset


@needs_compiled
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=fetched_logs(),
    read_committed=st.booleans(),
    cut=st.integers(0, 80),
    data=st.data(),
)
def test_both_twins_decode_like_decode_fetched(
    log: tuple[bytes, list[tuple[int, int]], int], read_committed: bool, cut: int, data: Any
) -> None:
    records, aborted, next_offset = log
    records = records[: len(records) - cut] if cut < len(records) else records
    first = int.from_bytes(records[:8], "big", signed=True)
    position = data.draw(st.integers(first, next_offset))
    end = data.draw(st.one_of(st.just(NO_END), st.integers(position, next_offset)))
    listed = aborted if read_committed else None
    compiled_result, compiled = _decode(COMPILED, records, position, listed, end)
    pure_result, pure = _decode(_purecolumns, records, position, listed, end)
    assert compiled == pure
    assert compiled_result == pure_result
    reference = decode_fetched(TP, records, position, listed)
    assert compiled_result.next_position == reference.next_position
    assert _rows(compiled) == _expected(reference.messages, end)


@needs_compiled
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=fetched_logs(),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
    read_committed=st.booleans(),
)
def test_both_twins_fail_alike_on_damaged_records(
    log: tuple[bytes, list[tuple[int, int]], int],
    flips: list[tuple[int, int]],
    read_committed: bool,
) -> None:
    """With CRC checks off, damaged bytes reach the record parser: the twins raise the same
    error or return the same bytes (and the compiled one reads nothing out of bounds)."""
    damaged = bytearray(log[0])
    for where, mask in flips:
        damaged[where % len(damaged)] ^= mask
    listed = log[1] if read_committed else None
    outcomes: list[tuple[Any, Any]] = []
    for impl in (COMPILED, _purecolumns):
        try:
            result, taken = _decode(impl, bytes(damaged), 0, listed, NO_END, check_crcs=False)
            outcomes.append((result, taken))
        except Exception as exc:  # CorruptRecordError, or what is_abort_marker lets through
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


# -- through a real consumer and broker -----------------------------------------------------------


async def test_a_consumer_with_the_column_decoder_reads_what_it_reads_as_messages(
    memory_broker: Broker,
) -> None:
    """Committed and aborted transactions, gzip, headers and null keys, through Fetch from an
    in-process broker: the columns hold exactly the Messages of the default decoder, under
    both isolation levels, and the consumer's position moves past the markers alike."""
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    tp = TopicPartition("columns", 0)
    async with Admin(bootstrap) as admin:
        await admin.create_topic(tp.topic, 1)
    async with Producer(bootstrap, transactional_id="columns", compression="gzip") as producer:
        await producer.init_transactions()
        for attempt, commit in ((0, True), (1, False), (2, True)):
            producer.begin_transaction()
            for i in range(30):
                await producer.send(
                    tp.topic,
                    f"{attempt}-{i}".encode(),
                    None if i % 3 else f"k{i}".encode(),
                    partition=0,
                    headers=[("n", str(i).encode()), ("empty", None)] if i % 2 else [],
                )
            await producer.flush()
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    for isolation in ("read_committed", "read_uncommitted"):
        async with Consumer(bootstrap, isolation_level=isolation) as plain:
            plain.assign([tp])
            plain.seek(tp, 0)
            end = (await plain.end_offsets([tp]))[tp]
            messages = []
            while await plain.position(tp) < end:
                messages += await plain.poll(200)
        decoder = ColumnDecoder(NO_END)
        async with Consumer(bootstrap, isolation_level=isolation, decoder=decoder) as columnar:
            columnar.assign([tp])
            columnar.seek(tp, 0)
            while await columnar.position(tp) < end:
                assert await columnar.poll(200) == []
        rows = _rows(decoder.take())
        assert rows == _expected(messages)
        assert len(rows) == (60 if isolation == "read_committed" else 90)
