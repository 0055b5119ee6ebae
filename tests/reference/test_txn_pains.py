"""Issue 22's transaction pains where the behaviour is the broker's, against Apache Kafka 4.x:
the scenarios of tests/integration/test_txn_pains_timeouts.py, test_txn_pains_late_requests.py
and test_txn_pains_sequences.py (which run them against lockgate), with the same helpers and
lockgate's client, on one Kafka with the same small settings that advertises a FaultProxy in
front of it (every client connection goes through the proxy; no rules but a test's own).

Pains 1-3: both brokers abort a dead producer's transaction after its timeout and at once when
its transactional id comes back, and refuse a transactional batch for a partition the
transaction never added, so Kafka's hanging transaction proper cannot start (pain 1); both
expire an idle transactional id, which lockgate's client reports as such (pain 2). A
transaction that outlived its timeout (pain 3) is where they differ: lockgate's coordinator
tells the timeout apart from a newer instance under either protocol; Kafka answers the
timed-out producer's abort as a retry under transaction version 2 but fences it under the
classic protocol, where the client goes fatal. On both a real second instance is fenced and
keeps its own transaction.

Pain 5: Kafka refuses a late Produce of the last transaction under both protocols (the new
epoch after its end). A late classic EndTxn(commit) carries the same epoch as the next
transaction and Kafka would commit that one halfway with it: lockgate's client bumps its epoch
(KIP-360) after an EndTxn whose answer was lost, so Kafka refuses the late copy too (lockgate's
broker also refuses an EndTxn from a connection its client has left). Pain 6: the batches
behind a lost Produce request reach Kafka once, in order. No loss, no duplicate in any log."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lockgate.client.errors import ProducerFencedError
from lockgate.client.transactions import TransactionTimedOutError
from tests.integration.test_client_producer import unique
from tests.integration.test_txn_pains_late_requests import (
    late_end_txn_is_refused,
    late_produce_is_refused,
)
from tests.integration.test_txn_pains_sequences import dropped_request_is_resent_in_order
from tests.integration.test_txn_pains_timeouts import (
    expired_transactional_id_is_reported,
    hanging_transaction_is_aborted_by_its_timeout,
    restarted_producer_aborts_the_hanging_transaction,
    second_instance_still_fences,
    timed_out_transaction_is_abortable,
    unadded_partition_is_refused,
)
from tests.support.broker import free_port
from tests.support.clients import create_topic
from tests.support.fault_proxy import FaultProxy
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

# Both brokers' names for the same knobs.
SMALL_SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
    "transactional.id.expiration.ms": "2000",
}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, classpath: str) -> Iterator[FaultProxy]:
    """Apache Kafka with the small settings (the session's reference broker has defaults),
    advertising the proxy's address; the proxy forwards to Kafka's port."""
    proxy = FaultProxy(listen_port=free_port()).start()
    try:
        settings = {**SMALL_SETTINGS, "advertised.listeners": f"PLAINTEXT://{proxy.address}"}
        broker = ReferenceKafka(
            tmp_path_factory.mktemp("pains-kafka") / "data", classpath, settings
        )
        proxy.set_upstream(broker.port)
        broker.start()
        try:
            yield proxy
        finally:
            broker.stop()
    finally:
        proxy.stop()


@pytest.fixture
def proxy(kafka: FaultProxy) -> FaultProxy:
    kafka.clear_rules()
    return kafka


@pytest.fixture
def bootstrap(proxy: FaultProxy) -> str:
    return proxy.address


def new_topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    topic = unique(prefix)
    create_topic(bootstrap, topic, partitions)
    return topic


async def test_a_killed_producer_s_transaction_is_aborted_after_its_timeout(
    bootstrap: str,
) -> None:
    topic = await asyncio.to_thread(new_topic, bootstrap, "hanging-timeout")
    await hanging_transaction_is_aborted_by_its_timeout(bootstrap, topic)


async def test_a_restarted_producer_aborts_the_hanging_transaction_at_once(
    bootstrap: str,
) -> None:
    topic = await asyncio.to_thread(new_topic, bootstrap, "hanging-restart")
    await restarted_producer_aborts_the_hanging_transaction(bootstrap, topic)


async def test_a_partition_never_added_to_the_transaction_is_refused(bootstrap: str) -> None:
    topic = await asyncio.to_thread(new_topic, bootstrap, "unadded", 2)
    await unadded_partition_is_refused(bootstrap, topic)


async def test_an_expired_transactional_id_is_reported_as_such(
    bootstrap: str,
) -> None:
    topic = await asyncio.to_thread(new_topic, bootstrap, "expired-id")
    await expired_transactional_id_is_reported(bootstrap, topic, version=None)


@pytest.mark.parametrize(
    ("version", "outcome"), [(1, ProducerFencedError), (2, TransactionTimedOutError)]
)
async def test_a_timed_out_transaction(
    bootstrap: str, version: int, outcome: type[Exception]
) -> None:
    """Under transaction version 2 Kafka answers the abort under the timed-out epoch as a
    retry: TransactionTimedOutError, and the producer goes on (as against lockgate). Under the
    classic protocol the bump is indistinguishable from a newer instance's: ProducerFencedError
    (fatal), as the Java client and librdkafka report it (lockgate: TransactionTimedOutError).
    Nothing of the timed-out transaction is visible."""
    topic = await asyncio.to_thread(new_topic, bootstrap, "timed-out")
    await timed_out_transaction_is_abortable(bootstrap, topic, version, outcome)


async def test_a_real_second_instance_is_still_fenced(bootstrap: str) -> None:
    topic = await asyncio.to_thread(new_topic, bootstrap, "second")
    await second_instance_still_fences(bootstrap, topic, version=None)


@pytest.mark.parametrize("version", [1, 2])
async def test_a_late_produce_of_the_last_transaction_is_refused(
    proxy: FaultProxy, version: int
) -> None:
    topic = await asyncio.to_thread(new_topic, proxy.address, "late-produce")
    await late_produce_is_refused(proxy, topic, version)


@pytest.mark.parametrize("version", [1, 2])
async def test_a_late_end_txn_is_refused_after_the_client_s_bump(
    proxy: FaultProxy, version: int
) -> None:
    topic = await asyncio.to_thread(new_topic, proxy.address, "late-end")
    await late_end_txn_is_refused(proxy, topic, version)


async def test_the_batches_behind_a_lost_request_arrive_once_in_order(
    proxy: FaultProxy,
) -> None:
    topic = await asyncio.to_thread(new_topic, proxy.address, "lost-request")
    await dropped_request_is_resent_in_order(proxy, topic)
