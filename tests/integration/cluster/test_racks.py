"""Racks on four brokers on etcd (broker.rack a, b, c, a; Kafka's RackAwareReplicaSelector),
through real clients:
- DescribeCluster (confluent-kafka) shows every broker's rack; CreateTopics and
  CreatePartitions place every partition's three replicas on the three racks, although two
  brokers share rack a.
- Fetch from follower (KIP-392): confluent-kafka consumers naming client.rack b or c read a
  topic led by broker 0 (rack a) entirely from the follower of their rack, read_uncommitted
  and read_committed (committed records seen, aborted ones not): the leader's per-topic
  consumer bytes (lockgate_topic_bytes_out) stay 0 while the followers' cover the log, which
  cannot happen unless the followers served every fetch. The Java consumer (kafka-clients 4.4,
  client.rack b, read_committed) does the same. franz-go with kgo.Rack("b") reads a topic of
  three replicas per partition and reports that every batch came from broker 1, the only
  broker of rack b."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from lockgate.replication.selector import RACK_AWARE_REPLICA_SELECTOR
from tests.support import franz_go
from tests.support.broker import free_port
from tests.support.clients import confluent_consumer, position
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.java_programs import java_program
from tests.support.reference_kafka import reference_classpath

RACKS = {0: "a", 1: "b", 2: "c", 3: "a"}
JAVA_CONSUMER = Path(__file__).parents[2] / "reference" / "java" / "RackConsumer.java"
PLAIN, ABORTED, COMMITTED = 1000, 100, 150


@pytest.fixture(scope="module")
def racked(etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    node_settings = {
        node: {"broker.rack": rack, "lockgate.metrics.port": str(free_port())}
        for node, rack in RACKS.items()
    }
    cluster = BrokerCluster(
        tmp_path_factory.mktemp("racks"),
        etcd,
        size=len(RACKS),
        settings={
            **franz_go.BROKER_SETTINGS,
            "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
        },
        node_settings=node_settings,
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def topic_bytes(cluster: BrokerCluster, node: int, family: str, topic: str) -> int:
    """A per-topic counter of the broker's metrics endpoint (0 when absent)."""
    port = cluster.brokers[node].settings["lockgate.metrics.port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf'^{family}(?:_total)?{{topic="{topic}"}} (\S+)$', text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def bytes_out(cluster: BrokerCluster, node: int, topic: str) -> int:
    """Record bytes the broker returned to consumers' fetches of `topic`."""
    return topic_bytes(cluster, node, "lockgate_topic_bytes_out", topic)


def test_racks_are_described_and_replicas_placed_on_three_racks(racked: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    nodes = admin.describe_cluster(request_timeout=10).result(30).nodes
    assert {node.id: node.rack for node in nodes} == RACKS
    racked.create_topic("striped", partitions=8, replication=3)
    for future in admin.create_partitions([NewPartitions("striped", 12)]).values():
        future.result(30)
    racked.wait_for(lambda: len(racked.partitions("striped")) == 12, "striped grown to 12")
    for index, partition in racked.partitions("striped").items():
        assert sorted(RACKS[r] for r in partition.replicas) == ["a", "b", "c"], index


def create_on_a_b_c(cluster: BrokerCluster, topic: str) -> None:
    """One partition led by broker 0 (rack a), followed by brokers 1 (b) and 2 (c)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1, 2]])]
    )
    for future in created.values():
        future.result(30)
    cluster.wait_for(lambda: cluster.partitions(topic)[0].isr == (0, 1, 2), f"{topic} in sync")


def produce(cluster: BrokerCluster, topic: str) -> None:
    """PLAIN records, then a transaction of ABORTED records aborted, then one of COMMITTED
    records committed (after the aborted ones in the log)."""
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(PLAIN):
        plain.produce(topic, f"plain-{i}".encode())
    assert plain.flush(30) == 0
    transactional = Producer({"bootstrap.servers": cluster.bootstrap,
                              "transactional.id": f"{topic}-writer"})  # fmt: skip
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(ABORTED):
        transactional.produce(topic, f"aborted-{i}".encode())
    transactional.flush(30)
    transactional.abort_transaction(30)
    transactional.begin_transaction()
    for i in range(COMMITTED):
        transactional.produce(topic, f"committed-{i}".encode())
    transactional.commit_transaction(30)


def read_from_rack(cluster: BrokerCluster, topic: str, rack: str, isolation: str) -> list[str]:
    """Every record visible to a consumer of `rack`, up to the end of the committed
    transaction (the last COMMITTED record), as their values in offset order."""
    consumer = confluent_consumer(cluster.bootstrap, **{"client.rack": rack,
                                                        "isolation.level": isolation})  # fmt: skip
    values: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        last = f"committed-{COMMITTED - 1}"
        for _ in range(200):
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    continue
                position(message)
                values.append(bytes(message.value() or b"").decode())
            if last in values:
                break
    finally:
        consumer.close()
    return values


def test_consumers_read_a_topic_from_the_follower_in_their_rack(racked: BrokerCluster) -> None:
    topic = "nearby"
    create_on_a_b_c(racked, topic)
    produce(racked, topic)
    racked.wait_full_isr(topic)
    assert [bytes_out(racked, node, topic) for node in RACKS] == [0, 0, 0, 0]

    everything = read_from_rack(racked, topic, "b", "read_uncommitted")
    plain = [f"plain-{i}" for i in range(PLAIN)]
    aborted = [f"aborted-{i}" for i in range(ABORTED)]
    committed = [f"committed-{i}" for i in range(COMMITTED)]
    assert everything == plain + aborted + committed

    visible = read_from_rack(racked, topic, "c", "read_committed")
    assert visible == plain + committed  # the aborted transaction is not seen

    served = {node: bytes_out(racked, node, topic) for node in RACKS}
    assert served[0] == 0, served  # the leader sent both consumers away with no records
    assert served[3] == 0, served  # broker 3 holds no replica
    # each follower served its consumer every batch the leader took in (the aborted ones too:
    # read_committed consumers drop them themselves)
    appended = topic_bytes(racked, 0, "lockgate_topic_bytes_in", topic)
    assert served[1] >= appended > 0 and served[2] >= appended, (served, appended)


def test_the_java_consumer_reads_from_the_follower_in_its_rack(racked: BrokerCluster) -> None:
    classpath = reference_classpath()
    if classpath is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    topic = "nearby-java"
    create_on_a_b_c(racked, topic)
    produce(racked, topic)
    racked.wait_full_isr(topic)
    done = subprocess.run(
        [*java_program(JAVA_CONSUMER, classpath, "-Xmx256m"), racked.bootstrap, topic, "b",
         "read_committed", str(PLAIN + COMMITTED)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[-1:] == [f"DONE {PLAIN + COMMITTED}"], done.stdout[-2000:] + done.stderr[-3000:]
    values = [line.removeprefix("VALUE ") for line in lines if line.startswith("VALUE ")]
    assert values == [f"plain-{i}" for i in range(PLAIN)] + [
        f"committed-{i}" for i in range(COMMITTED)
    ]
    served = {node: bytes_out(racked, node, topic) for node in RACKS}
    appended = topic_bytes(racked, 0, "lockgate_topic_bytes_in", topic)
    assert served[0] == served[2] == served[3] == 0 and served[1] >= appended > 0, served


def test_franz_go_reads_every_batch_from_the_broker_of_its_rack(
    racked: BrokerCluster, franzcheck: Path
) -> None:
    result = franz_go.run(franzcheck, "produce-consume", brokers=racked.bootstrap,
                          topic="franz-rack", partitions=4, replication=3, records=800,
                          rack="b")  # fmt: skip
    franz_go.check_produce_consume(result, records=800, partitions=4)
    # broker 1 is rack b's only broker, and every partition has a replica there
    assert set(result["batches_from"]) == {"1"} and result["batches_from"]["1"] > 0, result
    placement = racked.partitions("franz-rack")
    assert all(1 in p.replicas for p in placement.values())
    assert any(p.leader != 1 for p in placement.values())  # some reads were from a follower
    served = {node: bytes_out(racked, node, "franz-rack") for node in RACKS}
    assert served[1] > 0 and served[0] == served[2] == served[3] == 0, served
