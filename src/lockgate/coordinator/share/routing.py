# Which partition of __share_group_state holds a share partition's state, as Kafka places it:
# the coordinator key "groupId:topicId:partition" (the topic id in Kafka's form, URL-safe base64
# without padding), hashed with Java's String.hashCode and Kafka's Utils.abs, modulo the topic's
# partition count. FindCoordinator key type 2 (SHARE) names a share coordinator by that key; its
# parse follows Kafka's SharePartitionKey: the last two ':'-separated tokens are the topic id and
# the partition, the group id is everything before them (it may contain ':').
from __future__ import annotations

import base64
import binascii
import uuid

from lockgate.coordinator.share.records import ShareKey
from lockgate.coordinator.txn.log import partition_for

# Java's String.trim() removes every char up to and including the space
_JAVA_BLANK = "".join(chr(code) for code in range(0x21))
_INT32_MAX = 2**31 - 1


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def parse_topic_id(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"invalid topic id {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"invalid topic id {text!r}: {len(raw)} bytes")
    return uuid.UUID(bytes=raw)


def coordinator_key(key: ShareKey) -> str:
    return f"{key.group_id}:{topic_id_string(key.topic_id)}:{key.partition}"


def parse_coordinator_key(text: str) -> ShareKey:
    """The share partition a FindCoordinator SHARE key names; ValueError (INVALID_REQUEST)
    when it is not "groupId:topicId:partition" with a non-blank group id."""
    tokens = text.split(":")
    while tokens and not tokens[-1]:  # (Java's split drops trailing empty tokens)
        tokens.pop()
    if len(tokens) < 3:
        raise ValueError(f"expected groupId:topicId:partition, found {text!r}")
    group_id = ":".join(tokens[:-2])
    if not group_id.strip(_JAVA_BLANK):
        raise ValueError("the group id must not be empty")
    topic_id = parse_topic_id(tokens[-2])
    partition_text = tokens[-1]
    digits = partition_text[1:] if partition_text[:1] in "+-" else partition_text
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(f"invalid partition {partition_text!r}")
    partition = int(partition_text)
    if not -(2**31) <= partition <= _INT32_MAX:
        raise ValueError(f"invalid partition {partition_text!r}")
    return ShareKey(group_id, topic_id, partition)


def state_partition(key: ShareKey, partitions: int) -> int:
    """The __share_group_state partition of a share partition's state."""
    return partition_for(coordinator_key(key), partitions)
