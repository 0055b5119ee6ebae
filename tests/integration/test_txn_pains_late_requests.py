"""Issue 22, pain 5 — a delayed Produce or EndTxn contaminates the next transaction — against
lockgate through a FaultProxy that really holds the request on the wire (the scenarios are
shared with tests/reference/test_txn_pains.py, which runs them against Apache
Kafka). The client gives up on the held request (its timeout), the application ends
transaction N, starts N+1, and the held request reaches the broker while N+1 is open:

- a Produce of N: refused, because N's end gave the producer a new epoch (TV2: every EndTxn;
  classic protocol: the client's KIP-360 bump after an abort that left sequences unanswered);
- an EndTxn(commit) of N whose answer was lost (the client's retry committed N): TV2's epoch
  bump refuses the late copy; under the classic protocol the same epoch would let it commit
  N+1 halfway, so lockgate's client bumps the epoch (KIP-360) after an EndTxn with a lost
  answer, and the late copy is refused there too.

In each case a read_committed consumer sees exactly the committed transactions, once, and the
log holds nothing of the late request."""

from __future__ import annotations

import asyncio
import time

import pytest

from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer
from lockgate.protocol.api import ApiKey
from lockgate.server.broker import Broker
from tests.integration.test_client_producer import read, unique
from tests.support.fault_proxy import Direction, FaultProxy

HELD_SECONDS = 2.5  # how long the proxy holds the request; the client gives up after 1 s
REQUEST_TIMEOUT_MS = 1000


def read_all(bootstrap: str, topic: str, committed: bool, expected: int) -> list[bytes]:
    """Every value of partition 0 from the start, read_committed or not (markers are not
    records): until `expected` came and 0.5 s more passed."""
    records = read(bootstrap, topic, 1, expected, read_committed=committed)
    return [value or b"" for _partition, _key, value in records]


def held_producer(bootstrap: str, version: int) -> Producer:
    return Producer(
        bootstrap,
        transactional_id=unique("late"),
        transaction_version=version,
        linger_ms=0,
        retry_backoff_ms=50,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=REQUEST_TIMEOUT_MS,  # no resend: the held request is the only one
    )


async def until_held_request_arrived(proxy: FaultProxy) -> None:
    """Until the proxy has written every request it took to the broker (the held one
    included), then a moment for the broker to act on it."""
    deadline = time.monotonic() + HELD_SECONDS + 10
    while sum(c.frames[Direction.REQUEST] for c in proxy.connections()) < proxy.frames(
        Direction.REQUEST
    ):
        assert time.monotonic() < deadline, "the held request was never forwarded"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)


async def late_produce_is_refused(proxy: FaultProxy, topic: str, version: int) -> None:
    async with held_producer(proxy.address, version) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        held = proxy.delay(Direction.REQUEST, HELD_SECONDS, api_keys=[ApiKey.PRODUCE])
        future = await producer.send(topic, b"N-late", partition=0)
        with pytest.raises(KafkaError):
            await future  # delivery timeout; the request is still on its way
        with pytest.raises(KafkaError):
            await producer.commit_transaction()  # the transaction is abortable
        await producer.abort_transaction()
        producer.begin_transaction()
        await (await producer.send(topic, b"N+1", partition=0))
        assert held.applied == 1
        await until_held_request_arrived(proxy)  # N's Produce, with N+1 open
        await producer.commit_transaction()
    bootstrap = proxy.address
    assert await asyncio.to_thread(read_all, bootstrap, topic, True, 1) == [b"N+1"]
    assert await asyncio.to_thread(read_all, bootstrap, topic, False, 1) == [b"N+1"]


async def late_end_txn_is_refused(proxy: FaultProxy, topic: str, version: int) -> None:
    async with held_producer(proxy.address, version) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"N", partition=0))
        held = proxy.delay(Direction.REQUEST, HELD_SECONDS, api_keys=[ApiKey.END_TXN])
        await producer.commit_transaction()  # the first EndTxn is held; the retry commits N
        assert held.applied == 1
        producer.begin_transaction()
        await (await producer.send(topic, b"N+1-first", partition=0))
        # the held EndTxn(commit) of N reaches the coordinator while N+1 is open
        await until_held_request_arrived(proxy)
        await (await producer.send(topic, b"N+1-second", partition=0))
        await producer.abort_transaction()  # the application decides: none of N+1
        producer.begin_transaction()
        await (await producer.send(topic, b"N+2", partition=0))
        await producer.commit_transaction()
    bootstrap = proxy.address
    assert await asyncio.to_thread(read_all, bootstrap, topic, True, 2) == [b"N", b"N+2"]


@pytest.mark.parametrize("version", [1, 2])
async def test_a_late_produce_of_the_last_transaction_is_refused(
    proxied_memory_broker: Broker, fault_proxy: FaultProxy, version: int
) -> None:
    topic = unique("late-produce")
    proxied_memory_broker.topics.create(topic, 1, 1, {})
    await late_produce_is_refused(fault_proxy, topic, version)


@pytest.mark.parametrize("version", [1, 2])
async def test_a_late_end_txn_of_the_last_transaction_is_refused(
    proxied_memory_broker: Broker, fault_proxy: FaultProxy, version: int
) -> None:
    topic = unique("late-end")
    proxied_memory_broker.topics.create(topic, 1, 1, {})
    await late_end_txn_is_refused(fault_proxy, topic, version)
