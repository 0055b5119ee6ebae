# tools/offset_lookup.py — what the group tools (consumer and share groups) ask the cluster
# while planning a reset: partitions' offsets at a time (earliest, latest, or the first at or
# after a timestamp) and the partitions --topic names. (The text formats are offset_specs.py's.)
from __future__ import annotations

from collections.abc import Iterable, Sequence

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.tools.offset_specs import Plan, parse_topic_scope

EARLIEST, LATEST = -2, -1  # ListOffsets' timestamps for the log start and end


async def offsets_at(admin: Admin, partitions: Sequence[TopicPartition], when: int) -> Plan:
    """Each partition's offset at `when` (EARLIEST, LATEST or a timestamp: -1 where no record
    is that recent); the first partition's error is raised."""
    plan: Plan = {}
    if not partitions:
        return plan
    for tp, answer in (await admin.list_offsets({tp: when for tp in partitions})).items():
        if isinstance(answer, KafkaError):
            raise answer
        plan[tp] = answer.offset
    return plan


async def scoped_partitions(
    admin: Admin, topics: Iterable[str], otherwise: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """The partitions --topic names (`topic:0,2` or every partition of `topic`), sorted; with
    no --topic (--all-topics), `otherwise` sorted."""
    topics = list(topics)
    if not topics:
        return sorted(otherwise)
    found: list[TopicPartition] = []
    for text in topics:
        scope = parse_topic_scope(text)
        if scope.partitions:
            found.extend(TopicPartition(scope.topic, p) for p in scope.partitions)
        else:
            info = await admin.cluster.topic(scope.topic)
            found.extend(p.topic_partition for p in info.partitions)
    return sorted(dict.fromkeys(found))
