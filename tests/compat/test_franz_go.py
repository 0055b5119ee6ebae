"""franz-go (Go: github.com/twmb/franz-go 1.22 and its kadm) against lockgate on one node,
through the program tests/go/franzcheck (see tests/support/franz_go.py):

- its idempotent producer's records are read back once each, in order, at the offsets their
  deliveries reported;
- two members of one consumer group, with the classic protocol and with KIP-848's
  (kgo.ServerSideBalancer), split a topic and consume and commit every record once, and the
  broker describes the group as one of that protocol;
- an exactly-once chain: two GroupTransactSessions (read_committed; consume, produce, commit
  the offsets in the transaction, begin the next at once) copy a filled topic, and a
  read_committed checker finds every input record exactly once in the output, in order.

The same scenarios run against Apache Kafka (tests/reference/test_franz_go.py) and on a
3-broker lockgate cluster (test_franz_go_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import franz_go
from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("franz-go") / "data", franz_go.BROKER_SETTINGS
    ).start()
    try:
        yield process
    finally:
        process.kill()


def test_idempotent_producer_and_consumer(broker: BrokerProcess, franzcheck: Path) -> None:
    franz_go.produce_and_consume(franzcheck, broker.bootstrap)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    broker: BrokerProcess, franzcheck: Path, protocol: str
) -> None:
    franz_go.group_shares_a_topic(franzcheck, broker.bootstrap, protocol)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(broker: BrokerProcess, franzcheck: Path, protocol: str) -> None:
    franz_go.exactly_once_chain(franzcheck, broker.bootstrap, protocol)
