# Encoding and decoding a batch's records and the fields of records of fixed layout, compiled
# (lockgate.protocol._records) and pure (lockgate.protocol._purerecords): every rule is checked
# against both, and hypothesis checks that both give the same records as the batch was built
# from, and the same answer (the same records, or ValueError) on damaged input. Under CI
# (CI=true) the compiled one must have been built: a missing compiler must not go unnoticed
# behind the fallback.
from __future__ import annotations

import os
import struct
from collections import OrderedDict
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.protocol import _purerecords, fastpath
from lockgate.protocol.records import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    build_batch,
    encode_record,
    iter_records,
    parse_header,
    set_log_append_time,
)

COMPILED = fastpath.load(pure=False)
BUILT = COMPILED.IMPLEMENTATION == "compiled"


def implementations() -> list[Any]:
    compiled = pytest.param(
        COMPILED,
        id="compiled",
        marks=pytest.mark.skipif(
            not BUILT and os.environ.get("CI") != "true", reason="the extension is not built"
        ),
    )
    return [compiled, pytest.param(_purerecords, id="pure")]


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    assert request.node.callspec.id.split("-")[0] == module.IMPLEMENTATION
    return module


def skip_unless_built() -> None:
    """(CI fails in test_ci_runs_the_compiled_decoder instead)"""
    if not BUILT and os.environ.get("CI") != "true":
        pytest.skip("the extension is not built")


def test_ci_runs_the_compiled_decoder() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("checked under CI, where the build must have compiled the extension")
    assert BUILT, "lockgate.protocol._records was not built: pip install -e . needs gcc"
    expected = "pure" if os.environ.get(fastpath.PURE_PYTHON_VARIABLE) == "1" else "compiled"
    assert expected == fastpath.IMPLEMENTATION


def test_the_environment_variable_selects_the_pure_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fastpath.PURE_PYTHON_VARIABLE, "1")
    assert fastpath.load() is _purerecords
    monkeypatch.setenv(fastpath.PURE_PYTHON_VARIABLE, "0")
    assert fastpath.load() is COMPILED


def decode(impl: ModuleType, batch: bytes) -> Any:
    header = parse_header(batch)
    append_time = header.max_timestamp if header.log_append_time else None
    return impl.decode_records(
        batch, HEADER_SIZE, len(batch), header.record_count, header.base_offset,
        header.base_timestamp, append_time,
    )  # fmt: skip


# -- decode_records --------------------------------------------------------------------------


def test_records_with_their_offsets_timestamps_keys_and_values(impl: ModuleType) -> None:
    body = (
        encode_record(0, 0, b"k", b"v")
        + encode_record(1, 5, None, b"no key", (("h", b"header"),))
        + encode_record(2, -3, b"no value", None)
        + encode_record(3, 300, b"", b"")
        + encode_record(4, 1, b"\x00" * 200, b"\xff" * 9000)  # multi-byte lengths
    )
    batch = build_batch([], encoded=body, record_count=5, base_offset=100, timestamp_ms=1_000)
    assert decode(impl, batch) == [
        (100, 1_000, b"k", b"v"),
        (101, 1_005, None, b"no key"),
        (102, 997, b"no value", None),
        (103, 1_300, b"", b""),
        (104, 1_001, b"\x00" * 200, b"\xff" * 9000),
    ]


def test_encoded_records_are_what_build_batch_writes(impl: ModuleType) -> None:
    pairs = [(b"k", b"v"), (None, b"no key"), (b"no value", None), (b"", b""),
             (b"\x00" * 200, b"\xff" * 9000)]  # fmt: skip
    assert impl.encode_records(pairs) == b"".join(
        encode_record(i, 0, key, value) for i, (key, value) in enumerate(pairs)
    )
    assert impl.encode_records([]) == b""
    assert impl.encode_records([(bytearray(b"k"), memoryview(b"v"))]) == encode_record(
        0, 0, b"k", b"v"
    )
    batch = build_batch(pairs, base_offset=7)
    assert [(key, value) for _o, _t, key, value in decode(impl, batch)] == pairs


@pytest.mark.parametrize("records", [[[b"k", b"v"]], [(b"k",)], [(b"k", 5)], [(3, None)], 5])
def test_encoding_anything_but_pairs_of_bytes_is_a_type_error(
    impl: ModuleType, records: Any
) -> None:
    with pytest.raises(TypeError):
        impl.encode_records(records)


def test_log_append_time_is_every_record_s_timestamp(impl: ModuleType) -> None:
    batch = bytearray(build_batch([(b"a", b"1"), (b"b", b"2")], timestamp_ms=10))
    set_log_append_time(batch, 7_777)
    assert parse_header(bytes(batch)).attributes & TIMESTAMP_TYPE_BIT
    assert [ts for _, ts, _, _ in decode(impl, bytes(batch))] == [7_777, 7_777]


def test_a_section_within_a_larger_buffer(impl: ModuleType) -> None:
    records = encode_record(0, 0, b"k", b"v") + encode_record(1, 0, b"k2", b"v2")
    data = b"junk" + records + b"trailing"
    assert impl.decode_records(data, 4, 4 + len(records), 2, 0, 0, None) == [
        (0, 0, b"k", b"v"),
        (1, 0, b"k2", b"v2"),
    ]
    # fewer records than the count: the section ends inside the third
    with pytest.raises(ValueError):
        impl.decode_records(data, 4, 4 + len(records), 3, 0, 0, None)
    # bytes after `count` records are not read
    assert len(impl.decode_records(data, 4, len(data), 1, 0, 0, None)) == 1


def test_keys_and_values_are_bytes_whatever_the_buffer() -> None:
    batch = build_batch([(b"k", b"v")])
    for buffer in (bytearray(batch), memoryview(batch)):
        ((_, _, key, value),) = iter_records(buffer)  # type: ignore[arg-type]
        assert type(key) is bytes and type(value) is bytes
    if BUILT:  # the compiled twin reads any buffer itself
        records = encode_record(0, 0, b"k", b"v")
        decoded = COMPILED.decode_records(memoryview(records), 0, len(records), 1, 0, 0, None)
        assert decoded == [(0, 0, b"k", b"v")]


def varint(value: int) -> bytes:
    """A zigzag varint of any width (no 10-byte limit), for building damaged records."""
    raw = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def record(*parts: bytes) -> bytes:
    body = b"".join(parts)
    return varint(len(body)) + body


@pytest.mark.parametrize(
    ("name", "section", "count"),
    [
        ("a cut length varint", b"\x80", 1),
        ("a record past the section", varint(50) + b"\x00" * 10, 1),
        ("a negative record length", varint(-2), 1),
        ("a key past its record", record(b"\x00", varint(0), varint(0), varint(5), b"ab"), 1),
        (
            "a value past its record",
            record(b"\x00", varint(0), varint(0), varint(-1), varint(3), b"a"),
            1,
        ),
        ("an empty record (no attributes)", record(), 1),
        ("a cut offset delta", record(b"\x00", varint(0), b"\xff"), 1),
        ("an 11-byte varint", record(b"\x00", b"\xff" * 10 + b"\x01", varint(0)), 1),
        ("an offset past int64", record(b"\x00", varint(0), varint(2**62), varint(-1) * 2), 1),
    ],
)
def test_damage_is_a_value_error(impl: ModuleType, name: str, section: bytes, count: int) -> None:
    base_offset = 2**62 if "int64" in name else 0
    with pytest.raises(ValueError):
        impl.decode_records(section, 0, len(section), count, base_offset, 0, None)


def test_a_section_outside_the_buffer_is_a_value_error(impl: ModuleType) -> None:
    for start, end in ((-1, 2), (3, 2), (0, 5)):
        with pytest.raises(ValueError):
            impl.decode_records(b"\x00\x00\x00\x00", start, end, 0, 0, 0, None)


def test_a_ten_byte_varint_keeps_its_low_64_bits(impl: ModuleType) -> None:
    # -2**63 as zigzag is 2**64 - 1: ten bytes, the last one 0x01
    delta = b"\xff" * 9 + b"\x01"
    section = record(b"\x00", delta, varint(0), varint(-1), varint(-1))
    ((_, timestamp, _, _),) = impl.decode_records(section, 0, len(section), 1, 0, 0, None)
    assert timestamp == -(2**63)


# hypothesis: random records, encoded by the builder, decode to themselves in both twins; a
# batch damaged anywhere decodes the same in both (the same records, or ValueError in both).

fields = st.one_of(st.none(), st.binary(max_size=40))
records = st.lists(
    st.tuples(
        fields,
        fields,
        st.integers(-(2**40), 2**40),
        st.lists(st.tuples(st.text(max_size=4), fields), max_size=2).map(tuple),
    ),
    max_size=12,
)


def encode(batch_records: list[Any], base_offset: int, base_timestamp: int) -> bytes:
    body = b"".join(
        encode_record(i, delta, key, value, headers)
        for i, (key, value, delta, headers) in enumerate(batch_records)
    )
    return build_batch(
        [], encoded=body, record_count=len(batch_records), base_offset=base_offset,
        timestamp_ms=base_timestamp,
    )  # fmt: skip


def outcome(impl: ModuleType, batch: bytes, count: int) -> Any:
    try:
        return impl.decode_records(batch, HEADER_SIZE, len(batch), count, 0, 0, None)
    except ValueError:
        return ValueError


@settings(max_examples=300, deadline=None)
@given(
    batch_records=records,
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(0, 2**50),
)
def test_both_twins_decode_what_was_encoded(
    batch_records: list[Any], base_offset: int, base_timestamp: int
) -> None:
    batch = encode(batch_records, base_offset, base_timestamp)
    expected = [
        (base_offset + i, base_timestamp + delta, key, value)
        for i, (key, value, delta, _headers) in enumerate(batch_records)
    ]
    assert decode(_purerecords, batch) == expected
    assert iter_records(batch) == expected
    if BUILT:
        assert decode(COMPILED, batch) == expected


@settings(max_examples=500, deadline=None)
@given(
    batch_records=records,
    damage=st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(0, 2**16),
    extra=st.integers(-2, 3),
)
def test_both_twins_agree_on_damaged_input(
    batch_records: list[Any], damage: list[tuple[int, int]], cut: int, extra: int
) -> None:
    skip_unless_built()
    batch = bytearray(encode(batch_records, 0, 0))
    for at, byte in damage:
        position = HEADER_SIZE + at % max(len(batch) - HEADER_SIZE, 1)
        if position < len(batch):
            batch[position] = byte
    damaged = bytes(batch[: HEADER_SIZE + cut % (len(batch) - HEADER_SIZE + 1)])
    count = max(len(batch_records) + extra, 0)
    assert outcome(COMPILED, damaged, count) == outcome(_purerecords, damaged, count)


# -- unpack_fields ---------------------------------------------------------------------------


def test_fields_of_each_kind(impl: ModuleType) -> None:
    data = (
        struct.pack(">hiq", -2, 2**31 - 1, -(2**63))
        + struct.pack(">h", len("grüß".encode()))
        + "grüß".encode()
        + struct.pack(">h", -1)
        + struct.pack(">h", 0)
        + b"trailing"
    )
    assert impl.unpack_fields(data, "hiqsss") == (-2, 2**31 - 1, -(2**63), "grüß", None, "")
    assert impl.unpack_fields(data, "") == ()
    # '$': the bytes read so far (here: all but the trailing ones)
    assert impl.unpack_fields(data, "$hiqsss$") == (
        0,
        -2,
        2**31 - 1,
        -(2**63),
        "grüß",
        None,
        "",
        26,
    )


@pytest.mark.parametrize(
    ("data", "layout"),
    [
        (b"\x00", "h"),
        (b"\x00\x00\x00", "i"),
        (b"\x00" * 7, "q"),
        (b"\x00\x05abc", "s"),  # a cut string is damage, not a shorter string
        (b"\x00\x02\xff\xfe", "s"),  # not UTF-8
        (b"\x00\x00", "x"),
    ],
)
def test_fields_damage_is_a_value_error(impl: ModuleType, data: bytes, layout: str) -> None:
    with pytest.raises(ValueError):
        impl.unpack_fields(data, layout)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=30), layout=st.text("hiqs$", max_size=6))
def test_both_twins_unpack_the_same_fields(data: bytes, layout: str) -> None:
    skip_unless_built()

    def unpack(impl: ModuleType) -> Any:
        try:
            return impl.unpack_fields(data, layout)
        except ValueError:
            return ValueError

    assert unpack(COMPILED) == unpack(_purerecords)


# -- apply_offset_commits, put_records ----------------------------------------------------------
# (what the records mean is coordinator/group/records.py's; test_records.py there checks that
# apply_offset_commits accepts exactly the records offset_commit passes in lockgate's form)


def commit_key(group: bytes | None, topic: bytes | None, partition: int, version: int = 1) -> bytes:
    def name(raw: bytes | None) -> bytes:
        return struct.pack(">h", -1) if raw is None else struct.pack(">h", len(raw)) + raw

    return struct.pack(">h", version) + name(group) + name(topic) + struct.pack(">i", partition)


def commit_value(offset: int, metadata: bytes | None = b"", version: int = 3) -> bytes:
    size = struct.pack(">h", -1) if metadata is None else struct.pack(">h", len(metadata))
    epoch = struct.pack(">i", -1) if version >= 3 else b""
    return (
        struct.pack(">hq", version, offset)
        + epoch
        + size
        + (metadata or b"")
        + struct.pack(">q", 1_700_000_000_000)
    )


def as_records(pairs: list[tuple[bytes | None, bytes | None]]) -> list[Any]:
    return [(offset, 0, key, value) for offset, (key, value) in enumerate(pairs)]


def test_offset_commits_go_to_their_groups_records_in_order(impl: ModuleType) -> None:
    a0, a1, b0 = commit_key(b"a", b"t", 0), commit_key(b"a", b"t", 1), commit_key(b"b", b"t", 0)
    groups: dict[str, dict[bytes, bytes]] = {"a": {a1: b"old"}, "b": {}}
    records = as_records(
        [
            (a0, commit_value(1)),
            (None, b"no key: passed over"),
            (b0, commit_value(2, None)),  # a null metadata
            (a0, commit_value(3, "grüß".encode())),  # the latest wins
            (a1, None),  # a tombstone
            (commit_key(b"b", b"t", 9), None),  # a tombstone of no offset
        ]
    )
    assert impl.apply_offset_commits(records, 0, groups) == len(records)
    assert groups == {"a": {a0: commit_value(3, "grüß".encode())}, "b": {b0: commit_value(2, None)}}
    assert impl.apply_offset_commits(records, len(records), groups) == len(records)
    assert impl.apply_offset_commits([], 0, groups) == 0


def test_older_offset_values_are_sound(impl: ModuleType) -> None:
    key = commit_key(b"g", b"t", 0)
    for version in (0, 1, 2, -1):  # (v1's expire timestamp after them is not read)
        groups: dict[str, dict[bytes, bytes]] = {"g": {}}
        value = commit_value(5, b"m", version) + b"\x00" * 8
        assert impl.apply_offset_commits(as_records([(key, value)]), 0, groups) == 1
        assert groups == {"g": {key: value}}


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("a group metadata key", struct.pack(">hh", 2, 1) + b"g", b"\x00\x03"),
        ("a consumer-protocol key", struct.pack(">hh", 3, 1) + b"g", None),
        ("a key version 0", commit_key(b"g", b"t", 0, version=0), commit_value(1)),
        ("a null group", commit_key(None, b"t", 0), commit_value(1)),
        ("a null topic", commit_key(b"g", None, 0), commit_value(1)),
        ("bytes after the partition", commit_key(b"g", b"t", 0) + b"\x00", commit_value(1)),
        ("a key cut short", commit_key(b"g", b"t", 0)[:-1], commit_value(1)),
        ("a group cut short", commit_key(b"g", b"t", 0)[:4], commit_value(1)),
        ("a key of one byte", b"\x00", commit_value(1)),
        ("a group not UTF-8", commit_key(b"\xff", b"t", 0), commit_value(1)),
        ("a topic not UTF-8", commit_key(b"g", b"\xc3", 0), commit_value(1)),
        ("a value of one byte", commit_key(b"g", b"t", 0), b"\x00"),
        ("a value cut short", commit_key(b"g", b"t", 0), commit_value(1)[:-1]),
        ("a v3 value read as v2's", commit_key(b"g", b"t", 0), commit_value(1)[:-4]),
        ("a metadata cut short", commit_key(b"g", b"t", 0), commit_value(1, b"abc")[:16]),
        ("a metadata not UTF-8", commit_key(b"g", b"t", 0), commit_value(1, b"\xe2\x82")),
        ("a group not in the groups", commit_key(b"other", b"t", 0), commit_value(1)),
        ("a key not of bytes", bytearray(commit_key(b"g", b"t", 0)), commit_value(1)),
        ("a value not of bytes", commit_key(b"g", b"t", 0), memoryview(commit_value(1))),
    ],
)
def test_a_record_not_applied_is_the_callers(
    impl: ModuleType, name: str, key: Any, value: Any
) -> None:
    """The walk stops at it, having applied what came before, and goes on from the next."""
    before, after = commit_key(b"g", b"t", 1), commit_key(b"g", b"t", 2)
    records = as_records([(before, commit_value(1)), (key, value), (after, commit_value(2))])
    groups: dict[str, dict[bytes, bytes]] = {"g": {}}
    assert impl.apply_offset_commits(records, 0, groups) == 1
    assert groups == {"g": {before: commit_value(1)}}
    assert impl.apply_offset_commits(records, 2, groups) == 3
    assert groups == {"g": {before: commit_value(1), after: commit_value(2)}}


def test_a_group_held_in_another_mapping_is_the_callers(impl: ModuleType) -> None:
    records = as_records([(commit_key(b"g", b"t", 0), commit_value(1))])
    assert impl.apply_offset_commits(records, 0, {"g": OrderedDict()}) == 0
    with pytest.raises(ValueError):
        impl.apply_offset_commits(records, -1, {})


def test_put_records_keeps_the_latest_value_of_each_key(impl: ModuleType) -> None:
    into = {b"gone": b"1", b"kept": b"2"}
    records = as_records(
        [(b"new", b"1"), (None, b"x"), (b"gone", None), (b"new", b"3"), (b"never", None)]
    )
    assert impl.put_records(records, into) is None
    assert into == {b"kept": b"2", b"new": b"3"}


# hypothesis: offset commits of a few groups, sound, in other forms, of other kinds, damaged
# anywhere; both twins stop at the same records and leave the same groups.

names = st.sampled_from([b"a", b"b", "grüß".encode(), b"", b"\xff"])
versions = st.sampled_from([3, 3, 2, 1, 0, 4, -1])
sound_pairs = st.tuples(
    st.builds(commit_key, names, names, st.integers(-2, 2), st.sampled_from([1, 1, 1, 0, 2])),
    st.one_of(
        st.none(),
        st.builds(commit_value, st.integers(-1, 2**40), st.one_of(st.none(), names), versions),
    ),
)
damaged_pairs = st.tuples(
    st.tuples(sound_pairs, st.integers(0, 40), st.integers(0, 255), st.integers(0, 40)).map(
        lambda t: damage(t[0][0], t[1], t[2], t[3])
    ),
    st.one_of(st.none(), st.binary(max_size=30)),
)


def damage(data: bytes, at: int, byte: int, cut: int) -> bytes:
    changed = bytearray(data)
    if changed:
        changed[at % len(changed)] = byte
    return bytes(changed[: max(len(changed) - cut % 4, 0)])


@settings(max_examples=400, deadline=None)
@given(
    pairs=st.lists(st.one_of(sound_pairs, damaged_pairs, st.tuples(st.none(), fields)), max_size=12)
)
def test_both_twins_apply_the_same_offset_commits(pairs: list[Any]) -> None:
    skip_unless_built()
    records = as_records(pairs)
    outcomes = []
    for impl in (COMPILED, _purerecords):
        groups: dict[str, dict[bytes, bytes]] = {"a": {}, "grüß": {b"x": b"y"}, "": {}}
        stops, index = [], 0
        while (index := impl.apply_offset_commits(records, index, groups)) < len(records):
            stops.append(index)
            index += 1
        image: dict[bytes, bytes] = {}
        impl.put_records(records, image)
        outcomes.append((stops, groups, image))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=9000)),
        max_size=200,
    )
)
def test_both_twins_encode_the_same_records(pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    encoded = _purerecords.encode_records(pairs)
    if BUILT:
        assert COMPILED.encode_records(pairs) == encoded
    batch = build_batch(pairs, timestamp_ms=5)
    assert iter_records(batch) == [(i, 5, key, value) for i, (key, value) in enumerate(pairs)]
