# tools/group_lag.py — a consumer group's lag as kafka-consumer-groups.sh --describe shows it:
# for every partition the group has committed an offset for or a member owns, the committed
# offset, the log end offset and the member that owns it. Shared by `lockgate groups describe`
# and the console's group page.
#
# End offsets are read_uncommitted (Kafka's tool does the same) and asked with one ListOffsets
# per partition leader, so a group over many partitions costs one round trip per broker.
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.admin_groups import MemberDescription
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.tools.offset_lookup import LATEST


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic_partition: TopicPartition
    committed: int | None  # None: the group has no offset for it (an owner has not committed)
    end_offset: int
    member_id: str | None  # None: no member owns it

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else self.end_offset - self.committed


async def partition_lags(
    admin: Admin, group_id: str, members: Iterable[MemberDescription]
) -> list[PartitionLag]:
    """Sorted by partition; the first partition's ListOffsets error is raised."""
    owner: dict[TopicPartition, str] = {}
    for member in members:
        for assigned in member.assignment:
            owner[assigned] = member.member_id
    committed = await admin.list_group_offsets(group_id)
    partitions = sorted(set(committed) | set(owner))
    if not partitions:
        return []
    ends: dict[TopicPartition, int] = {}
    for tp, answer in (await admin.list_offsets({tp: LATEST for tp in partitions})).items():
        if isinstance(answer, KafkaError):
            raise answer
        ends[tp] = answer.offset
    return [PartitionLag(tp, committed.get(tp), ends[tp], owner.get(tp)) for tp in partitions]
