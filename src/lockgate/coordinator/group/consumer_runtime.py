# The consumer group protocol (KIP-848) at run time: runs the pure state machine of
# consumer_group.py against the coordinator's groups, appends its records to __consumer_offsets
# (Kafka's layout, consumer_records.py) before answering, replays them at load, and keeps one
# session timer per member and one revocation timer per member asked to revoke partitions.
#
# Invariants: a consumer-protocol group is a classic Group container whose `consumer` is set
# (the container keeps the committed offsets); the in-memory state changes synchronously with
# the append of its records, so no other request sees a state that is not about to be logged.
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from lockgate.coordinator import writes
from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.assignors import ASSIGNORS
from lockgate.coordinator.group.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerRecord,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    Outcome,
    expire_revocation,
    heartbeat,
    remove_member,
    replay,
)
from lockgate.coordinator.group.group import Group
from lockgate.protocol.errors import ErrorCode
from lockgate.server.config import ConfigError

if TYPE_CHECKING:
    from lockgate.coordinator.group.service import GroupCoordinator

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"


def now_ms() -> int:
    return int(time.time() * 1000)


class ConsumerProtocol:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        config = coordinator.broker.config
        assignors = tuple(
            name.strip()
            for name in config.get("group.consumer.assignors").split(",")
            if name.strip()
        )
        self.config = ConsumerGroupConfig(
            assignors=assignors or ("uniform",),
            heartbeat_interval_ms=config.integer("group.consumer.heartbeat.interval.ms"),
            max_size=config.integer("group.consumer.max.size"),
        )
        self.session_timeout_ms = config.integer("group.consumer.session.timeout.ms")
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
        self.sessions: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.revocations: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.sessions_expired = 0

    # -- topics ----------------------------------------------------------------------------------

    def topic_counts(self) -> dict[str, int]:
        topics = self.coordinator.broker.topics.topics
        return {name: record.partitions for name, record in topics.items() if not record.internal}

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return {name: r.topic_id for name, r in self.coordinator.broker.topics.topics.items()}

    # -- heartbeat -------------------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        def refused(code: ErrorCode) -> HeartbeatResponse:
            return HeartbeatResponse(
                code, request.member_id, request.member_epoch, self.config.heartbeat_interval_ms
            )

        coordinator = self.coordinator
        if request.group_id and (gate := coordinator.gate(request.group_id)):
            return refused(gate)
        container = coordinator.groups.get(request.group_id)
        classic = container is not None and container.consumer is None
        outcome = heartbeat(
            container.consumer if container is not None else None,
            request,
            self.topic_counts(),
            self.config,
            now_ms(),
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
        container = self.coordinator.groups.get(group_id)
        if container is None or container.consumer is None:
            if container is not None and container.generation:
                log.info("group %s: empty classic group converted to the consumer protocol",
                         group_id)  # fmt: skip
            container = self.coordinator.groups.setdefault(group_id, Group(group_id))
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
        return self._append(group_id, outcome.records)

    def _append(self, group_id: str, records: tuple[ConsumerRecord, ...]) -> asyncio.Future[None]:
        ids = self.topic_ids()
        encoded = [consumer_records.encode(r, ids) for r in records]
        if not encoded:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self.coordinator._append(group_id, encoded)

    # -- timers ----------------------------------------------------------------------------------

    def _touch(self, container: Group, member_id: str) -> None:
        key = (container.group_id, member_id)
        timer = self.sessions.pop(key, None)
        if timer is not None:
            timer.cancel()
        self.sessions[key] = asyncio.get_running_loop().call_later(
            self.session_timeout_ms / 1000, self._session_expired, container, member_id
        )

    def _arm_revocation(self, container: Group, member_id: str) -> None:
        key = (container.group_id, member_id)
        timer = self.revocations.pop(key, None)
        if timer is not None:
            timer.cancel()
        group = container.consumer
        member = group.members.get(member_id) if group is not None else None
        if member is None or member.state != MemberState.UNREVOKED_PARTITIONS:
            return
        delay = max(member.revocation_deadline_ms - now_ms(), 0) / 1000
        self.revocations[key] = asyncio.get_running_loop().call_later(
            delay, self._revocation_expired, container, member_id
        )

    def _cancel(self, group_id: str, member_id: str) -> None:
        for timers in (self.sessions, self.revocations):
            timer = timers.pop((group_id, member_id), None)
            if timer is not None:
                timer.cancel()

    def _current(self, container: Group) -> ConsumerGroup | None:
        if self.coordinator.groups.get(container.group_id) is not container:
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
        outcome = expire_revocation(group, member_id, self.topic_counts(), self.config, now_ms())
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

    # -- load / unload ---------------------------------------------------------------------------

    def replay(self, container: Group, key: bytes, value: bytes | None) -> None:
        names = {r.topic_id: name for name, r in self.coordinator.broker.topics.topics.items()}
        record = consumer_records.decode(key, value, names)
        container.consumer = replay(container.consumer, record)
        container.protocol_type = CONSUMER_PROTOCOL_TYPE

    def loaded(self, container: Group) -> None:
        """A restored group's members get a session to come back in."""
        if container.consumer is None:
            return
        for member_id in container.consumer.members:
            self._touch(container, member_id)

    def unloaded(self, container: Group) -> None:
        if container.consumer is None:
            return
        for member_id in container.consumer.members:
            self._cancel(container.group_id, member_id)


def _log_failure(durable: asyncio.Future[None]) -> None:
    if not durable.cancelled() and durable.exception() is not None:
        log.error("consumer group records not written: %s", durable.exception())
