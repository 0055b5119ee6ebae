"""The consumer group protocol (KIP-848) through Apache Kafka's Java client (kafka-clients 4.4,
group.protocol=consumer) against lockgate and against Apache Kafka: two members share a topic
2+2 and consume each record once with commits, the admin client describes a consumer group, the
survivor takes every partition when the other leaves, and a consume-transform-produce
transaction commits offsets with the consumer's group metadata (member id and epoch). The
results must be the same on both brokers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reference.test_java_client import run_checks
from tests.support.broker import running_broker
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "ConsumerProtocolChecks.java"


def test_the_java_consumer_protocol_gets_the_same_results_from_both(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    with running_broker(tmp_path / "data") as lockgate:
        ours = run_checks(reference_kafka, lockgate.bootstrap, PROGRAM)
    theirs = run_checks(reference_kafka, reference_kafka.bootstrap, PROGRAM)
    assert ours == theirs
    assert ours["kip848.assignment"] == "2+2" and ours["kip848.consumed"] == "20/20"
    assert ours["kip848.type"] == "Consumer" and ours["kip848.after_leave"] == "4"
    assert ours["kip848.committed"] == ours["kip848_eos.committed"] == "20"
