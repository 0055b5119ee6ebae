"""Apache Kafka's Java producer (kafka-clients 4.4, idempotent, acks=all) against a 3-broker
lockgate cluster whose partition leader is killed mid-run: NOT_LEADER_OR_FOLLOWER and the
lost connection lead it to the new leader, and every acknowledged record is read back
exactly once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "ClusterProducer.java"
COUNT = 3000


def test_the_java_producer_follows_a_leader_change(
    cluster: BrokerCluster, reference_kafka: ReferenceKafka
) -> None:
    topic = "java-failover"
    cluster.create_topic(topic, partitions=3, replication=3)
    victim = cluster.partitions(topic)[0].leader
    command = [*java_program(PROGRAM, reference_kafka.classpath, "-Xmx256m"),
               cluster.bootstrap, topic, str(COUNT)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = []
    try:
        deadline = time.monotonic() + 120
        for line in process.stdout:
            lines.append(line.strip())
            if line.startswith("ACKED") and int(line.split()[1]) >= COUNT // 3:
                break
            assert time.monotonic() < deadline, "no acknowledgements from the Java producer"
        cluster.brokers[victim].kill()
        out, err = process.communicate(timeout=150)
    finally:
        if process.poll() is None:
            process.kill()
    lines += out.splitlines()
    assert lines and lines[-1] == f"DONE {COUNT} 0", "\n".join(lines[-20:]) + err[-3000:]

    received = consume_all(cluster.bootstrap, topic, 3, COUNT)
    values = sorted(v for records in received.values() for _o, v in records if v is not None)
    assert values == sorted(f"java-{i}".encode() for i in range(COUNT))
    cluster.brokers[victim].start()
    cluster.wait_full_isr(topic)
