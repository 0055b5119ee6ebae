"""lockgate's consumer with client_rack (client.rack in the blocking facade's properties):
KIP-392 as the Java consumer does it. The rules on the consumer's own state: a leader's
preferred_read_replica is followed until metadata.max.age.ms, or until the broker leaves the
metadata, an error comes from it (an offset out of range there is not reset), or a request to
it fails. Then on three cluster brokers in this process (racks a, b, c; real replication): a
consumer of rack b reads every record from broker 1 (the leader's consumer bytes stay 0),
read_committed included, and goes back to the leader when broker 1 goes away."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from lockgate.client.cluster import BrokerAddress, ClusterMetadata, PartitionInfo, TopicPartition
from lockgate.client.consumer import Consumer, IsolationLevel
from lockgate.client.sync_consumer import consumer_options
from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_produced_batch
from lockgate.replication.selector import RACK_AWARE_REPLICA_SELECTOR
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster
from tests.unit.coordinator.group.support import wait_until

TP = TopicPartition("t", 0)
LEADER = PartitionInfo("t", 0, 0, 1, (0, 1, 2), (0, 1, 2), ())


def answer(error: int = 0, preferred: int = -1, records: bytes = b"") -> SimpleNamespace:
    return SimpleNamespace(error_code=error, preferred_read_replica=preferred, records=records,
                           aborted_transactions=None)  # fmt: skip


def consumer_at(position: int) -> Consumer:
    consumer = Consumer("127.0.0.1:1", client_rack="b", auto_offset_reset="earliest")
    consumer.assign([TP])
    consumer._positions[TP] = position
    consumer.cluster.metadata = ClusterMetadata(
        brokers={n: BrokerAddress(n, "127.0.0.1", 9092 + n) for n in range(3)}
    )
    return consumer


def test_the_client_rack_is_a_consumer_property() -> None:
    assert consumer_options({"client.rack": "b"}) == {"client_rack": "b"}
    assert Consumer("127.0.0.1:1").client_rack == ""  # sent as an empty rack_id


def test_a_preferred_replica_is_followed_until_the_metadata_max_age() -> None:
    consumer = consumer_at(5)
    assert consumer._read_replica(TP, LEADER) == 0
    assert consumer._apply_partition(TP, answer(preferred=2)) == []
    assert consumer._positions[TP] == 5
    assert consumer._read_replica(TP, LEADER) == 2
    consumer._read_replicas[TP] = (2, time.monotonic() - 1)  # expired: the leader again
    assert consumer._read_replica(TP, LEADER) == 0 and TP not in consumer._read_replicas


def test_a_preferred_replica_missing_from_the_metadata_is_left() -> None:
    consumer = consumer_at(5)
    consumer._apply_partition(TP, answer(preferred=7))
    assert consumer._read_replica(TP, LEADER) == 0 and TP not in consumer._read_replicas


def test_an_offset_out_of_range_on_the_preferred_replica_asks_the_leader_without_reset() -> None:
    consumer = consumer_at(5)
    consumer._apply_partition(TP, answer(preferred=2))
    assert consumer._apply_partition(TP, answer(ErrorCode.offset_out_of_range)) == []
    assert consumer._positions[TP] == 5 and consumer._read_replica(TP, LEADER) == 0
    # from the leader it is a real one: the position is reset
    consumer._apply_partition(TP, answer(ErrorCode.offset_out_of_range))
    assert consumer._positions[TP] is None


@pytest.mark.parametrize(
    "error",
    [ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
     ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error],
)  # fmt: skip
def test_an_error_from_the_preferred_replica_sends_the_partition_to_its_leader(
    error: ErrorCode,
) -> None:
    consumer = consumer_at(5)
    consumer._apply_partition(TP, answer(preferred=2))
    assert consumer._apply_partition(TP, answer(error)) == []
    assert consumer._positions[TP] == 5 and consumer._read_replica(TP, LEADER) == 0


def test_a_failed_request_to_a_broker_forgets_only_the_partitions_it_served() -> None:
    consumer = consumer_at(5)
    other = TopicPartition("t", 1)
    consumer._read_replicas = {TP: (2, time.monotonic() + 60), other: (1, time.monotonic() + 60)}
    consumer._forget_read_replica([TP, other], 2)
    assert consumer._read_replicas.keys() == {other}


# -- through three brokers ------------------------------------------------------------------

TOPIC = "t"
SETTINGS = {
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "50",
    "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
    "lockgate.metrics.port": "0",  # the tallies run (the endpoint is not started here)
}
RACKS = {node: {"broker.rack": rack} for node, rack in enumerate("abc")}
Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]


def log_of(member: MemoryClusterBroker) -> Partition:
    partition = member.broker.topics.get(TOPIC, 0)
    assert partition is not None
    return partition


def append(leader: Partition, values: list[bytes], producer_id: int = -1) -> None:
    for value in values:
        if producer_id < 0:
            batch = build_batch([(None, value)])
        else:
            batch = build_batch([(None, value)], attributes=TRANSACTIONAL_BIT,
                                producer_id=producer_id, producer_epoch=0,
                                base_sequence=0)  # fmt: skip
        leader.append(bytearray(batch), validate_produced_batch(batch), 1_000)
    leader.flushed_to(leader.log_end_offset)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with memory_cluster(3, SETTINGS, RACKS) as (store, brokers):
        store.put_topic(TOPIC, 1)
        store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 1, (0, 1, 2)))
        await wait_until(lambda: all(m.broker.topics.get(TOPIC, 0) for m in brokers))
        yield store, brokers


def consumed_bytes(member: MemoryClusterBroker) -> int:
    return member.broker.metrics.topic_out.get(TOPIC, 0)


async def read(consumer: Consumer, count: int) -> list[bytes | None]:
    values: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while len(values) < count:
        assert time.monotonic() < deadline, values
        values.extend(m.value for m in await consumer.poll(200))
    return values


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "isolation", [IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED]
)
async def test_a_consumer_reads_from_the_follower_of_its_rack_and_back_from_the_leader(
    cluster: Cluster, isolation: IsolationLevel
) -> None:
    store, brokers = cluster
    leader = log_of(brokers[0])
    append(leader, [b"a-0", b"a-1"])
    append(leader, [b"aborted"], producer_id=8)
    leader.write_marker(8, 0, False, 0, 1_000, strict_epoch=False)
    append(leader, [b"a-2"])
    await wait_until(lambda: all(log_of(m).high_watermark == 5 for m in brokers), 20)
    bootstrap = ",".join(f"127.0.0.1:{m.broker.port}" for m in brokers)
    async with Consumer(bootstrap, client_rack="b", isolation_level=isolation,
                        auto_offset_reset="earliest") as consumer:  # fmt: skip
        consumer.assign([TP])
        expected = [b"a-0", b"a-1", b"aborted", b"a-2"]
        if isolation is IsolationLevel.READ_COMMITTED:
            expected.remove(b"aborted")
        assert await read(consumer, len(expected)) == expected
        assert consumer._read_replicas[TP][0] == 1
        assert consumed_bytes(brokers[0]) == consumed_bytes(brokers[2]) == 0
        assert consumed_bytes(brokers[1]) > 0
        # broker 1 goes away: the consumer reads on from the leader
        await brokers[1].stop()
        append(leader, [b"a-3"])
        store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 1, (0, 2), 1))  # (out of the ISR)
        assert await read(consumer, 1) == [b"a-3"]
        assert consumed_bytes(brokers[0]) > 0 and TP not in consumer._read_replicas
