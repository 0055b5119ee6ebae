"""The clean-shutdown mark: a clean stop lets the next start open active segments from their
indexes (no CRC scan); a running broker keeps the mark at "unclean", so a crash is followed by
the full check; and anything unexpected after the indexed batches falls back to that check."""

from __future__ import annotations

import os
from pathlib import Path

from lockgate.config.properties import BrokerConfig
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import CLEAN_SHUTDOWN_MARK, Broker
from lockgate.storage.disk import DiskEngine


def config(data: Path) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "log.dirs": str(data),
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        }
    )


async def started(data: Path) -> Broker:
    broker = Broker(config(data), DiskEngine(str(data)))
    await broker.start()
    return broker


def append(broker: Broker, count: int) -> None:
    partition = broker.topics.get("events", 0)
    assert partition is not None
    for number in range(count):
        batch = build_batch([(None, b"value-%d" % number)], timestamp_ms=1_000 + number)
        partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)


async def test_the_mark_is_set_by_a_clean_stop_and_reset_while_running(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = await started(data)
    assert not (data / CLEAN_SHUTDOWN_MARK).exists()  # a new data directory
    broker.topics.create("events", 1, 1, {})
    append(broker, 50)
    await broker.stop()
    assert (data / CLEAN_SHUTDOWN_MARK).read_bytes() == b"1"
    again = await started(data)
    try:
        assert (data / CLEAN_SHUTDOWN_MARK).read_bytes() == b"0"  # a crash now is unclean
        partition = again.topics.get("events", 0)
        assert partition is not None
        assert partition.log_end_offset == 50
        assert partition.active.max_timestamp == 1_049  # past the last time index entry
    finally:
        await again.stop()


async def test_bytes_after_the_last_batch_are_checked_and_cut_even_after_a_clean_stop(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    broker = await started(data)
    broker.topics.create("events", 1, 1, {})
    append(broker, 10)
    await broker.stop()
    log_file = data / "events-0" / f"{0:020d}.log"
    with open(log_file, "ab") as handle:
        handle.write(os.urandom(100))
    again = await started(data)
    try:
        partition = again.topics.get("events", 0)
        assert partition is not None
        assert partition.log_end_offset == 10
        assert log_file.stat().st_size == partition.active.size  # the garbage was cut
        append(again, 1)
        assert partition.log_end_offset == 11
    finally:
        await again.stop()
