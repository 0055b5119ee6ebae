# Metadata response encoding (v0-13), hand-written: an answer for every topic of a broker
# with thousands of partitions took 5-6x the handler's own time in kio's entity builder and
# writer (a frozen dataclass and a validated primitive per field). The answer is the dict the
# Metadata handler builds in the shape of the newest version (as lockgate.protocol.api.build
# takes it); fields a version lacks are left out, and every field is written exactly as kio
# would write it (tests compare the two on generated answers of every version).
#
# Field order (MetadataResponse.json): ThrottleTimeMs (v3+), Brokers [NodeId, Host, Port,
# Rack (v1+, nullable)], ClusterId (v2+, nullable), ControllerId (v1+), Topics [ErrorCode,
# Name (nullable v12+), TopicId (v10+), IsInternal (v1+), Partitions [ErrorCode,
# PartitionIndex, LeaderId, LeaderEpoch (v7+), ReplicaNodes, IsrNodes, OfflineReplicas (v5+)],
# TopicAuthorizedOperations (v8+)], ClusterAuthorizedOperations (v8-10), ErrorCode (v13+).
# v9+ is flexible: compact lengths and an empty tagged-field section after each structure.
from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate.protocol.frame import unsigned_varint

LAST_VERSION = 13
FIRST_FLEXIBLE = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">hii")  # error, index, leader
_PARTITION_EPOCH = struct.Struct(">hiii")  # v7+: and the leader epoch
_NO_TAGS = b"\x00"


def _millis(value: int | datetime.timedelta) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible
        # replica lists repeat across partitions (a few brokers): each is encoded once
        self._arrays: dict[tuple[int, ...], bytes] = {}

    def length(self, count: int) -> None:
        """An array's (or a non-null string's) length."""
        if self.flexible:
            self.out += unsigned_varint(count + 1)
        else:
            self.out += _I32.pack(count)

    def string(self, value: str | None) -> None:
        if value is None:
            self.out += b"\x00" if self.flexible else b"\xff\xff"
            return
        raw = value.encode()
        if self.flexible:
            self.out += unsigned_varint(len(raw) + 1)
        else:
            self.out += _I16.pack(len(raw))
        self.out += raw

    def int32s(self, values: Sequence[int]) -> None:
        key = tuple(values)
        encoded = self._arrays.get(key)
        if encoded is None:
            count = len(key)
            size = unsigned_varint(count + 1) if self.flexible else _I32.pack(count)
            encoded = self._arrays[key] = size + struct.pack(f">{count}i", *key)
        self.out += encoded

    def tags(self) -> None:
        if self.flexible:
            self.out += _NO_TAGS


def encode_metadata_response(version: int, answer: Mapping[str, Any]) -> bytes:
    """The body of a Metadata response of `version` (0-13)."""
    if not 0 <= version <= LAST_VERSION:
        raise ValueError(f"Metadata v{version} is not encoded here (v0-{LAST_VERSION})")
    w = _Writer(version >= FIRST_FLEXIBLE)
    out = w.out
    if version >= 3:
        out += _I32.pack(_millis(answer["throttle_time"]))
    brokers = answer["brokers"]
    w.length(len(brokers))
    for broker in brokers:
        out += _I32.pack(broker["node_id"])
        w.string(broker["host"])
        out += _I32.pack(broker["port"])
        if version >= 1:
            w.string(broker.get("rack"))
        w.tags()
    if version >= 2:
        w.string(answer.get("cluster_id"))
    if version >= 1:
        out += _I32.pack(answer.get("controller_id", -1))
    topics = answer["topics"]
    w.length(len(topics))
    for topic in topics:
        _topic(w, version, topic)
    if 8 <= version <= 10:
        out += _I32.pack(answer.get("cluster_authorized_operations", -(2**31)))
    if version >= 13:
        out += _I16.pack(answer["error_code"])
    w.tags()
    return bytes(out)


def _topic(w: _Writer, version: int, topic: Mapping[str, Any]) -> None:
    out = w.out
    out += _I16.pack(topic["error_code"])
    w.string(topic["name"])
    if version >= 10:
        topic_id = topic.get("topic_id")
        out += (topic_id or uuid.UUID(int=0)).bytes
    if version >= 1:
        out += b"\x01" if topic.get("is_internal", False) else b"\x00"
    partitions = topic["partitions"]
    w.length(len(partitions))
    for p in partitions:
        if version >= 7:
            out += _PARTITION_EPOCH.pack(p["error_code"], p["partition_index"], p["leader_id"],
                                         p.get("leader_epoch", -1))  # fmt: skip
        else:
            out += _PARTITION.pack(p["error_code"], p["partition_index"], p["leader_id"])
        w.int32s(p.get("replica_nodes", ()))
        w.int32s(p.get("isr_nodes", ()))
        if version >= 5:
            w.int32s(p.get("offline_replicas", ()))
        w.tags()
    if version >= 8:
        out += _I32.pack(topic.get("topic_authorized_operations", -(2**31)))
    w.tags()
