# console/producers.py — what the console's producers page shows: the producer state each
# partition's leader holds (DescribeProducers, key 61) for one partition of a topic or all of
# them: producer id, epoch, last sequence, last timestamp, coordinator epoch and the start
# offset of its open transaction. One Metadata (cached) and one DescribeProducers per leader.
from __future__ import annotations

from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.admin_transactions import ProducerState
from lockgate.client.cluster import TopicPartition
from lockgate.tools.transactions import topic_partitions


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    topic_partition: TopicPartition
    producers: tuple[ProducerState, ...]  # by producer id


@dataclass(frozen=True, slots=True)
class ProducersView:
    topic: str
    partition: int | None  # None: every partition of the topic
    partitions: tuple[PartitionProducers, ...]  # every partition asked, with or without producers

    @property
    def producer_count(self) -> int:
        return sum(len(p.producers) for p in self.partitions)

    @property
    def open_transactions(self) -> int:
        return sum(
            1
            for p in self.partitions
            for producer in p.producers
            if producer.current_txn_start_offset is not None
        )


async def describe_producers(
    admin: Admin, topic: str, partition: int | None = None
) -> ProducersView:
    """UNKNOWN_TOPIC_OR_PARTITION (raised) for a topic or partition that does not exist."""
    partitions = await topic_partitions(admin, topic, partition)
    states = await admin.describe_producers(partitions)
    return ProducersView(
        topic,
        partition,
        tuple(
            PartitionProducers(tp, tuple(sorted(states.get(tp, []), key=lambda p: p.producer_id)))
            for tp in partitions
        ),
    )
