"""franz-go's share consumers (KIP-932, kgo.ShareGroup) against a broker serving share groups:
one and two members of a share group read a topic; records are accepted, released once (handed
out again with delivery count 2) or rejected (never again), held to
tests/support/franz_go.check_share. Runs against Apache Kafka 4.4 and, once it serves share
groups, against lockgate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import franz_go

pytestmark = pytest.mark.compat

BROKERS = ["kafka", "lockgate"]


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
@pytest.mark.parametrize(("consumers", "partitions"), [(1, 1), (2, 3)])
def test_share_consumers_answer_every_record_once(
    share_broker: str, franzcheck: Path, consumers: int, partitions: int
) -> None:
    franz_go.share_group_consumes(
        franzcheck, share_broker, f"franz-share-{consumers}-{partitions}", consumers, partitions
    )
