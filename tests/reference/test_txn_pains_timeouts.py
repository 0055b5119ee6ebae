"""Issue 22, pains 1-3 where the behaviour is the broker's: the scenarios of
tests/integration/test_txn_pains_timeouts.py (which runs them against lockgate), with the same
helpers and lockgate's client, against Apache Kafka 4.x with the same small settings. Both
brokers abort a dead producer's transaction after its timeout and at once when its
transactional id comes back, and refuse a transactional batch for a partition the transaction
never added, so Kafka's hanging transaction proper cannot start (pain 1); both expire an idle
transactional id, which lockgate's client reports as such (pain 2). A transaction that
outlived its timeout (pain 3) is where they differ: lockgate's coordinator tells the timeout
apart from a newer instance under either protocol; Kafka answers the timed-out producer's
abort as a retry under transaction version 2 but fences it under the classic protocol, where
the client goes fatal. On both a real second instance is fenced and keeps its own
transaction. No loss, no duplicate in either log."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from lockgate.client.errors import ProducerFencedError
from lockgate.client.transactions import TransactionTimedOutError
from tests.integration.test_txn_pains_timeouts import (
    expired_transactional_id_is_reported,
    hanging_transaction_is_aborted_by_its_timeout,
    restarted_producer_aborts_the_hanging_transaction,
    second_instance_still_fences,
    timed_out_transaction_is_abortable,
    unadded_partition_is_refused,
    unique,
)
from tests.support.clients import create_topic
from tests.support.reference_kafka import ReferenceKafka, reference_classpath

pytestmark = pytest.mark.compat

# Both brokers' names for the same knobs.
SMALL_SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
    "transactional.id.expiration.ms": "2000",
}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceKafka]:
    """Apache Kafka with the small settings (the session's reference broker has defaults)."""
    classpath = reference_classpath()
    if classpath is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    broker = ReferenceKafka(
        tmp_path_factory.mktemp("pains-kafka") / "data", classpath, SMALL_SETTINGS
    ).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def bootstrap(kafka: ReferenceKafka) -> str:
    return kafka.bootstrap


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
