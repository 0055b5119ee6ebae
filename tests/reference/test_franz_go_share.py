"""franz-go's share consumers (KIP-932, kgo.ShareGroup) against Apache Kafka 4.4: one and two
members of a share group read a topic; records are accepted, released once (handed out again
with delivery count 2) or rejected (never again), held to tests/support/franz_go.check_share.
The same scenario runs against lockgate in tests/compat/test_franz_go_share.py. A new share
group's members get their partitions once the share partitions are initialized, a heartbeat
interval (5 s by default) after joining."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import franz_go
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat


@pytest.mark.parametrize(("consumers", "partitions"), [(1, 1), (2, 3)])
def test_share_consumers_answer_every_record_once(
    reference_kafka: ReferenceKafka, franzcheck: Path, consumers: int, partitions: int
) -> None:
    franz_go.share_group_consumes(
        franzcheck, reference_kafka.bootstrap, f"share-{consumers}-{partitions}", consumers,
        partitions,
    )  # fmt: skip
