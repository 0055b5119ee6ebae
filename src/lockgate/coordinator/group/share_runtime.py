# Share groups (KIP-932) at run time, on the group coordinator: runs the pure state machine of
# share_group.py against the coordinator's groups, appends its records to __consumer_offsets
# (Kafka's layout, share_records.py) before answering, replays them at load, keeps one session
# timer per member, and after a heartbeat that marked share partitions initializing asks the
# persister to initialize them (state epoch = the group epoch), then records the outcome
# (initialized, or back out of initializing on any error, as Kafka 4.4).
#
# A group's own share.session.timeout.ms, share.heartbeat.interval.ms and
# share.assignment.interval.ms (ConfigResource GROUP) win over the broker's
# group.share.* values, read at each heartbeat.
#
# Invariants: a share group is a Group container whose `share` is set (its protocol type
# "share"; no classic members, no committed offsets); the in-memory state changes
# synchronously with the append of its records; the persister is called only after the
# records that mark the partitions initializing are durable.
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from lockgate.config.group_configs import broker_int, broker_value
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.coordinator import writes
from lockgate.coordinator.group import share_records
from lockgate.coordinator.group.classic_runtime import Append, append_any
from lockgate.coordinator.group.group import Group
from lockgate.coordinator.group.share_group import (
    InitializeRequest,
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResponse,
    ShareOutcome,
    ShareRecord,
    Topics,
    group_tombstones,
    heartbeat,
    initialized,
    remove_member,
    replay,
    uninitialized,
    without_topics,
)
from lockgate.coordinator.runtime import Deadline, Timers
from lockgate.coordinator.share.persister import Persister
from lockgate.protocol.errors import ErrorCode
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

SHARE_PROTOCOL_TYPE = "share"


class ShareSettings(Protocol):
    """A group's own share settings (its group configs), None where it has none."""

    def override_int(self, group: str, name: str) -> int | None: ...


class _NoShareSettings:
    def override_int(self, group: str, name: str) -> int | None:
        return None


class ShareProtocol:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicManager,
        groups: dict[str, Group],
        unavailable: Callable[[str], ErrorCode],
        append: Append,
        clock: Callable[[], int],
        timers: Timers,
        settings: ShareSettings | None = None,
    ) -> None:
        """`groups`: the coordinator's; `unavailable`: NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS for a group; `settings`: the groups' own configs.
        `persister` is set by the broker once its share coordinator exists (None: share
        partitions stay initializing)."""
        self.topics = topics
        self.groups = groups
        self._unavailable = unavailable
        self._append_records = append
        self._clock = clock
        self._timers = timers
        self._settings = settings or _NoShareSettings()
        self.persister: Persister | None = None
        self.config = ShareGroupConfig(
            heartbeat_interval_ms=broker_int(config, "group.share.heartbeat.interval.ms"),
            max_size=broker_int(config, "group.share.max.size"),
            assignment_interval_ms=broker_int(config, "group.share.assignment.interval.ms"),
            initialize_retry_interval_ms=broker_int(
                config, "group.share.initialize.retry.interval.ms"
            ),
        )
        self.session_timeout_ms = broker_int(config, "group.share.session.timeout.ms")
        assignors = [a.strip() for a in broker_value(config, "group.share.assignors").split(",")]
        if [a.rsplit(".", 1)[-1].lower() for a in assignors if a] not in (
            ["simple"],
            ["simpleassignor"],
        ):
            raise ConfigError("group.share.assignors: only the simple assignor is known")
        for name, value in (
            ("session.timeout.ms", self.session_timeout_ms),
            ("heartbeat.interval.ms", self.config.heartbeat_interval_ms),
        ):
            low = broker_int(config, f"group.share.min.{name}")
            high = broker_int(config, f"group.share.max.{name}")
            if not low <= value <= high:
                raise ConfigError(f"group.share.{name}={value} is not in [{low}, {high}]")
        if not 1 <= self.config.max_size <= 1000:
            raise ConfigError(f"group.share.max.size={self.config.max_size} is not in [1, 1000]")
        self.sessions: dict[tuple[str, str], Deadline] = {}
        self.sessions_expired = 0
        self._initializing: set[asyncio.Task[ErrorCode]] = set()

    # -- topics and settings ---------------------------------------------------------------------

    def topic_meta(self) -> Topics:
        return {
            name: (r.topic_id, r.partitions)
            for name, r in self.topics.topics.items()
            if not r.internal
        }

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return {name: r.topic_id for name, r in self.topics.topics.items()}

    def group_config(self, group_id: str) -> ShareGroupConfig:
        interval = self._settings.override_int(group_id, "share.heartbeat.interval.ms")
        assignment = self._settings.override_int(group_id, "share.assignment.interval.ms")
        if interval is None and assignment is None:
            return self.config
        return replace(
            self.config,
            heartbeat_interval_ms=(
                interval if interval is not None else self.config.heartbeat_interval_ms
            ),
            assignment_interval_ms=(
                assignment if assignment is not None else self.config.assignment_interval_ms
            ),
        )

    def session_timeout_for(self, group_id: str) -> int:
        timeout = self._settings.override_int(group_id, "share.session.timeout.ms")
        return self.session_timeout_ms if timeout is None else timeout

    # -- heartbeat -------------------------------------------------------------------------------

    async def heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatResponse:
        config = self.group_config(request.group_id)
        if request.group_id and (unavailable := self._unavailable(request.group_id)):
            return ShareHeartbeatResponse(unavailable, request.member_id, request.member_epoch, 0)
        container = self.groups.get(request.group_id)
        outcome = heartbeat(
            container.share if container is not None else None,
            request,
            self.topic_meta(),
            config,
            self._clock(),
            other_type_group=container is not None and container.share is None,
        )
        if outcome.response.error or outcome.group is None:
            if outcome.response.error == ErrorCode.invalid_request:
                log.info("group %s: ShareGroupHeartbeat refused: %s", request.group_id,
                         outcome.response.message)  # fmt: skip
            return outcome.response
        durable = self._apply(request.group_id, outcome)
        try:
            await durable
        except writes.WriteFailure as exc:
            code = writes.write_error(exc, ErrorCode.coordinator_not_available)
            return ShareHeartbeatResponse(code, request.member_id, request.member_epoch, 0)
        if outcome.initialize is not None:
            self._start_initialize(outcome.initialize)
        return outcome.response

    # -- for the share offsets admin APIs (share_offsets.py) ------------------------------------

    def unavailable(self, group_id: str) -> ErrorCode:
        return self._unavailable(group_id)

    def clock(self) -> int:
        return self._clock()

    def current(self, group_id: str) -> ShareGroup | None:
        container = self.groups.get(group_id)
        return container.share if container is not None else None

    def install(self, group: ShareGroup) -> Group:
        """Holds `group` as the coordinator's state of its id (a container made if new)."""
        container = self._container(group.group_id)
        container.share = group
        return container

    def append(self, group_id: str, records: tuple[ShareRecord, ...]) -> asyncio.Future[None]:
        return self._append(group_id, records)

    def _container(self, group_id: str) -> Group:
        container = self.groups.get(group_id)
        if container is None:
            container = self.groups[group_id] = Group(group_id)
            container.protocol_type = SHARE_PROTOCOL_TYPE
        return container

    def _apply(self, group_id: str, outcome: ShareOutcome) -> asyncio.Future[None]:
        """Installs the outcome's group, rearms its members' sessions and appends its records;
        returns their durability."""
        assert outcome.group is not None
        container = self._container(group_id)
        previous = container.share
        container.share = outcome.group
        for gone in set(previous.members if previous else ()) - set(outcome.group.members):
            self._cancel(group_id, gone)
        member_id = outcome.response.member_id
        if member_id in outcome.group.members:
            self._touch(container, member_id)
        if outcome.group.group_epoch != (previous.group_epoch if previous else 1):
            log.info("share group %s: epoch %d, %d members", group_id,
                     outcome.group.group_epoch, len(outcome.group.members))  # fmt: skip
        return self._append(group_id, outcome.records)

    def _append(self, group_id: str, records: tuple[ShareRecord, ...]) -> asyncio.Future[None]:
        ids = self.topic_ids()
        encoded = [share_records.encode(r, ids) for r in records]
        return append_any(self._append_records, group_id, encoded)

    # -- the initialize step ---------------------------------------------------------------------

    def _start_initialize(self, request: InitializeRequest) -> None:
        task = asyncio.get_running_loop().create_task(self.initialize(request))
        self._initializing.add(task)
        task.add_done_callback(self._initializing.discard)

    async def settled(self) -> None:
        """Waits for the initializations under way (each heartbeat starts its own)."""
        while self._initializing:
            await asyncio.gather(*self._initializing)

    async def initialize(self, request: InitializeRequest) -> ErrorCode:
        """Asks the persister to initialize the share partitions (after the heartbeat, as
        Kafka), then records them initialized, or, on any error, no longer initializing."""
        asked = {topic_id: parts for topic_id, (_n, parts, _o) in request.topics.items()}
        error = ErrorCode.none
        if self.persister is None:
            error = ErrorCode.coordinator_not_available
        else:
            calls = [
                self.persister.initialize(
                    request.group_id, topic_id, partition, request.state_epoch, start
                )
                for topic_id, (_name, parts, start) in sorted(request.topics.items())
                for partition in sorted(parts)
            ]
            try:
                results = await asyncio.gather(*calls)
            except Exception as exc:  # (a persister raises for no protocol error: a bug)
                log.exception("share group %s: initializing share partitions failed: %s",
                              request.group_id, exc)  # fmt: skip
                error = ErrorCode.unknown_server_error
            else:
                error = next((r.error for r in results if r.error), ErrorCode.none)
        container = self.groups.get(request.group_id)
        if container is None or container.share is None:
            return error  # deleted meanwhile
        if self._unavailable(request.group_id):
            return error  # moved or unloaded meanwhile: its next coordinator asks again
        now = self._clock()
        meta = self.topic_meta()
        if error:
            log.warning("share group %s: share partitions not initialized (%s): %s",
                        request.group_id, error.name, asked)  # fmt: skip
            group, records = uninitialized(container.share, asked, now)
        else:
            log.info("share group %s: share partitions initialized at state epoch %d: %s",
                     request.group_id, request.state_epoch, asked)  # fmt: skip
            group, records = initialized(container.share, asked, meta, now)
        container.share = group
        try:
            await self._append(request.group_id, tuple(records))
        except writes.WriteFailure as exc:
            log.error("share group %s: initialization not recorded: %s", request.group_id, exc)
            return writes.write_error(exc)
        return error

    # -- timers ----------------------------------------------------------------------------------

    def _touch(self, container: Group, member_id: str) -> None:
        key = (container.group_id, member_id)
        self._cancel(*key)
        timeout_ms = self.session_timeout_for(container.group_id)
        self.sessions[key] = Deadline(self._timers, self._clock, timeout_ms / 1000,
                                      self._session_expired, container, member_id)  # fmt: skip

    def _cancel(self, group_id: str, member_id: str) -> None:
        timer = self.sessions.pop((group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    def _session_expired(self, container: Group, member_id: str) -> None:
        self.sessions.pop((container.group_id, member_id), None)
        if self.groups.get(container.group_id) is not container or container.share is None:
            return
        if member_id not in container.share.members:
            return
        log.info("share group %s: session of %s expired", container.group_id, member_id)
        self.sessions_expired += 1
        outcome = remove_member(container.share, member_id, self.topic_meta())
        self._apply(container.group_id, outcome).add_done_callback(_log_failure)

    # -- describing and deleting -----------------------------------------------------------------

    async def delete(self, container: Group) -> ErrorCode:
        """DeleteGroups of a share group: Empty only; its share partitions' state is deleted
        first (any failure keeps the group), then its records."""
        group = container.share
        assert group is not None
        if group.members:
            return ErrorCode.non_empty_group
        held = group.share_partitions()
        if held:
            if self.persister is None:
                return ErrorCode.coordinator_not_available
            results = await asyncio.gather(
                *(
                    self.persister.delete(group.group_id, topic_id, partition)
                    for topic_id, parts in sorted(held.items())
                    for partition in sorted(parts)
                )
            )
            failed = next((r.error for r in results if r.error), ErrorCode.none)
            if failed:
                log.warning("share group %s: share state not deleted: %s", group.group_id,
                            failed.name)  # fmt: skip
                return failed
        if self.groups.get(group.group_id) is not container or container.share is None:
            return ErrorCode.group_id_not_found
        if container.share.members:  # (a member joined while the state was deleted)
            return ErrorCode.non_empty_group
        records = tuple(group_tombstones(container.share))
        del self.groups[group.group_id]
        try:
            await self._append(group.group_id, records)
        except writes.WriteFailure as exc:
            return writes.write_error(exc, ErrorCode.kafka_storage_error)
        return ErrorCode.none

    def topic_deleted(self, topic_id: uuid.UUID) -> int:
        """A topic is gone: the share groups coordinated here (served: loaded, not moving)
        whose record 15 names it get it again without (without_topics); memory and the log
        change together, nobody awaits the durability (a failure is logged, as Kafka logs
        it). How many groups changed."""
        changed = 0
        now = self._clock()
        for group_id, container in list(self.groups.items()):
            if container.share is None or self._unavailable(group_id):
                continue
            group, records = without_topics(container.share, (topic_id,), now)
            if not records:
                continue
            container.share = group
            self._append(group_id, tuple(records)).add_done_callback(_log_failure)
            changed += 1
        if changed:
            log.info("deleted topic %s: left the share state of %d share groups", topic_id,
                     changed)  # fmt: skip
        return changed

    # -- load / unload ---------------------------------------------------------------------------

    def replay(self, container: Group, key: bytes, value: bytes | None) -> None:
        names = {r.topic_id: name for name, r in self.topics.topics.items()}
        record = share_records.decode(key, value, names)
        container.share = replay(container.share, record)
        container.protocol_type = SHARE_PROTOCOL_TYPE

    def loaded(self, container: Group) -> None:
        """A restored group's members get a session to come back in."""
        if container.share is None:
            return
        for member_id in container.share.members:
            self._touch(container, member_id)

    def unloaded(self, container: Group) -> None:
        if container.share is None:
            return
        for member_id in container.share.members:
            self._cancel(container.group_id, member_id)


def _log_failure(durable: asyncio.Future[None]) -> None:
    if not durable.cancelled() and durable.exception() is not None:
        log.error("share group records not written: %s", durable.exception())
