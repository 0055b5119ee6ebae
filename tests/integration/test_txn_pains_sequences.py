"""Issue 22, pain 6 — an epoch bump after OUT_OF_ORDER_SEQUENCE silently drops earlier sends —
against lockgate (the lost-request scenario runs against Apache Kafka too, in
tests/reference/test_txn_pains.py's proxied broker). lockgate's idempotent
producer keeps every unacknowledged batch until the broker has answered it: batches behind a
lost one are resent after it, in order, with their sequences; and an epoch bump (KIP-360, here
after the broker forgot the producer while batches were pipelined: UNKNOWN_PRODUCER_ID, which
the client treats as OUT_OF_ORDER_SEQUENCE_NUMBER, see client/sequences.py's classify) renumbers
every unacknowledged batch from 0 instead of dropping them. Every record's future ends with its
own offset, and the log holds each record once, in the order sent."""

from __future__ import annotations

import asyncio

from lockgate.client.producer import Producer, ProducerStats
from lockgate.protocol.api import ApiKey
from lockgate.server.broker import Broker
from tests.integration.test_client_producer import unique, until_producers_forgotten
from tests.integration.test_txn_pains_late_requests import read_all
from tests.support.fault_proxy import Direction, FaultProxy

RECORDS = 40


def pipelining_producer(bootstrap: str) -> Producer:
    """Small batches (two records each), five in flight, so that later batches overtake a
    lost one; short timeouts so the lost one is resent soon."""
    return Producer(
        bootstrap, linger_ms=0, batch_size=256, retry_backoff_ms=50, request_timeout_ms=1000
    )


async def send_all(producer: Producer, topic: str, first: int) -> list[int]:
    futures = [
        await producer.send(topic, f"record-{i:03d}".encode() + b"." * 90, partition=0)
        for i in range(first, RECORDS)
    ]
    await asyncio.wait_for(producer.flush(), 30)
    return [future.result().offset for future in futures]


async def dropped_request_is_resent_in_order(proxy: FaultProxy, topic: str) -> ProducerStats:
    """Shared with the reference module: one Produce request of a pipelined stream is lost on
    the wire; the broker gets the batches after it first (a sequence gap, which it refuses
    with OUT_OF_ORDER_SEQUENCE_NUMBER), and the client finds the answers out of step with its
    requests (the lost one's is missing), closes the connection and resends every
    unacknowledged batch in order, keeping their sequences."""
    async with pipelining_producer(proxy.address) as producer:
        first = await producer.send_and_wait(topic, b"record-000" + b"." * 90, partition=0)
        lost = proxy.drop(Direction.REQUEST, api_keys=[ApiKey.PRODUCE], limit=1)
        offsets = [first.offset, *await send_all(producer, topic, 1)]
        stats = producer.stats
    assert lost.applied == 1
    assert stats.retries >= 1, stats
    assert offsets == list(range(offsets[0], offsets[0] + RECORDS)), offsets
    expected = [f"record-{i:03d}".encode() + b"." * 90 for i in range(RECORDS)]
    assert await asyncio.to_thread(read_all, proxy.address, topic, False, RECORDS) == expected
    return stats


async def test_a_lost_request_s_followers_are_resent_after_it_not_dropped(
    proxied_memory_broker: Broker, fault_proxy: FaultProxy
) -> None:
    topic = unique("lost-request")
    proxied_memory_broker.topics.create(topic, 1, 1, {})
    stats = await dropped_request_is_resent_in_order(fault_proxy, topic)
    assert stats.epoch_bumps == 0, stats  # a gap behind a lost batch needs no new epoch


async def test_an_epoch_bump_with_batches_in_flight_renumbers_them_all(
    forgetful_broker: Broker,
) -> None:
    """The broker forgets the idle producer (producer.id.expiration.ms); the next batches go
    out pipelined, the first is answered UNKNOWN_PRODUCER_ID and the others with errors too;
    the producer bumps its epoch once and resends every one of them, renumbered from 0."""
    topic = unique("forgotten")
    forgetful_broker.topics.create(topic, 1, 1, {})
    address = f"127.0.0.1:{forgetful_broker.port}"
    async with pipelining_producer(address) as producer:
        await producer.send_and_wait(topic, b"record-000" + b"." * 90, partition=0)
        await until_producers_forgotten(forgetful_broker, topic)
        offsets = await send_all(producer, topic, 1)
        assert producer.stats.epoch_bumps == 1, producer.stats
    assert offsets == list(range(1, RECORDS)), offsets
    expected = [f"record-{i:03d}".encode() + b"." * 90 for i in range(RECORDS)]
    assert await asyncio.to_thread(read_all, address, topic, False, RECORDS) == expected
