# The consumer group protocol (KIP-848) at run time: runs the pure state machine of
# consumer_group.py against the coordinator's groups, appends its records to __consumer_offsets
# (Kafka's layout, consumer_records.py) before answering, replays them at load, and keeps one
# session timer per member and one revocation timer per member asked to revoke partitions.
# Also mixed groups (Kafka 4's online migration): converting a classic group, serving its
# classic members' JoinGroup/SyncGroup/Heartbeat/LeaveGroup, and converting it back.
#
# A group's own consumer.session.timeout.ms and consumer.heartbeat.interval.ms (ConfigResource
# GROUP) win over the broker's, read at each heartbeat, so a change applies from the next one.
#
# Invariants: a consumer-protocol group is a classic Group container whose `consumer` is set
# (the container keeps the committed offsets); the in-memory state changes synchronously with
# the append of its records, so no other request sees a state that is not about to be logged.
from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Protocol

from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.coordinator import writes
from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.assignors import ASSIGNORS
from lockgate.coordinator.group.classic import Answer, JoinRequest, SyncRequest
from lockgate.coordinator.group.classic_runtime import Append, ClassicRuntime, append_any
from lockgate.coordinator.group.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ClassicMember,
    ClassicState,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    ConsumerRecord,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    Outcome,
    RecordKind,
    convert_classic,
    expire_revocation,
    heartbeat,
    member_tombstones,
    rearm_revocations,
    remove_member,
    replay,
)
from lockgate.coordinator.group.embedded import (
    assignment_bytes,
    parse_assignment,
    parse_subscription,
)
from lockgate.coordinator.group.group import Group, Member, instance_error
from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.runtime import Deadline, Timer, Timers
from lockgate.protocol.errors import ErrorCode
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


class GroupTimeouts(Protocol):
    """A group's own session timeout and heartbeat interval (its group configs), None where
    it has none."""

    def consumer_session_timeout_ms(self, group: str) -> int | None: ...

    def consumer_heartbeat_interval_ms(self, group: str) -> int | None: ...


class _NoGroupTimeouts:
    """No group has timeouts of its own: the broker's apply to all."""

    def consumer_session_timeout_ms(self, group: str) -> int | None:
        return None

    def consumer_heartbeat_interval_ms(self, group: str) -> int | None:
        return None


class ConsumerProtocol:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicManager,
        groups: dict[str, Group],
        unavailable: Callable[[str], ErrorCode],
        append: Append,
        classic: ClassicRuntime,
        clock: Callable[[], int],
        timers: Timers,
        group_timeouts: GroupTimeouts | None = None,
    ) -> None:
        """`groups`: the coordinator's (a consumer-protocol group is a Group whose `consumer`
        is set); `unavailable`: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a group;
        `classic`: runs the classic groups this converts from and to; `timers`: the port the
        members' session and revocation timers are armed through; `group_timeouts`: the
        groups' own timeouts (None: the broker's for all)."""
        self.topics = topics
        self.groups = groups
        self._unavailable = unavailable
        self._append_records = append
        self.classic = classic
        self._clock = clock
        self._timers = timers
        self._group_timeouts = group_timeouts or _NoGroupTimeouts()
        assignors = tuple(
            _assignor_name(name)
            for name in config.get("group.consumer.assignors").split(",")
            if name.strip()
        )
        self.config = ConsumerGroupConfig(
            assignors=assignors or ("uniform",),
            heartbeat_interval_ms=config.integer("group.consumer.heartbeat.interval.ms"),
            max_size=config.integer("group.consumer.max.size"),
        )
        self.session_timeout_ms = config.integer("group.consumer.session.timeout.ms")
        self.migration_policy = config.get("group.consumer.migration.policy").lower()
        if self.migration_policy not in MIGRATION_POLICIES:
            raise ConfigError(f"group.consumer.migration.policy={self.migration_policy!r}: use "
                              + ", ".join(MIGRATION_POLICIES))  # fmt: skip
        for name, value in (
            ("session.timeout.ms", self.session_timeout_ms),
            ("heartbeat.interval.ms", self.config.heartbeat_interval_ms),
        ):
            low = config.integer(f"group.consumer.min.{name}")
            high = config.integer(f"group.consumer.max.{name}")
            if not low <= value <= high:
                raise ConfigError(f"group.consumer.{name}={value} is not in [{low}, {high}]")
        if self.config.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be below "
                              "group.consumer.session.timeout.ms")  # fmt: skip
        unknown = [name for name in self.config.assignors if name not in ASSIGNORS]
        if unknown:
            raise ConfigError(f"group.consumer.assignors: unknown {', '.join(unknown)} "
                              f"(known: {', '.join(ASSIGNORS)})")  # fmt: skip
        self.sessions: dict[tuple[str, str], Deadline] = {}
        self.revocations: dict[tuple[str, str], Timer] = {}
        self.sessions_expired = 0

    # -- topics ----------------------------------------------------------------------------------

    def topic_counts(self) -> dict[str, int]:
        topics = self.topics.topics
        return {name: record.partitions for name, record in topics.items() if not record.internal}

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return {name: r.topic_id for name, r in self.topics.topics.items()}

    # -- a group's own settings ------------------------------------------------------------------

    def group_config(self, group_id: str) -> ConsumerGroupConfig:
        """The state machine's settings for one group: the broker's, with the group's own
        heartbeat interval if it has one."""
        interval = self._group_timeouts.consumer_heartbeat_interval_ms(group_id)
        if interval is None:
            return self.config
        return dataclasses.replace(self.config, heartbeat_interval_ms=interval)

    def session_timeout_for(self, group_id: str) -> int:
        timeout = self._group_timeouts.consumer_session_timeout_ms(group_id)
        return self.session_timeout_ms if timeout is None else timeout

    # -- heartbeat -------------------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        config = self.group_config(request.group_id)

        def refused(code: ErrorCode) -> HeartbeatResponse:
            return HeartbeatResponse(
                code, request.member_id, request.member_epoch, config.heartbeat_interval_ms
            )

        if request.group_id and (unavailable := self._unavailable(request.group_id)):
            return refused(unavailable)
        container = self.groups.get(request.group_id)
        if container is not None and container.share is not None:
            return HeartbeatResponse(
                ErrorCode.group_id_not_found, request.member_id, request.member_epoch,
                config.heartbeat_interval_ms, None,
                f"Group {request.group_id} is not a consumer group.",
            )  # fmt: skip
        classic = container is not None and container.consumer is None
        if (
            container is not None
            and classic
            and container.members
            and request.member_epoch == 0
            and request.classic is None
            and self._upgrade(container)
        ):
            classic = False
        outcome = heartbeat(
            container.consumer if container is not None else None,
            request,
            self.topic_counts(),
            config,
            self._clock(),
            other_protocol_group=classic and container is not None and bool(container.members),
        )
        if outcome.response.error or outcome.group is None:
            if outcome.response.error == ErrorCode.invalid_request:
                log.info("group %s: ConsumerGroupHeartbeat refused: %s", request.group_id,
                         outcome.response.message)  # fmt: skip
            if not outcome.response.error and container is not None:
                self._touch(container, request.member_id)
            return outcome.response
        durable = self._apply(request.group_id, outcome)
        try:
            await durable
        except writes.WriteFailure as exc:
            return refused(writes.write_error(exc, ErrorCode.coordinator_not_available))
        return outcome.response

    def _apply(self, group_id: str, outcome: Outcome) -> asyncio.Future[None]:
        """Installs the outcome's group, rearms the timers of its members, and appends its
        records; returns their durability."""
        assert outcome.group is not None
        container = self.groups.get(group_id)
        if container is None or container.consumer is None:
            if container is not None and container.generation:
                log.info("group %s: empty classic group converted to the consumer protocol",
                         group_id)  # fmt: skip
            container = self.groups.setdefault(group_id, Group(group_id))
            container.protocol_type = CONSUMER_PROTOCOL_TYPE
            container.protocol = None
            container.generation = 0
        previous = container.consumer
        container.consumer = outcome.group
        for member_id in set(previous.members if previous else ()) - set(outcome.group.members):
            self._cancel(group_id, member_id)
        for member_id in outcome.group.members:
            if previous is None or previous.members.get(member_id) != outcome.group.members.get(
                member_id
            ):
                self._arm_revocation(container, member_id)
        if outcome.response.member_id in outcome.group.members:
            self._touch(container, outcome.response.member_id)
        if outcome.group.group_epoch != (previous.group_epoch if previous else 0):
            log.info("group %s: epoch %d, %d members (%s)", group_id, outcome.group.group_epoch,
                     len(outcome.group.members), outcome.group.state.value)  # fmt: skip
        durable = self._append(group_id, outcome.records)
        left = previous is not None and set(previous.members) - set(outcome.group.members)
        if left and self._downgradable(outcome.group):
            return self._downgrade(container, durable)
        return durable

    def _downgradable(self, group: ConsumerGroup) -> bool:
        if self.migration_policy not in ("bidirectional", "downgrade") or not group.members:
            return False
        if any(m.classic is None for m in group.members.values()):
            return False
        # a classic group needs one protocol (assignor) its members all support
        return bool(set.intersection(*(_protocol_names(m) for m in group.members.values())))

    def _downgrade(self, container: Group, before: asyncio.Future[None]) -> asyncio.Future[None]:
        """Kafka's online downgrade: the last consumer-protocol member left and only classic
        members remain: the group becomes a classic group at its epoch (each member with its
        current assignment) and rebalances, so its members rejoin and elect a leader."""
        group = container.consumer
        assert group is not None
        members = {}
        for m in group.members.values():
            assert m.classic is not None
            self._cancel(container.group_id, m.member_id)
            members[m.member_id] = Member(
                m.member_id, m.instance_id, m.client_id, m.client_host,
                max(m.rebalance_timeout_ms, 0), m.classic.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols), assignment_bytes(m.assigned),
            )  # fmt: skip
        tombstones: list[ConsumerRecord] = []
        for member_id in group.members:
            tombstones += member_tombstones(container.group_id, member_id)
        tombstones += [
            ConsumerRecord(kind, container.group_id, None, None)
            for kind in (RecordKind.TARGET_EPOCH, RecordKind.PARTITION_METADATA,
                         RecordKind.GROUP_EPOCH)
        ]  # fmt: skip
        self._append(container.group_id, tuple(tombstones)).add_done_callback(_log_failure)
        container.consumer = None
        container.protocol_type = CONSUMER_PROTOCOL_TYPE
        container.generation = group.group_epoch
        container.members = members
        container.static_members = {m.instance_id: m.member_id for m in group.members.values()
                                    if m.instance_id}  # fmt: skip
        container.protocol = container.select_protocol()
        container.leader = next(iter(members))
        container.state = GroupState.STABLE
        log.info("group %s: only classic members left: converted to a classic group at "
                 "generation %d", container.group_id, container.generation)  # fmt: skip
        return self.classic.adopt(container, "converted to a classic group")

    def _append(self, group_id: str, records: tuple[ConsumerRecord, ...]) -> asyncio.Future[None]:
        ids = self.topic_ids()
        encoded = [consumer_records.encode(r, ids) for r in records]
        return append_any(self._append_records, group_id, encoded)

    # -- timers ----------------------------------------------------------------------------------

    def _touch(self, container: Group, member_id: str) -> None:
        key = (container.group_id, member_id)
        timer = self.sessions.pop(key, None)
        if timer is not None:
            timer.cancel()
        member = container.consumer.members.get(member_id) if container.consumer else None
        timeout_ms = (
            member.classic.session_timeout_ms
            if member is not None and member.classic is not None
            else self.session_timeout_for(container.group_id)
        )
        self.sessions[key] = Deadline(self._timers, self._clock, timeout_ms / 1000,
                                      self._session_expired, container, member_id)  # fmt: skip

    def _arm_revocation(self, container: Group, member_id: str) -> None:
        key = (container.group_id, member_id)
        timer = self.revocations.pop(key, None)
        if timer is not None:
            timer.cancel()
        group = container.consumer
        member = group.members.get(member_id) if group is not None else None
        # no deadline: a static member that left while revoking (Kafka does not fence it for
        # that until the group is loaded again); an immediate timer would find nothing to
        # expire and rearm itself forever
        if (
            member is None
            or member.state != MemberState.UNREVOKED_PARTITIONS
            or member.revocation_deadline_ms < 0
        ):
            return
        delay = max(member.revocation_deadline_ms - self._clock(), 0) / 1000
        self.revocations[key] = self._timers.call_later(
            delay, self._revocation_expired, container, member_id
        )

    def _cancel(self, group_id: str, member_id: str) -> None:
        for timers in (self.sessions, self.revocations):
            timer = timers.pop((group_id, member_id), None)
            if timer is not None:
                timer.cancel()

    def _current(self, container: Group) -> ConsumerGroup | None:
        if self.groups.get(container.group_id) is not container:
            return None
        return container.consumer

    def _session_expired(self, container: Group, member_id: str) -> None:
        self.sessions.pop((container.group_id, member_id), None)
        group = self._current(container)
        if group is None or member_id not in group.members:
            return
        epoch = group.members[member_id].member_epoch
        log.info("group %s: session of %s expired%s", container.group_id, member_id,
                 " (static member away)" if epoch == STATIC_LEAVE_EPOCH else "")  # fmt: skip
        self.sessions_expired += 1
        outcome = remove_member(group, member_id, self.topic_counts(), self.config)
        self._background(container.group_id, outcome)

    def _revocation_expired(self, container: Group, member_id: str) -> None:
        self.revocations.pop((container.group_id, member_id), None)
        group = self._current(container)
        if group is None:
            return
        outcome = expire_revocation(
            group, member_id, self.topic_counts(), self.config, self._clock()
        )
        if outcome.group is not None:
            log.info("group %s: %s did not revoke its partitions within its rebalance timeout "
                     "and is fenced", container.group_id, member_id)  # fmt: skip
            self._background(container.group_id, outcome)
        else:
            self._arm_revocation(container, member_id)

    def _background(self, group_id: str, outcome: Outcome) -> None:
        if outcome.group is None:
            return
        durable = self._apply(group_id, outcome)
        durable.add_done_callback(_log_failure)

    # -- mixed groups: classic members in a consumer-protocol group (Kafka 4) -------------------

    def _upgrade(self, container: Group) -> bool:
        """Kafka's online upgrade (group.consumer.migration.policy bidirectional or upgrade): a
        classic consumer group becomes a consumer-protocol group when the first
        consumer-protocol member joins; its members stay, as classic members, with their last
        assignments (a rebalance under way is abandoned: its waiting JoinGroup and SyncGroup
        requests get REBALANCE_IN_PROGRESS, and the members rejoin the converted group).
        False when it cannot (policy, undecodable metadata)."""
        if self.migration_policy not in ("bidirectional", "upgrade"):
            return False
        if container.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if len(container.members) >= self.config.max_size:
            return False
        members = []
        try:
            for m in container.members.values():
                # (every consumer-type protocol of a member carries the same subscription)
                subscription = parse_subscription(m.protocols[0][1] if m.protocols else b"")
                members.append(
                    ClassicState(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.rebalance_timeout_ms,
                        ClassicMember(m.session_timeout_ms, tuple(m.protocols)),
                        subscription.topics, parse_assignment(m.assignment),
                    )
                )  # fmt: skip
        except (ValueError, UnicodeDecodeError):
            return False
        group, records = convert_classic(
            container.group_id, container.generation, members, self.topic_counts()
        )
        self.classic.forget(container, ErrorCode.rebalance_in_progress)
        container.members = {}
        container.static_members = {}
        container.pending_members = set()
        container.leader = None
        container.state = GroupState.EMPTY  # (the classic view of the group is over)
        container.generation = 0  # (the consumer group's epoch carries it on)
        log.info("group %s: classic group of %d members converted to the consumer protocol at "
                 "epoch %d", container.group_id, len(members), group.group_epoch)  # fmt: skip
        placeholder = HeartbeatResponse(ErrorCode.none, "", 0, self.config.heartbeat_interval_ms)
        self._background(container.group_id, Outcome(group, placeholder, records))
        for member_id in group.members:
            self._touch(container, member_id)
        return True

    async def classic_join(self, container: Group, request: JoinRequest) -> Answer:
        """JoinGroup of a classic member in a consumer-protocol group: its subscription and
        owned partitions go through the state machine like a heartbeat; it is answered at
        once, as a follower, with its member epoch as the generation."""
        member_id, instance_id = request.member_id, request.group_instance_id
        protocol_type, protocols = request.protocol_type, request.protocols
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}
        if not member_id:
            member_id = f"{instance_id or request.client_id}-{uuid.uuid4()}"
            if instance_id is None and request.require_known_member_id:
                return {"error_code": ErrorCode.member_id_required, "member_id": member_id}
        try:
            subscription = parse_subscription(protocols[0][1])
        except (ValueError, UnicodeDecodeError):
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}
        offered = {name for name, _ in protocols}
        assert container.consumer is not None
        if any(
            m.classic is not None and m.member_id != member_id and not offered & _protocol_names(m)
            for m in container.consumer.members.values()
        ):
            # as Kafka: classic members must keep a protocol in common (for a downgrade)
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}
        topics = self.topic_counts()
        answer = await self.heartbeat(
            HeartbeatRequest(
                container.group_id, member_id, 0, instance_id=instance_id,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                subscribed_topic_names=subscription.topics,
                owned={t: p for t, p in subscription.owned.items() if t in topics},
                client_id=request.client_id, client_host=request.client_host,
                classic=ClassicMember(request.session_timeout_ms, tuple(protocols)),
            )
        )  # fmt: skip
        if answer.error:
            return {"error_code": answer.error, "member_id": member_id}
        return {
            "error_code": 0,
            "generation_id": answer.member_epoch,
            "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocol_name": protocols[0][0],
            "leader": "",
            "member_id": member_id,
            "skip_assignment": False,
            "members": [],
        }

    def _classic_member(
        self, container: Group, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        group = container.consumer
        assert group is not None
        if error := instance_error(group.static_members, member_id, instance_id):
            return error
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.unknown_member_id
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def classic_sync(self, container: Group, request: SyncRequest) -> Answer:
        """SyncGroup of a classic member: its current assignment, from the state machine."""
        member_id, protocol_type, protocol_name = (
            request.member_id, request.protocol_type, request.protocol_name
        )  # fmt: skip
        error = self._classic_member(
            container, member_id, request.group_instance_id, request.generation
        )
        if error:
            return {"error_code": error}
        assert container.consumer is not None
        member = container.consumer.members[member_id]
        assert member.classic is not None
        names = [name for name, _ in member.classic.protocols]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name not in names
        ):
            return {"error_code": ErrorCode.inconsistent_group_protocol}
        self._touch(container, member_id)
        return {
            "error_code": 0,
            "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocol_name": protocol_name or names[0],
            "assignment": assignment_bytes(member.assigned),
        }

    def classic_heartbeat(
        self, container: Group, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Heartbeat of a classic member: REBALANCE_IN_PROGRESS until it has rejoined up to
        its target assignment (a classic member learns of changes only by rejoining)."""
        if error := self._classic_member(container, member_id, instance_id, generation):
            return error
        assert container.consumer is not None
        self._touch(container, member_id)
        member = container.consumer.members[member_id]
        if member.needs_rejoin(container.consumer.assignment_epoch):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def classic_leave(
        self, container: Group, members: list[tuple[str, str | None]]
    ) -> list[Answer]:
        answers = []
        for member_id, instance_id in members:
            group = container.consumer
            assert group is not None
            leaving = member_id
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None or (member_id and known != member_id):
                    code = (
                        ErrorCode.unknown_member_id
                        if known is None
                        else (ErrorCode.fenced_instance_id)
                    )
                    answers.append({"member_id": member_id, "group_instance_id": instance_id,
                                    "error_code": code})  # fmt: skip
                    continue
                leaving = known
            if leaving not in group.members:
                answers.append({"member_id": member_id, "group_instance_id": instance_id,
                                "error_code": ErrorCode.unknown_member_id})  # fmt: skip
                continue
            self._background(
                container.group_id,
                remove_member(group, leaving, self.topic_counts(), self.config),
            )
            # (as Kafka 4.4, the answer echoes the member id of the request)
            answers.append({"member_id": member_id, "group_instance_id": instance_id,
                            "error_code": 0})  # fmt: skip
        return answers

    # -- load / unload ---------------------------------------------------------------------------

    def replay(self, container: Group, key: bytes, value: bytes | None) -> None:
        names = {r.topic_id: name for name, r in self.topics.topics.items()}
        record = consumer_records.decode(key, value, names)
        container.consumer = replay(container.consumer, record)
        container.protocol_type = CONSUMER_PROTOCOL_TYPE
        if container.consumer is not None:
            # a classic group converted to the consumer protocol: its records supersede the
            # classic group record (which the conversion leaves in place)
            container.members = {}
            container.static_members = {}
            container.state = GroupState.EMPTY

    def loaded(self, container: Group) -> None:
        """A restored group's members get a session to come back in, and those still revoking
        partitions their full rebalance timeout from now (as Kafka 4.4: the deadlines are
        not in the records)."""
        if container.consumer is None:
            return
        container.consumer = rearm_revocations(container.consumer, self._clock())
        for member_id in container.consumer.members:
            self._touch(container, member_id)
            self._arm_revocation(container, member_id)

    def unloaded(self, container: Group) -> None:
        if container.consumer is None:
            return
        for member_id in container.consumer.members:
            self._cancel(container.group_id, member_id)


def _assignor_name(configured: str) -> str:
    """Kafka's property lists class names (org.apache.kafka.coordinator.group.assignor.
    UniformAssignor); members ask by name (uniform): both are accepted."""
    name = configured.strip().rsplit(".", 1)[-1]
    return name[: -len("Assignor")].lower() if name.endswith("Assignor") else name.lower()


def _protocol_names(member: ConsumerMember) -> set[str]:
    return {name for name, _ in member.classic.protocols} if member.classic else set()


def _log_failure(durable: asyncio.Future[None]) -> None:
    if not durable.cancelled() and durable.exception() is not None:
        log.error("consumer group records not written: %s", durable.exception())
