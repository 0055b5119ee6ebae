# Fetch response encoding (v4-18), hand-written for the hot path.
#
# Hand-written rather than kio because kio's writer copies every partition's record bytes into
# a BytesIO, and the frame around the body copied them again: under consume load that copying
# was a third of the broker's CPU. Here the body is a list of buffers: the framing this module
# builds, as small bytes, and each partition's records as the very object it was given (bytes,
# a memoryview into a segment read, or a FileRange of the segment file that the connection sends
# with sendfile), so record bytes reach the socket without Python copying them. The answer is
# the dict Fetch's handler builds in the shape of the newest version (as
# lockgate.protocol.api.build takes it); fields a version lacks are left out, and every field is
# written exactly as kio would write it (tests compare the joined parts with kio's encoding).
#
# Field order (FetchResponse.json): ThrottleTimeMs, ErrorCode and SessionId (v7+), Responses
# [Topic (v4-12) | TopicId (v13+), Partitions [PartitionIndex, ErrorCode, HighWatermark,
# LastStableOffset, LogStartOffset (v5+), AbortedTransactions (nullable) [ProducerId,
# FirstOffset], PreferredReadReplica (v11+), Records (nullable)]]. v12+ is flexible: compact
# lengths, and tagged fields after each structure: a partition's DivergingEpoch (tag 0),
# CurrentLeader (1) and SnapshotId (2), written only when they differ from their defaults (all
# -1), and the response's NodeEndpoints (tag 0, v16+), written only when not empty.
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate.protocol.file_range import Part
from lockgate.protocol.frame import unsigned_varint

FIRST_VERSION = 4
LAST_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_NODE_ENDPOINTS = 16

_I32 = struct.Struct(">i")
_TOP = struct.Struct(">ihi")  # throttle time, error code, session id (v7+)
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_PARTITION = struct.Struct(">ihqqq")  # v5+: and the log start offset
_ABORTED = struct.Struct(">qq")
_ABORTED_FLEXIBLE = struct.Struct(">qqB")  # and an empty tagged-field section
_NULL_LEGACY = _I32.pack(-1)
_ZERO_UUID = bytes(16)
_NO_TAGS = b"\x00"
# A partition's tagged fields, each with its tag, its size and an empty tag section of its own.
_DIVERGING_EPOCH = struct.Struct(">BBiqB")  # tag 0: epoch, end offset
_CURRENT_LEADER = struct.Struct(">BBiiB")  # tag 1: leader id, leader epoch
_SNAPSHOT_ID = struct.Struct(">BBqiB")  # tag 2: end offset, epoch


def encode_fetch_response(version: int, answer: Mapping[str, Any]) -> list[Part]:
    """The body of a Fetch response of `version` as buffers to write in turn. Each non-empty
    `records` of a partition is one of them, the same object as in `answer`."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here (v{FIRST_VERSION}-{LAST_VERSION})")
    flexible = version >= FIRST_FLEXIBLE
    parts: list[Part] = []
    out = bytearray()
    if version >= 7:
        out += _TOP.pack(answer["throttle_time"], answer["error_code"], answer.get("session_id", 0))
    else:
        out += _I32.pack(answer["throttle_time"])
    length = _uvarint_length if flexible else _I32.pack
    responses = answer["responses"]
    out += length(len(responses))
    for topic in responses:
        if version >= FIRST_TOPIC_ID:
            topic_id = topic["topic_id"]
            out += _ZERO_UUID if topic_id is None else topic_id.bytes
        else:
            out += _string(topic["topic"], flexible)
        partitions = topic["partitions"]
        out += length(len(partitions))
        for entry in partitions:
            if version >= 5:
                out += _PARTITION.pack(
                    entry["partition_index"],
                    entry["error_code"],
                    entry["high_watermark"],
                    entry.get("last_stable_offset", -1),
                    entry.get("log_start_offset", -1),
                )
            else:
                out += _PARTITION_V4.pack(
                    entry["partition_index"],
                    entry["error_code"],
                    entry["high_watermark"],
                    entry.get("last_stable_offset", -1),
                )
            aborted = entry["aborted_transactions"]
            if aborted is None:
                out += _NO_TAGS if flexible else _NULL_LEGACY
            else:
                out += length(len(aborted))
                if flexible:
                    for a in aborted:
                        out += _ABORTED_FLEXIBLE.pack(a["producer_id"], a["first_offset"], 0)
                else:
                    for a in aborted:
                        out += _ABORTED.pack(a["producer_id"], a["first_offset"])
            if version >= 11:
                out += _I32.pack(entry.get("preferred_read_replica", -1))
            records = entry["records"]
            if records is None:
                out += _NO_TAGS if flexible else _NULL_LEGACY
            else:
                size = len(records)
                out += length(size)
                if size:
                    parts.append(bytes(out))
                    parts.append(records)
                    out = bytearray()
            if flexible:
                out += _partition_tags(entry)
        if flexible:
            out += _NO_TAGS
    if flexible:
        endpoints = answer.get("node_endpoints") if version >= FIRST_NODE_ENDPOINTS else None
        if endpoints:
            encoded = _node_endpoints(endpoints)
            out += b"\x01\x00" + unsigned_varint(len(encoded)) + encoded  # one field, tag 0
        else:
            out += _NO_TAGS
    parts.append(bytes(out))
    return parts


def body_size(parts: Sequence[Part]) -> int:
    """The byte length of an encoded body (what a quota charges)."""
    return sum(map(len, parts))


def _uvarint_length(count: int) -> bytes:
    """A compact array or bytes length: count + 1 (0 is null)."""
    return unsigned_varint(count + 1)


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    if flexible:
        return unsigned_varint(len(raw) + 1) + raw
    return struct.pack(">h", len(raw)) + raw


def _partition_tags(entry: Mapping[str, Any]) -> bytes:
    """A partition's tagged-field section: each of its three tagged fields when set to
    anything but its default (every field -1), in tag order."""
    diverging = entry.get("diverging_epoch")
    leader = entry.get("current_leader")
    snapshot = entry.get("snapshot_id")
    if diverging is None and leader is None and snapshot is None:
        return _NO_TAGS
    fields = []
    if diverging is not None:
        epoch, end = diverging.get("epoch", -1), diverging.get("end_offset", -1)
        if (epoch, end) != (-1, -1):
            fields.append(_DIVERGING_EPOCH.pack(0, 13, epoch, end, 0))
    if leader is not None:
        leader_id, leader_epoch = leader.get("leader_id", -1), leader.get("leader_epoch", -1)
        if (leader_id, leader_epoch) != (-1, -1):
            fields.append(_CURRENT_LEADER.pack(1, 9, leader_id, leader_epoch, 0))
    if snapshot is not None:
        end, epoch = snapshot.get("end_offset", -1), snapshot.get("epoch", -1)
        if (end, epoch) != (-1, -1):
            fields.append(_SNAPSHOT_ID.pack(2, 13, end, epoch, 0))
    return bytes((len(fields),)) + b"".join(fields)


def _node_endpoints(endpoints: Sequence[Mapping[str, Any]]) -> bytes:
    """NodeEndpoints as a compact array of NodeId, Host, Port, Rack (nullable)."""
    out = bytearray(_uvarint_length(len(endpoints)))
    for node in endpoints:
        out += _I32.pack(node["node_id"])
        out += _string(node["host"], True)
        out += _I32.pack(node["port"])
        rack = node.get("rack")
        out += _NO_TAGS if rack is None else _string(rack, True)
        out += _NO_TAGS
    return bytes(out)
