# The classic consumer protocol's embedded payloads (protocol type "consumer"): the
# subscription a member sends in JoinGroup (version, topics, user data, v1+ owned partitions)
# and the assignment the coordinator returns in SyncGroup. Needed when the coordinator itself
# assigns classic members of a consumer-protocol group (Kafka 4's mixed groups).
from __future__ import annotations

import struct
from dataclasses import dataclass

from lockgate.coordinator.group.assignors import Assignment


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: Assignment


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if size < 0 or size > len(self.data) - self.pos:
            raise ValueError("subscription cut short")
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw

    def int(self, fmt: str) -> int:
        layout = struct.Struct(fmt)
        return int(layout.unpack(self.take(layout.size))[0])

    def string(self) -> str:
        return self.take(self.int(">h")).decode()

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def parse_subscription(data: bytes) -> Subscription:
    """Raises ValueError when the payload is not a consumer protocol subscription."""
    reader = _Reader(data)
    version = reader.int(">h")
    topics = tuple(reader.string() for _ in range(max(reader.int(">i"), 0)))
    reader.take(max(reader.int(">i"), 0))  # user data (-1: null)
    owned: dict[str, frozenset[int]] = {}
    if version >= 1 and not reader.at_end():
        for _ in range(max(reader.int(">i"), 0)):
            topic = reader.string()
            owned[topic] = frozenset(reader.int(">i") for _ in range(max(reader.int(">i"), 0)))
    return Subscription(topics, owned)


def assignment_bytes(assignment: Assignment) -> bytes:
    """A version 0 ConsumerProtocolAssignment, which every client reads."""
    out = bytearray(struct.pack(">hi", 0, len(assignment)))
    for topic, partitions in sorted(assignment.items()):
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(partitions))
        for p in sorted(partitions):
            out += struct.pack(">i", p)
    out += struct.pack(">i", -1)  # no user data
    return bytes(out)


def parse_assignment(data: bytes) -> Assignment:
    if not data:
        return {}
    reader = _Reader(data)
    reader.int(">h")
    result: dict[str, frozenset[int]] = {}
    for _ in range(max(reader.int(">i"), 0)):
        topic = reader.string()
        result[topic] = frozenset(reader.int(">i") for _ in range(max(reader.int(">i"), 0)))
    return result
