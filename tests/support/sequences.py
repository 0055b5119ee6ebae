# Numbered test messages: value i carries its sequence number, message i goes to partition
# i % partitions, and a check that a partition holds exactly its share, once each, in order.
from __future__ import annotations

from collections.abc import Iterable

VALUE_SIZE = 100
_DIGITS = 10


def sequence_value(sequence: int, size: int = VALUE_SIZE) -> bytes:
    head = b"%0*d|" % (_DIGITS, sequence)
    return head + b"x" * (size - len(head))


def sequence_of(value: bytes | None) -> int:
    assert value is not None and value[_DIGITS : _DIGITS + 1] == b"|", f"not ours: {value!r}"
    return int(value[:_DIGITS])


def expected_partition(sequence: int, partitions: int) -> int:
    return sequence % partitions


def check_partitions(
    received: dict[int, list[tuple[int, int]]], count: int, partitions: int
) -> None:
    """`received` maps partition → [(offset, sequence)] in the order consumed. Every message
    0..count-1 must be in its partition exactly once, in produce order, at offsets 0, 1, 2..."""
    assert set(received) <= set(range(partitions)), f"unexpected partitions {sorted(received)}"
    for partition in range(partitions):
        got = received.get(partition, [])
        expected = list(range(partition, count, partitions))
        offsets = [offset for offset, _ in got]
        sequences = [sequence for _, sequence in got]
        assert len(sequences) == len(expected), (
            f"partition {partition}: {len(sequences)} messages, expected {len(expected)}"
            f" ({_first_difference(sequences, expected)})"
        )
        assert sequences == expected, (
            f"partition {partition}: {_first_difference(sequences, expected)}"
        )
        assert offsets == list(range(len(expected))), (
            f"partition {partition}: offsets {_first_difference(offsets, range(len(expected)))}"
        )


def _first_difference(got: Iterable[int], expected: Iterable[int]) -> str:
    got_list, expected_list = list(got), list(expected)
    for index, (a, b) in enumerate(zip(got_list, expected_list, strict=False)):
        if a != b:
            return f"first difference at position {index}: got {a}, expected {b}"
    if len(got_list) != len(expected_list):
        shorter = min(len(got_list), len(expected_list))
        return f"identical for {shorter} entries, then lengths differ"
    return "identical"
