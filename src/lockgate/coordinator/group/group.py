# One classic group's state and the membership checks shared by its APIs. Plain data: no
# futures, no timer handles. Whether a member waits in a JoinGroup or SyncGroup is a flag here;
# the waiting requests themselves and the session and rebalance timers are held by the I/O
# shell (classic_runtime.py), the transitions that move this state are in classic.py.
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from lockgate.coordinator.group.committed import CommittedOffsets
from lockgate.coordinator.group.consumer_group import ConsumerGroup
from lockgate.coordinator.group.share_group import ShareGroup
from lockgate.coordinator.group.state import LEGAL_PREVIOUS, GroupState
from lockgate.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0  # its session ends session_timeout_ms after this
    joining: bool = False  # a JoinGroup of this member waits for the next generation
    syncing: bool = False  # a SyncGroup of this member waits for the leader's assignments

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")


def instance_error(
    static_members: Mapping[str, str], member_id: str, group_instance_id: str | None
) -> ErrorCode:
    """Kafka 4.4's check of a request's instance id: one the group does not know is
    UNKNOWN_MEMBER_ID (even with a known member id: the member it names is not that static
    member), one held by another member id FENCED_INSTANCE_ID (an older incarnation)."""
    if group_instance_id is None:
        return ErrorCode.none
    holder = static_members.get(group_instance_id)
    if holder is None:
        return ErrorCode.unknown_member_id
    return ErrorCode.fenced_instance_id if holder != member_id else ErrorCode.none


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str = ""
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id → member id
    pending_members: set[str] = field(default_factory=set)  # told MEMBER_ID_REQUIRED
    # (topic, partition) → the committed offset's record value, held as the records the log
    # holds (committed.py), decoded when read (records.decode_offset_value)
    offsets: CommittedOffsets = field(init=False)
    state_timestamp: int = -1
    rebalance_deadline_ms: int = 0  # the running rebalance completes the join by then
    rebalance_initial: bool = False  # the running rebalance began in Empty (initial delay)
    # set: a consumer-protocol group (KIP-848), whose members live there, not in `members`
    consumer: ConsumerGroup | None = None
    # set: a share group (KIP-932), whose members live there; it has no committed offsets
    share: ShareGroup | None = None

    def __post_init__(self) -> None:
        self.offsets = CommittedOffsets(self.group_id)

    @property
    def has_members(self) -> bool:
        return (
            bool(self.members)
            or bool(self.consumer and self.consumer.members)
            or bool(self.share and self.share.members)
        )

    def transition(self, state: GroupState) -> None:
        if self.state not in LEGAL_PREVIOUS[state]:
            raise ValueError(
                f"group {self.group_id}: illegal transition {self.state.value} → {state.value}"
            )
        self.state = state

    def select_protocol(self) -> str | None:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        if not self.members:
            return None
        common = set.intersection(
            *({name for name, _ in m.protocols} for m in self.members.values())
        )
        if not common:
            return None
        votes = Counter(
            next(name for name, _ in m.protocols if name in common) for m in self.members.values()
        )
        return max(sorted(common), key=lambda name: votes[name])

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        offered = {name for name, _ in protocols}
        return all(offered & {name for name, _ in m.protocols} for m in self.members.values())

    def check_member(
        self, member_id: str, group_instance_id: str | None, generation: int | None
    ) -> ErrorCode:
        """Membership of a request that names a member (Sync, Heartbeat, LeaveGroup by member
        id, commits: KIP-447), as Kafka 4.4 checks it: an instance id must be one the group
        knows (UNKNOWN_MEMBER_ID, even when the member id is known: the member it names is
        not that static member) and belong to this member id (FENCED_INSTANCE_ID: an older
        incarnation); then the member id must be known, and the generation current."""
        if error := instance_error(self.static_members, member_id, group_instance_id):
            return error
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation is not None and generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def check_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        *,
        transactional: bool,
    ) -> ErrorCode:
        """Kafka 4.4's checks of an OffsetCommit or TxnOffsetCommit to this classic group (one
        answer for the whole request). Generation -1 into an Empty group is accepted whatever
        member or instance it names (the admin client, consumers without group management);
        a request naming a generation, a member or an instance is fenced by check_member
        (KIP-447); one naming none (-1, no member, no instance) is refused from a group with
        members (UNKNOWN_MEMBER_ID), unless transactional (a producer that did not pass the
        consumer's group metadata is not fenced). A plain commit between the join and the
        leader's SyncGroup (CompletingRebalance) is REBALANCE_IN_PROGRESS: the generation has
        no assignment yet; during PreparingRebalance commits go through (consumers commit
        while revoking)."""
        if generation < 0 and self.state == GroupState.EMPTY:
            return ErrorCode.none
        if generation >= 0 or member_id or group_instance_id is not None:
            error = self.check_member(member_id, group_instance_id, generation)
            if error:
                return error
        elif not transactional:
            return ErrorCode.unknown_member_id
        if not transactional and self.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def all_joined(self) -> bool:
        return all(m.joining for m in self.members.values())

    @property
    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
