"""Issue 22, pain 8 against lockgate: init_transactions while the transaction coordinator loads.

A broker restarted after kill -9 replays __transaction_state before it serves a transactional
id; meanwhile InitProducerId is answered COORDINATOR_LOAD_IN_PROGRESS. The load is made slow
for real: a long history of one partition of __transaction_state (480 000 records, written
through a broker's own append path on the same data directory before the broker process
starts) and snapshots off, so that the restart replays all of it (about 2.5 s on a quiet
machine; the short call's timeout is a third of what the first load took).

lockgate's client retries with backoff within the call's timeout; a call whose timeout was
shorter than the load raises KafkaTimeoutError and leaves the producer UNINITIALIZED; the same
call again succeeds, fences the previous instance and aborts its open transaction: a
read_committed reader sees every committed record once and nothing of the open transaction.

Not run against Kafka 4.4: making its load slow needs as large a __transaction_state, which only
its coordinator can write (one InitProducerId/EndTxn per record), far beyond this file's time
budget; the client's behaviour is the same against either broker."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path

import pytest

from lockgate.client.errors import KafkaTimeoutError, ProducerFencedError
from lockgate.client.producer import Producer
from lockgate.client.transactions import TransactionState
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.txn.log import encode_key, encode_value
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import Broker
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC
from tests.integration.test_client_producer import unique
from tests.integration.test_txn_pains_timeouts import committed
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

# one __transaction_state partition: every transactional id shares the long history's partition
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    "lockgate.coordinator.snapshot.interval.ms": "-1",  # a start replays the whole log
}
HISTORY_BATCHES = 4800
PER_BATCH = 100
LOADED = "transaction coordinator loaded"
RETRYING = "INIT_PRODUCER_ID for {!r}: retrying after COORDINATOR_LOAD_IN_PROGRESS"


async def write_history(data_dir: Path) -> None:
    """Another id's long history (its epoch bumped 480 000 times), appended by a broker
    on `data_dir` as its coordinator would have written it over time."""
    broker = Broker(BrokerConfig({**SETTINGS, "log.dirs": str(data_dir),
                                  "listeners": "127.0.0.1:0"}))  # fmt: skip
    await broker.start()
    try:
        partition = broker.topics.get(TRANSACTION_STATE_TOPIC, 0)
        assert partition is not None
        key = encode_key("busy-history")
        for number in range(HISTORY_BATCHES):
            epochs = [(number * PER_BATCH + i) % 30_000 for i in range(PER_BATCH)]
            values = [
                TxnMetadata("busy-history", 7, epoch, 60_000, TxnState.COMPLETE_COMMIT)
                for epoch in epochs
            ]
            batch = build_batch([(key, encode_value(v)) for v in values],
                                timestamp_ms=int(time.time() * 1000))  # fmt: skip
            partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    finally:
        await broker.stop()


def loads(broker: BrokerProcess) -> int:
    return broker.log().count(LOADED)


def load_seconds(broker: BrokerProcess) -> float:
    """How long the broker's first load of the transaction coordinator took (its log)."""
    found = re.search(LOADED + r" .* in ([0-9.]+)s", broker.log())
    assert found is not None, broker.log()
    return float(found.group(1))


async def wait_loaded(broker: BrokerProcess, count: int) -> None:
    deadline = time.monotonic() + 30
    while loads(broker) < count:
        assert time.monotonic() < deadline, f"the coordinator did not load:\n{broker.log()}"
        await asyncio.sleep(0.05)


@pytest.fixture
def slow_loading_broker(tmp_path: Path) -> BrokerProcess:
    asyncio.run(write_history(tmp_path / "data"))
    return BrokerProcess(tmp_path / "data", SETTINGS)


async def test_init_transactions_waits_out_the_load_and_can_be_called_again(
    slow_loading_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    broker = slow_loading_broker.start()
    first: Producer | None = None
    second: Producer | None = None
    try:
        await wait_loaded(broker, 1)
        # the restart replays the same history: the short call must get an answer (the load
        # yields to requests between steps) and give up well within it: a third of the first
        # load's time (a quiet machine loads it in about 2.5 s)
        short_ms = int(load_seconds(broker) * 1000 / 3)
        topic, transactional_id = unique("loading"), unique("loading-id")
        await asyncio.to_thread(create_topic, broker.bootstrap, topic, 1)
        first = Producer(broker.bootstrap, transactional_id=transactional_id, linger_ms=0)
        await first.start()
        await first.init_transactions()
        first.begin_transaction()
        await (await first.send(topic, b"committed-before", partition=0))
        await first.commit_transaction()
        first.begin_transaction()
        for i in range(3):
            await (await first.send(topic, b"open-%d" % i, partition=0))  # in the log

        broker.kill()  # the transaction stays open; no snapshot is written
        broker.start()
        started = time.monotonic()
        second = Producer(broker.bootstrap, transactional_id=transactional_id, linger_ms=0,
                          retry_backoff_ms=100, max_block_ms=30_000)  # fmt: skip
        await second.start()
        caplog.set_level(logging.DEBUG, logger="lockgate.client.transactions")

        # shorter than the load: times out, and the producer may call it again
        with pytest.raises(KafkaTimeoutError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            await second.init_transactions(timeout_ms=short_ms)
        assert loads(broker) == 1, "the load ended before the short call timed out"
        assert second.transaction_state == TransactionState.UNINITIALIZED
        # within max_block_ms: retried with backoff until the coordinator has loaded
        await second.init_transactions()
        waited = time.monotonic() - started
        assert loads(broker) == 2
        retries = caplog.text.count(RETRYING.format(transactional_id))
        # retried, spaced by the backoff (how many times depends on how long the load takes)
        assert 1 <= retries <= waited / 0.1 + 1, (retries, waited)

        second.begin_transaction()
        await second.send(topic, b"committed-after", partition=0)
        await second.commit_transaction()
        with pytest.raises(ProducerFencedError):  # the instance from before the restart
            await first.commit_transaction()

        values = await asyncio.to_thread(committed, broker.bootstrap, topic, 2)
        assert values == [b"committed-before", b"committed-after"]
    finally:
        for producer in (first, second):
            if producer is not None:
                await producer.close()
        broker.kill()
