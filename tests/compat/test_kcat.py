"""kcat (Debian's, librdkafka 2.0) against lockgate: produce and consume back, every codec.

kcat cannot create topics: confluent-kafka's AdminClient creates a 3-partition topic per codec.
For each codec (none, gzip, snappy, lz4, zstd), 100,000 values of ~100 B are produced by one
`kcat -P -p N` per partition (message i to partition i % 3) with acks=all, then read back by
`kcat -C -e` from the beginning: every message exactly once, in order, at consecutive offsets,
and the stored batches carry the codec. Every kcat run has a timeout.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches
from tests.support.sequences import check_partitions, sequence_of, sequence_value

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make system-deps)"),
]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PARTITIONS = 3
COUNT = 100_000


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> bytes:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_consume_every_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    for partition in range(PARTITIONS):
        lines = b"".join(sequence_value(i) + b"\n" for i in range(partition, COUNT, PARTITIONS))
        kcat(
            "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-z", codec,
            "-X", "acks=all", "-X", "linger.ms=5",
            stdin=lines,
        )  # fmt: skip
    output = kcat(
        "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
        "-f", "%p %o %s\\n",
    )  # fmt: skip
    received: dict[int, list[tuple[int, int]]] = {}
    for line in output.splitlines():
        raw_partition, raw_offset, value = line.split(b" ", 2)
        received.setdefault(int(raw_partition), []).append((int(raw_offset), sequence_of(value)))
    check_partitions(received, COUNT, PARTITIONS)
    with KafkaWire(bootstrap) as wire:
        for partition in range(PARTITIONS):
            error, batches = fetch_batches(wire, topic, partition)
            assert error == 0 and batches
            assert {batch.compression for batch in batches} == {CODECS[codec]}
