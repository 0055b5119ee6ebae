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
    franz_go.produce_and_consume(franzcheck, reference_kafka.bootstrap)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    reference_kafka: ReferenceKafka, franzcheck: Path, protocol: str
) -> None:
    franz_go.group_shares_a_topic(franzcheck, reference_kafka.bootstrap, protocol)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(
    reference_kafka: ReferenceKafka, franzcheck: Path, protocol: str
) -> None:
    franz_go.exactly_once_chain(franzcheck, reference_kafka.bootstrap, protocol)
