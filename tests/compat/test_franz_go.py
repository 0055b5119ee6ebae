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
    result = franz_go.run(
        franzcheck, "produce-consume", brokers=broker.bootstrap, topic="franz-pc",
        partitions=3, records=1000,
    )  # fmt: skip
    franz_go.check_produce_consume(result, records=1000, partitions=3)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    broker: BrokerProcess, franzcheck: Path, protocol: str
) -> None:
    name = f"franz-group-{protocol}"
    result = franz_go.run(
        franzcheck, "group", brokers=broker.bootstrap, topic=name, group=name, protocol=protocol,
        partitions=6, records=600,
    )  # fmt: skip
    franz_go.check_group(result, protocol, records=600, partitions=6)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(broker: BrokerProcess, franzcheck: Path, protocol: str) -> None:
    name = f"franz-eos-{protocol}"
    result = franz_go.run(
        franzcheck, "eos", brokers=broker.bootstrap, input=f"{name}-in", output=f"{name}-out",
        group=name, protocol=protocol, workers=2, partitions=4, records=2000, max_poll=100,
    )  # fmt: skip
    franz_go.check_exactly_once(result, records=2000)
