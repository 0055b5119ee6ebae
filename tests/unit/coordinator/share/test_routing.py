"""The share coordinator's placement (Kafka's SharePartitionKey and ShareCoordinatorService
partitionFor) and FindCoordinator SHARE keys."""

from __future__ import annotations

import uuid

import pytest

from lockgate.coordinator.share.records import ShareKey
from lockgate.coordinator.share.routing import (
    coordinator_key,
    parse_coordinator_key,
    parse_topic_id,
    state_partition,
    topic_id_string,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


def test_topic_id_is_kafkas_url_safe_base64_without_padding() -> None:
    assert topic_id_string(TOPIC) == "ASNFZ4mrze8BI0VniavN7w"
    assert topic_id_string(uuid.UUID(bytes=b"\xff" * 16)) == "_____________________w"
    assert parse_topic_id("ASNFZ4mrze8BI0VniavN7w") == TOPIC


def test_coordinator_key_round_trip_with_colons_in_the_group() -> None:
    key = ShareKey("a:b", TOPIC, 3)
    assert coordinator_key(key) == "a:b:ASNFZ4mrze8BI0VniavN7w:3"
    assert parse_coordinator_key("a:b:ASNFZ4mrze8BI0VniavN7w:3") == key


def test_java_hash_placement() -> None:
    # Java: Math.abs("g:ASNFZ4mrze8BI0VniavN7w:0".hashCode()) % 50, computed by hand below
    text = "g:ASNFZ4mrze8BI0VniavN7w:0"
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    assert state_partition(ShareKey("g", TOPIC, 0), 50) == abs(signed) % 50


@pytest.mark.parametrize(
    "text",
    [
        "",
        "g:ASNFZ4mrze8BI0VniavN7w",  # two tokens
        " :ASNFZ4mrze8BI0VniavN7w:1",  # a blank group id
        "g:not-a-uuid:1",
        "g:ASNFZ4mrze8BI0VniavN7w:x",
        "g:ASNFZ4mrze8BI0VniavN7w:",  # Java's split drops the trailing empty token
        "g:ASNFZ4mrze8BI0VniavN7w:99999999999",
    ],
)
def test_invalid_keys(text: str) -> None:
    with pytest.raises(ValueError):
        parse_coordinator_key(text)


def test_signed_partitions_parse_as_java_does() -> None:
    assert parse_coordinator_key("g:ASNFZ4mrze8BI0VniavN7w:+4").partition == 4
    assert parse_coordinator_key("g:ASNFZ4mrze8BI0VniavN7w:-1").partition == -1
