"""`lockgate dump-log` on hand-made files: batches and records, control markers, the internal
topics' decoders (and raw output for record types they do not know), indexes with their sanity
check, producer snapshots, JSON lines, and damaged files reported rather than crashing."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from lockgate.cli import main
from lockgate.coordinator.group import records as group_records
from lockgate.coordinator.txn import log as txn_log
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.producer_state import ProducerEntry, ProducerStateTable
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    assign_offset,
    build_batch,
    build_control_batch,
    compress,
    encode_record,
)
from lockgate.protocol.rewrite import DELETE_HORIZON_BIT
from lockgate.tools.dump_log import decode_offsets_record, decode_transaction_record

SEGMENT = "00000000000000000100.log"
GZIP = 1


def placed(batch: bytes, base_offset: int) -> bytes:
    out = bytearray(batch)
    assign_offset(out, base_offset, 3)
    return bytes(out)


def write_segment(directory: Path) -> Path:
    records = encode_record(0, 0, b"k1", b"v1", (("h", b"x"),)) + encode_record(1, 5, None, b"v2")
    data = placed(
        build_batch(
            [],
            encoded=compress(GZIP, records),
            record_count=2,
            timestamp_ms=1_000,
            max_timestamp_ms=1_005,
            attributes=TRANSACTIONAL_BIT | GZIP,
            producer_id=7,
            producer_epoch=2,
            base_sequence=10,
        ),
        100,
    )
    data += placed(build_control_batch(7, 2, True, 5, 2_000), 102)
    path = directory / SEGMENT
    path.write_bytes(data)
    return path


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["dump-log", *args])
    return code, capsys.readouterr().out.splitlines()


def test_batches_records_and_markers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_segment(tmp_path)
    code, lines = dump(capsys, "--files", str(path))
    assert code == 0
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 100"]
    first, marker = lines[2], lines[3]
    assert first.startswith(
        "baseOffset: 100 lastOffset: 101 count: 2 baseSequence: 10 lastSequence: 11 "
        "producerId: 7 producerEpoch: 2 partitionLeaderEpoch: 3 isTransactional: true "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1005 size: "
    )
    assert "compresscodec: gzip" in first and first.endswith("isvalid: true baseTimestamp: 1000")
    assert "baseOffset: 102" in marker and "isControl: true" in marker
    assert len(lines) == 4  # no records without --deep-iteration or --print-data-log
    _code, deep = dump(capsys, "--files", str(path), "--deep-iteration")
    assert deep[3] == (
        "| offset: 100 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 10 headerKeys: [h]"
    )
    assert deep[-1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")
    _code, data = dump(capsys, "--files", str(path), "--print-data-log")
    assert data[3].endswith("key: k1 payload: v1") and data[4].endswith(
        "headerKeys: [] payload: v2"
    )
    _code, as_json = dump(capsys, "--files", str(path), "--print-data-log", "--json")
    items = [json.loads(line) for line in as_json]
    assert [item["type"] for item in items] == [
        "file",
        "segment",
        "batch",
        "record",
        "record",
        "batch",
        "record",
    ]
    assert items[3]["key"] == "k1" and "key" not in items[4] and items[3]["headerKeys"] == ["h"]
    assert items[6]["endTxnMarker"] == "COMMIT" and items[2]["isvalid"] is True


def test_damage_is_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_segment(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good + good[:30])  # a torn last batch
    code, lines = dump(capsys, "--files", str(path))
    assert code == 1
    assert lines[-1].startswith(f"Found 30 invalid bytes at position {len(good)} of {path}")
    in_gzip_header = bytearray(good)
    in_gzip_header[65] ^= 0xFF  # the gzip header's mtime: the CRC fails, the records still read
    path.write_bytes(bytes(in_gzip_header))
    code, lines = dump(capsys, "--files", str(path), "--print-data-log")
    assert code == 1 and "isvalid: false" in lines[2]
    assert lines[3].endswith("key: k1 payload: v1") and "isvalid: true" in lines[5]
    in_records = bytearray(good)
    in_records[90] ^= 0xFF  # inside the deflate stream
    path.write_bytes(bytes(in_records))
    code, lines = dump(capsys, "--files", str(path), "--print-data-log")
    assert code == 1
    assert lines[3].startswith("| records of the batch at position 0 do not parse")
    assert lines[5].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")  # the walk goes on
    missing = tmp_path / "00000000000000000000.log"
    code, lines = dump(capsys, "--files", f"{missing},{tmp_path / 'x.txt'}")
    assert code == 1 and lines[1].startswith(f"cannot read {missing}")


def test_offsets_decoder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    commit_key = group_records.offset_key("g", "t", 3)
    commit = group_records.offset_value(group_records.CommittedOffset(42, 1, "m", 9_000))
    subscription = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)  # v0, null data
    assignment = struct.pack(">hih", 1, 1, 1) + b"t" + struct.pack(">iiii", 2, 0, 3, 0)
    member = group_records.MemberRecord(
        "m-1", None, "c", "/127.0.0.1", 300, 45, subscription, assignment
    )
    metadata = group_records.group_value(
        group_records.GroupRecord("consumer", 4, "range", "m-1", 8_000, (member,))
    )
    unknown_key = struct.pack(">h", 5) + b"\x00\x01g"  # a record type the codecs do not know
    batch = build_batch(
        [
            (commit_key, commit),
            (group_records.group_key("g"), metadata),
            (commit_key, None),
            (unknown_key, b"\x00\x00"),
        ],
        timestamp_ms=1,
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    code, lines = dump(capsys, "--files", str(path), "--offsets-decoder", "--json")
    assert code == 0
    records = [json.loads(line) for line in lines if json.loads(line)["type"] == "record"]
    assert records[0]["key"] == {"type": "1", "data": {"group": "g", "topic": "t", "partition": 3}}
    assert records[0]["payload"]["data"] == {
        "offset": 42,
        "leaderEpoch": 1,
        "metadata": "m",
        "commitTimestamp": 9_000,
    }
    group = records[1]["payload"]["data"]
    assert (group["protocol"], group["generation"], group["members"][0]["memberId"]) == (
        "range",
        4,
        "m-1",
    )
    assert group["members"][0]["subscription"] == {"topics": ["t"], "userData": None}
    assert group["members"][0]["assignment"] == {
        "assignedPartitions": [{"topic": "t", "partitions": [0, 3]}],
        "userData": "",
    }
    assert records[2]["payload"] == "<DELETE>"
    assert records[3]["key"] == {"type": "5", "hex": unknown_key.hex()}
    assert records[3]["payload"] == {"hex": "0000"}


def test_transaction_log_decoder() -> None:
    meta = TxnMetadata(
        "tx",
        producer_id=11,
        producer_epoch=3,
        timeout_ms=60_000,
        state=TxnState.PREPARE_COMMIT,
        partitions=frozenset({("a", 1), ("a", 0)}),
        start_ms=5,
        last_update_ms=6,
        next_producer_id=12,
        next_producer_epoch=0,
        two_phase_commit=True,
        client_transaction_version=2,
    )
    key, payload = decode_transaction_record(txn_log.encode_key("tx"), txn_log.encode_value(meta))
    assert key == {"type": "0", "data": {"transactionalId": "tx"}}
    data = payload["data"]
    assert (data["producerId"], data["producerEpoch"], data["transactionStatus"]) == (
        11,
        3,
        "PrepareCommit",
    )
    assert data["transactionPartitions"] == [{"topic": "a", "partitionIds": [0, 1]}]
    assert (data["nextProducerId"], data["nextProducerEpoch"], data["twoPhaseCommit"]) == (
        12,
        0,
        True,
    )
    assert decode_transaction_record(txn_log.encode_key("tx"), None)[1] == "<DELETE>"
    damaged = decode_transaction_record(txn_log.encode_key("tx"), b"\x00\x01\x00")[1]
    assert "error" in damaged and damaged["hex"] == "000100"
    assert decode_transaction_record(b"\x00\x07zz", b"")[0] == {"type": "7", "hex": "00077a7a"}
    assert decode_offsets_record(None, None) == (None, None)


def test_indexes_and_sanity_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_segment(tmp_path)
    first_size = int.from_bytes(path.read_bytes()[8:12], "big") + 12
    index = tmp_path / SEGMENT.replace(".log", ".index")
    index.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 2, first_size))
    time_index = tmp_path / SEGMENT.replace(".log", ".timeindex")
    time_index.write_bytes(struct.pack(">qi", 1_000, 1) + struct.pack(">qi", 2_000, 2))
    txn_index = tmp_path / SEGMENT.replace(".log", ".txnindex")
    txn_index.write_bytes(struct.pack(">hqqqq", 0, 7, 100, 102, 100))
    files = f"{index},{time_index},{txn_index}"
    code, lines = dump(capsys, "--files", files)
    assert code == 0
    assert lines[1:3] == ["offset: 100 position: 0", f"offset: 102 position: {first_size}"]
    assert lines[4:6] == ["timestamp: 1000 offset: 101", "timestamp: 2000 offset: 102"]
    assert lines[7] == (
        "version: 0 producerId: 7 firstOffset: 100 lastOffset: 102 lastStableOffset: 100"
    )
    code, lines = dump(capsys, "--files", f"{files},{path}", "--index-sanity-check")
    assert code == 0
    assert [line for line in lines if line.endswith("sanity check.")] == [
        f"{index} passed sanity check.",
        f"{time_index} passed sanity check.",
        f"{txn_index} passed sanity check.",
    ]
    index.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 1, 7) + b"\x00")
    code, lines = dump(capsys, "--files", str(index), "--index-sanity-check")
    assert code == 1
    assert f"{index}: size 17 is not a multiple of 8" in lines
    assert f"{index}: offset 101 is not in a batch at position 7" in lines
    assert lines[-1] == f"{index} failed sanity check."


def test_producer_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = ProducerStateTable()
    table.put(ProducerEntry(7, 2, 10, 11, 101, 1_500, -1, 5))
    path = tmp_path / "00000000000000000103.snapshot"
    path.write_bytes(table.snapshot(103))
    code, lines = dump(capsys, "--files", str(path))
    assert code == 0
    assert lines[1:] == [
        "Producer state snapshot at offset 103",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: -1 "
        "firstSequence: 10 lastSequence: 11 lastOffset: 101 lastTimestamp: 1500",
    ]
    path.write_bytes(table.snapshot(103)[:-1])
    code, lines = dump(capsys, "--files", str(path))
    assert code == 1 and "damaged" in lines[-1]


def test_delete_horizon_of_a_cleaned_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tombstone = build_batch([(b"k", None)], timestamp_ms=86_400_000, attributes=DELETE_HORIZON_BIT)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(tombstone)
    _code, lines = dump(capsys, "--files", str(path), "--json")
    assert json.loads(lines[2])["deleteHorizonMs"] == 86_400_000
