"""The pure parts of the transaction admin: DescribeTransactions decoded by hand (kio cannot
read a start time of -1) and the find-hanging rule."""

from __future__ import annotations

import pytest

from lockgate.client.admin_transactions import (
    ProducerState,
    TransactionDescription,
    _decode_describe_transactions,
    _hanging_reason,
)
from lockgate.client.cluster import TopicPartition
from lockgate.protocol.frame import MalformedFrame
from tests.support.kafka_wire import compact_string, int16, int32, int64, tagged_fields, uvarint

TP = TopicPartition("orders", 2)


def describe_body(start_time_ms: int, topics: dict[str, list[int]]) -> bytes:
    topic_bytes = b"".join(
        compact_string(name)
        + uvarint(len(partitions) + 1)
        + b"".join(int32(p) for p in partitions)
        + tagged_fields()
        for name, partitions in topics.items()
    )
    state = (
        int16(0)
        + compact_string("payments")
        + compact_string("Ongoing" if start_time_ms >= 0 else "Empty")
        + int32(60_000)
        + int64(start_time_ms)
        + int64(42)
        + int16(3)
        + uvarint(len(topics) + 1)
        + topic_bytes
        + tagged_fields()
    )
    return int32(0) + uvarint(2) + state + tagged_fields()


def test_describe_transactions_with_no_open_transaction_has_no_start_time() -> None:
    [(error, description)] = _decode_describe_transactions(describe_body(-1, {}), 0)
    assert error == 0
    assert description.start_time_ms is None
    assert description.duration_ms(10_000) is None
    assert (description.transactional_id, description.state) == ("payments", "Empty")


def test_describe_transactions_reads_partitions_and_start_time() -> None:
    body = b"\x00\x00" + describe_body(1_000, {"orders": [2, 0], "audit": [1]})
    [(_, description)] = _decode_describe_transactions(body, 2)
    assert description.partitions == (
        TopicPartition("orders", 2),
        TopicPartition("orders", 0),
        TopicPartition("audit", 1),
    )
    assert (description.producer_id, description.producer_epoch) == (42, 3)
    assert description.timeout_ms == 60_000
    assert description.duration_ms(4_000) == 3_000


def test_a_truncated_describe_transactions_body_is_malformed() -> None:
    body = describe_body(1_000, {"orders": [2]})
    with pytest.raises(MalformedFrame):
        _decode_describe_transactions(body[:-6], 0)


def producer(producer_id: int = 42) -> ProducerState:
    return ProducerState(producer_id, 3, 10, 0, 1, 100)


def description(
    state: str = "Ongoing", producer_id: int = 42, partitions: tuple[TopicPartition, ...] = (TP,)
) -> TransactionDescription:
    return TransactionDescription("payments", 0, state, producer_id, 3, 60_000, 0, partitions)


def test_a_transaction_the_coordinator_counts_is_not_hanging() -> None:
    assert _hanging_reason(TP, producer(), [description()]) is None
    assert _hanging_reason(TP, producer(), [description("PrepareCommit")]) is None


@pytest.mark.parametrize(
    "descriptions",
    [
        [],
        [description(partitions=(TopicPartition("orders", 0),))],
        [description(state="CompleteCommit")],
        [description(producer_id=7)],
    ],
    ids=["unknown-producer", "other-partition", "completed", "other-producer-id"],
)
def test_hanging_when_the_coordinator_does_not_count_the_partition(
    descriptions: list[TransactionDescription],
) -> None:
    assert _hanging_reason(TP, producer(), descriptions) is not None
