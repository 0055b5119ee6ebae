"""franz-go (Go: github.com/twmb/franz-go 1.22 and its kadm) against Apache Kafka 4.4: the
scenarios of tests/compat/test_franz_go.py (idempotent produce and consume, a consumer group of
two members with the classic protocol and with KIP-848's, an exactly-once chain of two
GroupTransactSessions with its checker), held to the same checks, so that what they ask of
lockgate is what Kafka does. Kafka's KIP-848 heartbeat interval stays at its default (5 s): a
member joining a consumer-protocol group waits for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import franz_go
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat


def test_idempotent_producer_and_consumer(
    reference_kafka: ReferenceKafka, franzcheck: Path
) -> None:
    result = franz_go.run(
        franzcheck, "produce-consume", brokers=reference_kafka.bootstrap, topic="franz-pc",
        partitions=3, records=1000,
    )  # fmt: skip
    franz_go.check_produce_consume(result, records=1000, partitions=3)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    reference_kafka: ReferenceKafka, franzcheck: Path, protocol: str
) -> None:
    name = f"franz-group-{protocol}"
    result = franz_go.run(
        franzcheck, "group", brokers=reference_kafka.bootstrap, topic=name, group=name,
        protocol=protocol, partitions=6, records=600,
    )  # fmt: skip
    franz_go.check_group(result, protocol, records=600, partitions=6)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(
    reference_kafka: ReferenceKafka, franzcheck: Path, protocol: str
) -> None:
    name = f"franz-eos-{protocol}"
    result = franz_go.run(
        franzcheck, "eos", brokers=reference_kafka.bootstrap, input=f"{name}-in",
        output=f"{name}-out", group=name, protocol=protocol, workers=2, partitions=4,
        records=2000, max_poll=100,
    )  # fmt: skip
    franz_go.check_exactly_once(result, records=2000)
