"""Issue 22, pain 5 against Apache Kafka: the late Produce and late EndTxn scenarios of
tests/integration/test_txn_pains_late_requests.py, with Kafka advertising a FaultProxy in front
of it so that every client connection goes through the proxy. Kafka refuses N's late Produce
under both protocols (the new epoch after N's end). A late EndTxn(commit) of N under the
classic protocol carries the same epoch as N+1 and Kafka would commit N+1 halfway with it:
lockgate's client bumps its epoch (KIP-360) after an EndTxn whose answer was lost, so Kafka
refuses the late copy too. (lockgate's broker also refuses an EndTxn from a connection its
client has left.) Pain 6's lost Produce request: Kafka too gets every record once, in order."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.test_txn_pains_late_requests import (
    late_end_txn_is_refused,
    late_produce_is_refused,
)
from tests.integration.test_txn_pains_sequences import dropped_request_is_resent_in_order
from tests.integration.test_txn_pains_timeouts import unique
from tests.support.broker import free_port
from tests.support.clients import create_topic
from tests.support.fault_proxy import FaultProxy
from tests.support.reference_kafka import ReferenceKafka, reference_classpath

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def proxied_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    """Apache Kafka advertising the proxy's address; the proxy forwards to Kafka's port."""
    classpath = reference_classpath()
    if classpath is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    proxy = FaultProxy(listen_port=free_port()).start()
    try:
        kafka = ReferenceKafka(
            tmp_path_factory.mktemp("late-kafka") / "data",
            classpath,
            {"advertised.listeners": f"PLAINTEXT://{proxy.address}"},
        )
        proxy.set_upstream(kafka.port)
        kafka.start()
        try:
            yield proxy
        finally:
            kafka.stop()
    finally:
        proxy.stop()


@pytest.fixture
def proxy(proxied_kafka: FaultProxy) -> FaultProxy:
    proxied_kafka.clear_rules()
    return proxied_kafka


@pytest.mark.parametrize("version", [1, 2])
async def test_kafka_refuses_a_late_produce_of_the_last_transaction(
    proxy: FaultProxy, version: int
) -> None:
    topic = unique("late-produce")
    create_topic(proxy.address, topic, 1)
    await late_produce_is_refused(proxy, topic, version)


@pytest.mark.parametrize("version", [1, 2])
async def test_kafka_refuses_a_late_end_txn_after_the_client_s_bump(
    proxy: FaultProxy, version: int
) -> None:
    topic = unique("late-end")
    create_topic(proxy.address, topic, 1)
    await late_end_txn_is_refused(proxy, topic, version)


async def test_kafka_gets_the_batches_behind_a_lost_request_once_in_order(
    proxy: FaultProxy,
) -> None:
    topic = unique("lost-request")
    create_topic(proxy.address, topic, 1)
    await dropped_request_is_resent_in_order(proxy, topic)
