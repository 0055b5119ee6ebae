"""Cost of answering a resent earlier batch of an idempotent producer from the log.

Producer state keeps only each producer's latest batch (KAFKA-12207); a resend of an earlier
one is looked up in the log by reading batch headers back from the producer's latest batch
(lockgate/log/duplicates.py). This builds a partition (memory and disk engines, default
index.interval.bytes) where N producers write in turn, five 100-byte records a batch, then
times Partition.append for resends of one producer's batch 1, 4 and 100 batches behind its
latest (so with N producers about N, 4N and 100N headers back), next to the exact retry of
the latest batch, which producer state answers alone. Every resend is answered without
appending, so each is timed many times; the median and the 95th percentile are printed,
with how many batches lie between (the headers to examine), the read calls and bytes one
lookup made, and what it answered.

    python -m bench.duplicate_lookup [--producers 1,10,100,500] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lockgate.config.log import LogConfig
from lockgate.log import duplicates
from lockgate.log.partition import Partition
from lockgate.protocol.errors import KafkaProtocolError
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.disk import DiskEngine, DiskFile
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine, MemoryFile

RECORDS_PER_BATCH = 5
VALUE = b"v" * 100
BEHIND = (1, 4, 100)
ROUNDS = max(BEHIND) + 10  # batches per producer
MEASURED = 0  # the producer whose batches are resent


def batch(producer_id: int, round_: int) -> bytes:
    return build_batch(
        [(None, VALUE)] * RECORDS_PER_BATCH,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=round_ * RECORDS_PER_BATCH,
        timestamp_ms=1_700_000_000_000,
    )


def build(storage: StorageEngine, producers: int) -> tuple[Partition, list[int]]:
    """A partition where every producer writes one batch a round; the measured producer's
    base offsets."""
    partition = Partition(storage, "bench", 0, uuid.UUID(int=1), LogConfig)
    partition.load(1_000)
    offsets = []
    for round_ in range(ROUNDS):
        for producer_id in range(producers):
            data = batch(producer_id, round_)
            base, _ = partition.append(bytearray(data), validate_produced_batch(data), 2_000)
            if producer_id == MEASURED:
                offsets.append(base)
    partition.advance_high_watermark(partition.log_end_offset)
    return partition, offsets


@contextmanager
def counting_reads() -> Iterator[list[int]]:
    """[read calls, bytes read] on either engine's files meanwhile."""
    count = [0, 0]
    originals: list[tuple[type[MemoryFile] | type[DiskFile], Callable[..., bytes]]] = []
    classes: tuple[type[MemoryFile] | type[DiskFile], ...] = (MemoryFile, DiskFile)
    for cls in classes:
        original = cls.read
        originals.append((cls, original))

        def read(
            self: object, position: int, size: int, _o: Callable[..., bytes] = original
        ) -> bytes:
            data = _o(self, position, size)
            count[0] += 1
            count[1] += len(data)
            return data

        cls.read = read  # type: ignore[method-assign]
    try:
        yield count
    finally:
        for cls, original in originals:
            cls.read = original  # type: ignore[method-assign]


def resend(partition: Partition, data: bytes) -> str:
    try:
        offset, _time = partition.append(bytearray(data), validate_produced_batch(data), 3_000)
    except KafkaProtocolError as exc:
        return exc.code.name
    return f"offset {offset}"


def measure(partition: Partition, data: bytes, repeat: int) -> tuple[str, list[int], float, float]:
    """(answer, [read calls, bytes read] by one lookup, median µs, 95th percentile µs)."""
    with counting_reads() as reads:
        answer = resend(partition, data)
    times = []
    for _ in range(repeat):
        started = time.perf_counter_ns()
        resend(partition, data)
        times.append((time.perf_counter_ns() - started) / 1000)
    return answer, reads, statistics.median(times), statistics.quantiles(times, n=20)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--producers", default="1,10,100,500")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"bound: {duplicates.MAX_HEADERS} headers, read {duplicates.READ_AHEAD} B at most at "
          f"once; {RECORDS_PER_BATCH} records a batch")  # fmt: skip
    print(f"{'engine':7} {'producers':>9} {'resend':>12} {'between':>8} {'reads':>6} "
          f"{'KiB read':>8} {'median µs':>10} {'p95 µs':>9}  answer")  # fmt: skip
    for engine in ("memory", "disk"):
        for producers in (int(p) for p in args.producers.split(",")):
            with tempfile.TemporaryDirectory() as directory:
                storage: StorageEngine = (
                    MemoryEngine() if engine == "memory" else DiskEngine(directory)
                )
                partition, offsets = build(storage, producers)
                cases = [("latest", ROUNDS - 1)] + [
                    (f"{behind} behind", ROUNDS - 1 - behind) for behind in BEHIND
                ]
                for label, round_ in cases:
                    between = (ROUNDS - 1 - round_) * producers
                    answer, reads, median, worst = measure(
                        partition, batch(MEASURED, round_), args.repeat
                    )
                    expected = f"offset {offsets[round_]}"
                    if answer.startswith("offset") and answer != expected:
                        raise SystemExit(f"{label}: answered {answer}, stored at {expected}")
                    kib = reads[1] / 1024
                    print(f"{engine:7} {producers:9d} {label:>12} {between:8d} {reads[0]:6d} "
                          f"{kib:8.1f} {median:10.1f} {worst:9.1f}  {answer}")  # fmt: skip
                partition.close()


if __name__ == "__main__":
    main()
