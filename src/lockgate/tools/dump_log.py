# tools/dump_log.py — `lockgate dump-log`, kafka-dump-log.sh for lockgate's data directory:
# segment files (.log) batch by batch and, on request, record by record with control markers
# and the internal topics' records decoded (__transaction_state, __consumer_offsets); the
# indexes (.index, .timeindex, .txnindex) and producer-state snapshots (.snapshot).
#
# Invariants: files are only ever opened for reading (safe beside a running broker, which may
# append meanwhile: the tool shows what was there when it read); a torn or corrupt tail is
# reported as such and ends that file's dump, never the tool. Records of a key type the codecs
# do not know (newer coordinator record types) are shown raw, type plus hex.
#
# With --remote-config (tiered storage) it reads the object store instead: --topic/--partition
# --offset downloads the .log of the remote segment holding the offset (the manifests say
# which) and dumps it as a local one; --remote-list lists the partition's remote segments,
# superseded copies and orphaned objects. The store is only read.
from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import struct
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.coordinator.group import records as group_records
from lockgate.coordinator.txn import log as txn_log
from lockgate.log.producer_state import ProducerStateTable
from lockgate.log.txn_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from lockgate.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_SIZE,
    BatchHeader,
    Record,
    compute_crc,
    parse_header,
    peek_batch_size,
    read_records,
)
from lockgate.protocol.rewrite import has_delete_horizon
from lockgate.storage.object_store import ObjectStore
from lockgate.tiered.layout import LOG, RemoteSegment
from lockgate.tools.common import EXIT_FAILURE, EXIT_OK, ToolError, non_negative_int
from lockgate.tools.remote import (
    RemotePartition,
    open_store,
    remote_options,
    remote_partition,
    remote_tool,
    store_errors,
    stored_topic_ids,
)
from lockgate.tools.table import render

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

Item = dict[str, Any]
Decoder = Callable[[bytes | None, bytes | None], tuple[Any, Any]]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "dump-log",
        parents=[remote_options()],
        help="print segment, index and snapshot files of a data directory (kafka-dump-log.sh)",
    )
    parser.add_argument(
        "--files",
        metavar="F[,F...]",
        help=".log .index .timeindex .txnindex .snapshot files (read-only)",
    )
    parser.add_argument(
        "--print-data-log", action="store_true", help="records with their keys and values"
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="every record (without keys and values)"
    )
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode __transaction_state records (implies --print-data-log)",
    )
    decoders.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode __consumer_offsets records (implies --print-data-log)",
    )
    parser.add_argument(
        "--index-sanity-check", action="store_true", help="only check the index files"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    remote = parser.add_argument_group("tiered storage (with --remote-config)")
    remote.add_argument("--topic", help="the topic whose remote segment to read")
    remote.add_argument("--partition", type=non_negative_int, default=0, help="(default 0)")
    remote.add_argument(
        "--offset", type=non_negative_int, help="dump the remote segment holding this offset"
    )
    remote.add_argument(
        "--remote-list",
        action="store_true",
        help="list the partition's remote segments (and any orphaned objects) instead",
    )
    remote.add_argument(
        "--topic-id",
        help="which topic of that name, when the store holds objects of several (a topic "
        "deleted and created again)",
    )
    parser.set_defaults(func=_dump_log)


# ---------------------------------------------------------------------------------------------
# Output: one item per line, Kafka's `name: value` pairs as text or a JSON object.


class _Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, kind: str, item: Item, prefix: str = "") -> None:
        if self.as_json:
            print(json.dumps({"type": kind, **item}, separators=(",", ":")))
            return
        print(
            prefix + " ".join(f"{name}: {_field_text(name, value)}" for name, value in item.items())
        )

    def note(self, kind: str, message: str, **extra: Any) -> None:
        if self.as_json:
            print(json.dumps({"type": kind, "message": message, **extra}, separators=(",", ":")))
        else:
            print(message)


def _field_text(name: str, value: Any) -> str:
    # Kafka's tool prints these two as Java renders them; text output stays diffable with it
    if name == "headerKeys":
        return "[" + ",".join(value) + "]"
    if name == "deleteHorizonMs":
        return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"
    return _text(value)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _string(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


# ---------------------------------------------------------------------------------------------
# Decoders of the internal topics' records: (key, payload) as JSON-ready values, like Kafka's
# `key: {"type":..,"data":..} payload: {"version":..,"data":..}`.


def _raw(data: bytes) -> Item:
    version = struct.unpack_from(">h", data)[0] if len(data) >= 2 else None
    return {"type": str(version), "hex": data.hex()}


def decode_offsets_record(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """A __consumer_offsets record: offset commits and group metadata; other key types raw."""
    if key is None:
        return None, None if value is None else {"hex": value.hex()}
    try:
        decoded = group_records.decode_key(key)
    except (ValueError, UnicodeDecodeError):
        return _raw(key), None if value is None else {"hex": value.hex()}
    (key_version,) = struct.unpack_from(">h", key)
    if isinstance(decoded, tuple):
        group, topic, partition = decoded
        key_item: Item = {
            "type": str(key_version),
            "data": {"group": group, "topic": topic, "partition": partition},
        }
    else:
        key_item = {"type": str(key_version), "data": {"group": decoded}}
    if value is None:
        return key_item, "<DELETE>"
    (value_version,) = struct.unpack_from(">h", value) if len(value) >= 2 else (-1,)
    try:
        if isinstance(decoded, tuple):
            committed = group_records.decode_offset_value(value)
            data: Item = {
                "offset": committed.offset,
                "leaderEpoch": committed.leader_epoch,
                "metadata": committed.metadata,
                "commitTimestamp": committed.commit_timestamp,
            }
        else:
            data = _group_metadata(group_records.decode_group_value(value))
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        return key_item, {"version": str(value_version), "error": str(exc), "hex": value.hex()}
    return key_item, {"version": str(value_version), "data": data}


def _group_metadata(record: group_records.GroupRecord) -> Item:
    members = []
    for m in record.members:
        members.append(
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id,
                "clientHost": m.client_host,
                "rebalanceTimeout": m.rebalance_timeout_ms,
                "sessionTimeout": m.session_timeout_ms,
                "subscription": _consumer_protocol(m.subscription, _subscription)
                if record.protocol_type == "consumer"
                else _base64(m.subscription),
                "assignment": _consumer_protocol(m.assignment, _assignment)
                if record.protocol_type == "consumer"
                else _base64(m.assignment),
            }
        )
    return {
        "protocolType": record.protocol_type,
        "generation": record.generation,
        "protocol": record.protocol,
        "leader": record.leader,
        "currentStateTimestamp": record.state_timestamp,
        "members": members,
    }


# The consumer protocol's subscription and assignment (versions 0-3), rendered as Kafka's
# JSON converters render them: fields of later versions only when the version has them, bytes
# in base64, and "" for empty data (a member that has no assignment yet).


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        raw = self.data[self.pos : self.pos + size]
        if len(raw) != size:
            raise ValueError("string cut short")
        self.pos += size
        return raw.decode()

    def bytes_(self) -> str | None:
        size = self.take(">i")
        if size < 0:
            return None
        raw = self.data[self.pos : self.pos + size]
        if len(raw) != size:
            raise ValueError("bytes cut short")
        self.pos += size
        return _base64(raw)

    def topic_partitions(self) -> list[Item]:
        found = []
        for _ in range(max(self.take(">i"), 0)):
            topic = self.string()
            partitions = [self.take(">i") for _ in range(max(self.take(">i"), 0))]
            found.append({"topic": topic, "partitions": partitions})
        return found


def _subscription(cursor: _Cursor, version: int) -> Item:
    item: Item = {"topics": [cursor.string() for _ in range(max(cursor.take(">i"), 0))]}
    item["userData"] = cursor.bytes_()
    if version >= 1:
        item["ownedPartitions"] = cursor.topic_partitions()
    if version >= 2:
        item["generationId"] = cursor.take(">i")
    if version >= 3:
        item["rackId"] = cursor.string()
    return item


def _assignment(cursor: _Cursor, version: int) -> Item:
    del version  # every version has the same two fields
    partitions = cursor.topic_partitions()
    return {"assignedPartitions": partitions, "userData": cursor.bytes_()}


def _consumer_protocol(data: bytes, read: Callable[[_Cursor, int], Item]) -> Item | str:
    if not data:
        return ""
    cursor = _Cursor(data)
    try:
        return read(cursor, cursor.take(">h"))
    except (struct.error, ValueError, UnicodeDecodeError):
        return _base64(data)


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decode_transaction_record(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """A __transaction_state record: transactional id → producer id/epoch, state, partitions,
    timeouts and the KIP-890/KIP-939 tagged fields."""
    if key is None:
        return None, None if value is None else {"hex": value.hex()}
    try:
        transactional_id = txn_log.decode_key(key)
    except (ValueError, UnicodeDecodeError):
        return _raw(key), None if value is None else {"hex": value.hex()}
    key_item = {"type": str(txn_log.KEY_VERSION), "data": {"transactionalId": transactional_id}}
    if value is None:
        return key_item, "<DELETE>"
    (value_version,) = struct.unpack_from(">h", value) if len(value) >= 2 else (-1,)
    try:
        meta = txn_log.decode_value(transactional_id, value)
    except ValueError as exc:
        return key_item, {"version": str(value_version), "error": str(exc), "hex": value.hex()}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return key_item, {
        "version": str(value_version),
        "data": {
            "producerId": meta.producer_id,
            "producerEpoch": meta.producer_epoch,
            "transactionTimeoutMs": meta.timeout_ms,
            "transactionStatus": meta.state.display_name,
            "transactionPartitions": [
                {"topic": topic, "partitionIds": ids} for topic, ids in by_topic.items()
            ],
            "transactionLastUpdateTimestampMs": meta.last_update_ms,
            "transactionStartTimestampMs": meta.start_ms,
            "previousProducerId": meta.prev_producer_id,
            "nextProducerId": meta.next_producer_id,
            "clientTransactionVersion": meta.client_transaction_version,
            "nextProducerEpoch": meta.next_producer_epoch,
            "twoPhaseCommit": meta.two_phase_commit,
            "lastProducerEpoch": meta.last_producer_epoch,
        },
    }


# ---------------------------------------------------------------------------------------------
# Segment files


def iter_batches(data: bytes) -> Iterator[tuple[int, BatchHeader | None, int]]:
    """(position, header, size) of each batch; header None ends the walk at a torn or corrupt
    tail, whose size is the number of bytes left."""
    position = 0
    while position < len(data):
        prefix = peek_batch_size(data, position)
        left = len(data) - position
        if prefix is None:
            yield position, None, left
            return
        _base, size, magic = prefix
        if magic != 2 or size < HEADER_SIZE or size > left:
            yield position, None, left
            return
        yield position, parse_header(data, position), size
        position += size


def _batch_item(header: BatchHeader, position: int, crc_valid: bool) -> Item:
    last_sequence = header.last_sequence if header.base_sequence >= 0 else -1
    time_type = "LogAppendTime" if header.log_append_time else "CreateTime"
    return {
        "baseOffset": header.base_offset,
        "lastOffset": header.last_offset,
        "count": header.record_count,
        "baseSequence": header.base_sequence,
        "lastSequence": last_sequence,
        "producerId": header.producer_id,
        "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional,
        "isControl": header.is_control,
        # KIP-534: a cleaned batch with tombstones or markers carries the time they may go
        # in its base timestamp
        "deleteHorizonMs": header.base_timestamp if has_delete_horizon(header) else None,
        "position": position,
        time_type: header.max_timestamp,
        "size": header.size,
        "magic": header.magic,
        "compresscodec": CODEC_NAMES.get(header.compression, str(header.compression)),
        "crc": header.crc,
        "isvalid": crc_valid,
        "baseTimestamp": header.base_timestamp,  # lockgate's addition: last, so a prefix is Kafka's
    }


def _record_item(
    header: BatchHeader, record: Record, print_data: bool, decoder: Decoder | None
) -> Item:
    time_type = "LogAppendTime" if header.log_append_time else "CreateTime"
    item: Item = {
        "offset": record.offset,
        time_type: record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": (
            (header.base_sequence + record.offset - header.base_offset) % (1 << 31)
            if header.base_sequence >= 0
            else -1
        ),
        "headerKeys": [name for name, _value in record.headers],
    }
    if header.is_control:
        item.update(_control(record))
    elif decoder is not None:
        item["key"], item["payload"] = decoder(record.key, record.value)
    elif print_data:
        # as Kafka's tool: a null key or value is left out rather than printed
        if record.key is not None:
            item["key"] = _string(record.key)
        if record.value is not None:
            item["payload"] = _string(record.value)
    return item


def _control(record: Record) -> Item:
    key, value = record.key or b"", record.value or b""
    if len(key) < _CONTROL_KEY.size:
        return {"endTxnMarker": "UNKNOWN", "keyHex": key.hex()}
    kind = _CONTROL_KEY.unpack_from(key)[1]
    name = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT"}.get(kind, f"UNKNOWN({kind})")
    epoch = _CONTROL_VALUE.unpack_from(value)[1] if len(value) >= _CONTROL_VALUE.size else -1
    return {"endTxnMarker": name, "coordinatorEpoch": epoch}


def dump_segment(
    path: str,
    data: bytes,
    out: _Output,
    *,
    records: bool,
    print_data: bool,
    decoder: Decoder | None,
    base: int | None = None,
) -> bool:
    """Prints the batches (and records) of one .log file (whose base offset is in its name
    unless given); False when damage was found (a bad CRC, records that do not parse, a torn
    tail)."""
    base = _base_offset(path) if base is None else base
    intact = True
    out.note("segment", f"Log starting offset: {base}", file=path, baseOffset=base)
    for position, header, size in iter_batches(data):
        if header is None:
            out.note(
                "corrupt",
                f"Found {size} invalid bytes at position {position} of {path} (a torn or "
                "corrupt tail: the broker cuts it off at recovery)",
                position=position,
                bytes=size,
            )
            return False
        batch = data[position : position + size]
        crc_valid = header.crc == compute_crc(batch)
        intact &= crc_valid
        out.emit("batch", _batch_item(header, position, crc_valid))
        if not (records or print_data):
            continue
        try:
            parsed = read_records(batch)
        except Exception as exc:  # any codec or parse failure of a damaged batch
            out.note(
                "corrupt",
                f"| records of the batch at position {position} do not parse: {exc}",
                position=position,
            )
            intact = False
            continue
        for record in parsed:
            out.emit("record", _record_item(header, record, print_data, decoder), prefix="| ")
    return intact


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() else 0


# ---------------------------------------------------------------------------------------------
# Index files and producer snapshots


def _neighbour_log(path: str) -> bytes | None:
    log_path = os.path.splitext(path)[0] + ".log"
    try:
        with open(log_path, "rb") as file:
            return file.read()
    except OSError:
        return None


def check_offset_index(path: str, data: bytes, log: bytes | None) -> list[str]:
    """Problems of an .index file: a torn entry, offsets or positions not strictly increasing,
    and (with its .log) entries that do not point at the batch holding their offset."""
    problems = []
    if len(data) % _OFFSET_ENTRY.size:
        problems.append(f"size {len(data)} is not a multiple of {_OFFSET_ENTRY.size}")
    base = _base_offset(path)
    batches = {}
    if log is not None:
        batches = {p: h for p, h, _size in iter_batches(log) if h is not None}
    last = (-1, -1)
    usable = len(data) - len(data) % _OFFSET_ENTRY.size
    for relative, position in _OFFSET_ENTRY.iter_unpack(data[:usable]):
        if relative <= last[0] or position <= last[1]:
            problems.append(f"entry ({base + relative}, {position}) does not increase")
        header = batches.get(position)
        if log is not None and (
            header is None or not header.base_offset <= base + relative <= header.last_offset
        ):
            problems.append(f"offset {base + relative} is not in a batch at position {position}")
        last = (relative, position)
    return problems


def check_time_index(path: str, data: bytes) -> list[str]:
    problems = []
    if len(data) % _TIME_ENTRY.size:
        problems.append(f"size {len(data)} is not a multiple of {_TIME_ENTRY.size}")
    last = (-(2**63), 0)
    usable = len(data) - len(data) % _TIME_ENTRY.size
    for timestamp, relative in _TIME_ENTRY.iter_unpack(data[:usable]):
        if timestamp <= last[0] or relative < last[1]:
            problems.append(f"entry ({timestamp}, {_base_offset(path) + relative}) goes back")
        last = (timestamp, relative)
    return problems


def check_txn_index(_path: str, data: bytes) -> list[str]:
    if len(data) % TXN_ENTRY_SIZE:
        return [f"size {len(data)} is not a multiple of {TXN_ENTRY_SIZE}"]
    return []


def dump_index(path: str, data: bytes, out: _Output, sanity_only: bool) -> bool:
    suffix = os.path.splitext(path)[1]
    if suffix == ".index":
        problems = check_offset_index(path, data, _neighbour_log(path))
    elif suffix == ".timeindex":
        problems = check_time_index(path, data)
    else:
        problems = check_txn_index(path, data)
    if not sanity_only:
        base = _base_offset(path)
        if suffix == ".index":
            usable = len(data) - len(data) % _OFFSET_ENTRY.size
            for relative, position in _OFFSET_ENTRY.iter_unpack(data[:usable]):
                out.emit("index", {"offset": base + relative, "position": position})
        elif suffix == ".timeindex":
            usable = len(data) - len(data) % _TIME_ENTRY.size
            for timestamp, relative in _TIME_ENTRY.iter_unpack(data[:usable]):
                out.emit("timeindex", {"timestamp": timestamp, "offset": base + relative})
        else:
            usable = len(data) - len(data) % _TXN_ENTRY.size
            for version, producer_id, first, last, lso in _TXN_ENTRY.iter_unpack(data[:usable]):
                out.emit(
                    "txnindex",
                    {
                        "version": version,
                        "producerId": producer_id,
                        "firstOffset": first,
                        "lastOffset": last,
                        "lastStableOffset": lso,
                    },
                )
    for problem in problems:
        out.note("index-problem", f"{path}: {problem}", file=path)
    if problems:
        if sanity_only:
            out.note("sanity", f"{path} failed sanity check.", file=path, passed=False)
        return False
    if sanity_only:
        out.note("sanity", f"{path} passed sanity check.", file=path, passed=True)
    return True


def dump_snapshot(path: str, data: bytes, out: _Output) -> bool:
    loaded = ProducerStateTable.from_snapshot(data)
    if loaded is None:
        out.note("corrupt", f"{path} is not a readable producer-state snapshot (damaged)")
        return False
    table, offset = loaded
    out.note("snapshot", f"Producer state snapshot at offset {offset}", offset=offset)
    for entry in table.entries():
        out.emit(
            "producer",
            {
                "producerId": entry.producer_id,
                "producerEpoch": entry.epoch,
                "coordinatorEpoch": entry.coordinator_epoch,
                "currentTxnFirstOffset": entry.txn_first_offset,
                "firstSequence": entry.first_sequence,
                "lastSequence": entry.last_sequence,
                "lastOffset": entry.last_offset,
                "lastTimestamp": entry.timestamp,
            },
        )
    return True


# ---------------------------------------------------------------------------------------------


def _options(args: argparse.Namespace) -> tuple[Decoder | None, bool]:
    """The record decoder asked for and whether keys and values are printed."""
    decoder: Decoder | None = None
    if args.transaction_log_decoder:
        decoder = decode_transaction_record
    elif args.offsets_decoder:
        decoder = decode_offsets_record
    return decoder, args.print_data_log or decoder is not None


def _dump_log(args: argparse.Namespace) -> int:
    if args.remote_config is not None:
        return remote_tool(_dump_remote)(args)
    if args.files is None:
        print(
            "lockgate dump-log: error: give --files, or --remote-config with --topic",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    out = _Output(args.json)
    decoder, print_data = _options(args)
    healthy = True
    try:
        for path in (p.strip() for p in args.files.split(",") if p.strip()):
            out.note("file", f"Dumping {path}", file=path)
            try:
                with open(path, "rb") as file:
                    data = file.read()
            except OSError as exc:
                out.note("error", f"cannot read {path}: {exc.strerror}", file=path)
                healthy = False
                continue
            suffix = os.path.splitext(path)[1]
            if args.index_sanity_check and suffix not in (".index", ".timeindex", ".txnindex"):
                continue
            if suffix == ".log":
                healthy &= dump_segment(
                    path,
                    data,
                    out,
                    records=args.deep_iteration,
                    print_data=print_data,
                    decoder=decoder,
                )
            elif suffix in (".index", ".timeindex", ".txnindex"):
                healthy &= dump_index(path, data, out, args.index_sanity_check)
            elif suffix == ".snapshot":
                healthy &= dump_snapshot(path, data, out)
            else:
                out.note("ignored", f"Ignoring unknown file {path}", file=path)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_OK if healthy else EXIT_FAILURE


# ---------------------------------------------------------------------------------------------
# Remote segments (tiered storage)


async def _dump_remote(args: argparse.Namespace) -> int:
    store = open_store(args)
    assert store is not None  # only called with --remote-config
    return await dump_remote(args, store)


async def dump_remote(args: argparse.Namespace, store: ObjectStore) -> int:
    """--remote-config: a partition's remote segments listed, or the one holding --offset
    dumped as a local .log file is."""
    if args.files is not None or args.index_sanity_check:
        raise ToolError(
            "--remote-config reads the object store: no --files or --index-sanity-check"
        )
    if args.topic is None:
        raise ToolError("--remote-config needs --topic (and --partition, default 0)")
    if args.offset is None and not args.remote_list:
        raise ToolError("give --offset to dump the remote segment holding it, or --remote-list")
    topic_id = await _stored_topic_id(store, args.topic, args.topic_id)
    held = await remote_partition(store, args.topic, topic_id, args.partition)
    out = _Output(args.json)
    if args.remote_list:
        _list_remote(held, out)
        return EXIT_OK
    segment = held.segment_holding(args.offset)
    if segment is None:
        where = (
            f"its remote offsets are {held.start_offset}..{held.end_offset}"
            if held.segments
            else "the store holds no segment of it"
        )
        raise ToolError(
            f"offset {args.offset} of {args.topic}-{args.partition} is in no remote segment: "
            f"{where}"
        )
    key = segment.key(LOG)
    with store_errors():
        data = await store.get(key)
    decoder, print_data = _options(args)
    out.note("file", f"Dumping {key}", file=key)
    healthy = dump_segment(
        key,
        data,
        out,
        records=args.deep_iteration,
        print_data=print_data,
        decoder=decoder,
        base=segment.base_offset,
    )
    return EXIT_OK if healthy else EXIT_FAILURE


async def _stored_topic_id(store: ObjectStore, topic: str, wanted: str | None) -> uuid.UUID:
    found = await stored_topic_ids(store, topic)
    if wanted is not None:
        topic_id = parse_topic_id(wanted)
        if topic_id not in found:
            raise ToolError(f"the object store holds nothing of topic {topic} with id {wanted}")
        return topic_id
    if not found:
        raise ToolError(f"the object store holds nothing of topic {topic}")
    if len(found) > 1:
        raise ToolError(
            f"the object store holds objects of {len(found)} topics named {topic} (ids "
            f"{', '.join(str(i) for i in found)}): choose one with --topic-id"
        )
    return found[0]


def parse_topic_id(text: str) -> uuid.UUID:
    """A topic id as lockgate prints it (a UUID) or as Kafka's tools do (url-safe base64)."""
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, binascii.Error):
        raise ToolError(f"--topic-id {text!r} is not a topic id") from None


def _segment_item(segment: RemoteSegment) -> Item:
    return {
        "baseOffset": segment.base_offset,
        "endOffset": segment.end_offset,
        "size": segment.size,
        "maxTimestamp": segment.max_timestamp,
        "leaderEpochs": [{"epoch": e, "startOffset": o} for e, o in segment.epochs],
        "broker": segment.broker_id,
        "copierLeaderEpoch": segment.leader_epoch,
        "createdMs": segment.created_ms,
        "segmentId": str(segment.segment_id),
        "files": list(segment.files),
    }


def _list_remote(held: RemotePartition, out: _Output) -> None:
    name = f"{held.topic}-{held.partition}"
    offsets = f", offsets {held.start_offset}..{held.end_offset}" if held.segments else ""
    out.note(
        "remote-partition",
        f"Remote segments of {name} (topic id {held.topic_id}): {len(held.segments)} segments, "
        f"{held.size} bytes{offsets}",
        partition=name,
        topicId=str(held.topic_id),
        segments=len(held.segments),
        size=held.size,
    )
    if out.as_json:
        for segment in held.segments:
            out.emit("remote-segment", _segment_item(segment))
        for segment in held.superseded:
            out.emit("superseded-segment", _segment_item(segment))
        for key in held.orphans:
            out.emit("orphan", {"key": key})
        return
    if held.segments:
        header = ["BaseOffset", "EndOffset", "Size", "MaxTimestamp", "LeaderEpochs", "Broker",
                  "SegmentId"]  # fmt: skip
        print(render(header, [_segment_row(s) for s in held.segments]))
    for segment in held.superseded:
        print(
            f"Superseded copy (its leader deletes it): {segment.base_offset}..{segment.end_offset} "
            f"segment {segment.segment_id} by broker {segment.broker_id} in leader epoch "
            f"{segment.leader_epoch}"
        )
    for key in held.orphans:
        print(f"Orphaned object (no manifest; its leader deletes it): {key}")


def _segment_row(segment: RemoteSegment) -> list[str]:
    epochs = ",".join(f"{epoch}@{offset}" for epoch, offset in segment.epochs)
    return [
        str(segment.base_offset),
        str(segment.end_offset),
        str(segment.size),
        str(segment.max_timestamp),
        epochs,
        str(segment.broker_id),
        str(segment.segment_id),
    ]
