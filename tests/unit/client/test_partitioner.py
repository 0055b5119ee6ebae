# The partitioner must put a key where the Java client and librdkafka's murmur2 partitioners
# put it: Kafka's own Utils.murmur2 test vectors, and kafka-python's independent port.
from __future__ import annotations

import random
import warnings

import pytest

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings are not ours
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from lockgate.client.fastpath import load
from lockgate.client.partitioner import (
    DefaultPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_VECTORS.items()))
def test_murmur2_matches_kafka_utils(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_matches_kafka_python_on_many_keys() -> None:
    generator = random.Random(20240607)
    # every tail length (0-3 bytes after the 4-byte blocks), and bytes >= 0x80 (sign issues)
    keys = [generator.randbytes(generator.randrange(0, 65)) for _ in range(2000)]
    for key in [b"", *keys]:
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF, key


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-790332482) == 1357151166
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; masking gives 0
    assert to_positive(479470107) == 479470107


def test_partition_for_key_is_positive_hash_modulo_count() -> None:
    # toPositive(murmur2("foobar")) = 1357151166; 1357151166 % 7 = 0, % 10 = 6
    assert partition_for_key(b"foobar", 7) == 0
    assert partition_for_key(b"foobar", 10) == 6
    assert partition_for_key(b"abc", 3) == 479470107 % 3


def test_partition_for_key_rejects_empty_topics() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_keyless_records_round_robin_per_topic() -> None:
    partitioner = DefaultPartitioner()
    assert [partitioner("a", None, 3) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert [partitioner("b", None, 2) for _ in range(3)] == [0, 1, 0]
    assert partitioner("a", None, 3) == 2


def test_keyed_records_ignore_the_round_robin() -> None:
    partitioner = DefaultPartitioner()
    assert {partitioner("a", b"foobar", 10) for _ in range(5)} == {6}


def test_the_compiled_murmur2_matches_kafka_utils_and_the_pure_one() -> None:
    compiled = load(pure=False)
    if compiled.IMPLEMENTATION != "compiled":
        pytest.skip("the compiled fast path is not built (tests/unit/client/test_fastpath.py)")
    for key, expected in JAVA_VECTORS.items():
        assert compiled.murmur2(key) == expected
    generator = random.Random(20261126)
    for key in (generator.randbytes(generator.randrange(0, 40)) for _ in range(2000)):
        assert compiled.murmur2(key) == murmur2(key), key
