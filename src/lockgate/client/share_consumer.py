# client/share_consumer.py — the asyncio share consumer (KIP-932, Kafka's KafkaShareConsumer):
# membership of a share group by ShareGroupHeartbeat (share_member.py), ShareFetch to each
# assigned partition's leader inside a share session per broker (share_session.py),
# acknowledgements piggy-backed on the next ShareFetch to the broker that delivered the record,
# or sent by commit() / close() with ShareAcknowledge.
#
# Invariants:
# - Records are the consumer's only inside the ranges the broker says it acquired
#   (share_records.py); each carries its delivery count.
# - Implicit mode (the default, Kafka's share.acknowledgement.mode=implicit): every record a
#   poll returned is ACCEPTed by the next poll, commit() or close(). Explicit mode: the caller
#   acknowledges each record (ACCEPT, RELEASE, REJECT; RENEW keeps it and restarts its lock)
#   before the next poll, which raises otherwise; close() leaves unacknowledged records to the
#   broker, which releases them when the session closes.
# - A record is finally acknowledged once: a second final acknowledgement raises.
# - Acknowledgements go to the broker that delivered the record, in the share session they
#   were acquired under or a later one of the same member (the partition leader checks the
#   member, not the session). Acknowledgements never go with a request that opens a session.
# - Session errors (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
#   SHARE_SESSION_LIMIT_REACHED) reset the session to epoch 0 and the acknowledgements it
#   carried are kept for the next request (the broker applied none of them); a broken
#   connection resets it too, and its acknowledgements are reported failed (their outcome is
#   unknown, and the broker released the session's records when the connection closed).
# - close(): ShareAcknowledge with the final epoch -1 to every broker with a session (with the
#   acknowledgements still owed, or none), then the group is left (heartbeat epoch -1), the
#   order Kafka's client follows.
from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import Cluster, ClusterClient, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID
from lockgate.client.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    UnsupportedVersionError,
    error_for,
)
from lockgate.client.security import ClientSecurity
from lockgate.client.share_member import ShareGroupsUnsupportedError, ShareMember
from lockgate.client.share_records import AcquiredRange, ShareRecord, decode_acquired
from lockgate.client.share_session import (
    FINAL_EPOCH,
    AcknowledgeType,
    FetchPlan,
    ShareSession,
    TopicIdPartition,
    ack_batches,
    acknowledge_wire,
)

log = logging.getLogger(__name__)

SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
FIRST_SHARE_VERSION = 1  # v0 (4.0's early access) is gone from Kafka 4.1 on
FIRST_RENEW_VERSION = 2  # IsRenewAck and AcknowledgeType RENEW (KIP-1222)
SESSION_ERRORS = frozenset(
    {
        ErrorCode.share_session_not_found,
        ErrorCode.invalid_share_session_epoch,
        ErrorCode.share_session_limit_reached,
    }
)
# Per-partition errors the caller must hear about; the rest are retried after new metadata.
PARTITION_FATAL = frozenset(
    {ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed}
)

# (partition, offsets, None or the error) for each acknowledgement the broker answered.
AcknowledgementCallback = Callable[[TopicPartition, frozenset[int], KafkaError | None], None]


class AcknowledgementMode(enum.Enum):
    IMPLICIT = "implicit"
    EXPLICIT = "explicit"


class AcquireMode(enum.IntEnum):
    BATCH_OPTIMIZED = 0  # whole log batches: a poll may return more than max_poll_records
    RECORD_LIMIT = 1  # never more than max_poll_records (ShareFetch v2)


@dataclass(slots=True)
class _Held:
    """A delivered record not finally acknowledged yet."""

    node: int
    tip: TopicIdPartition
    renewed: bool = False


# Pending acknowledgements: node → partition → offset → type.
_Pending = dict[int, dict[TopicIdPartition, dict[int, AcknowledgeType]]]


class ShareConsumer(ClusterClient):
    """`async with ShareConsumer("host:port", group_id="g") as consumer:
    consumer.subscribe(["topic"]); records = await consumer.poll(1000)`."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        group_id: str,
        cluster: Cluster | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        acknowledgement_mode: AcknowledgementMode | str = AcknowledgementMode.IMPLICIT,
        acquire_mode: AcquireMode | str = AcquireMode.BATCH_OPTIMIZED,
        max_poll_records: int = 500,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        security: ClientSecurity | None = None,
        client_rack: str | None = None,
        acknowledgement_callback: AcknowledgementCallback | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("a share consumer needs a group_id")
        super().__init__(
            bootstrap_servers, cluster, client_id, security, request_timeout_ms, retry_backoff_ms
        )
        self.group_id = group_id
        self.acknowledgement_mode = AcknowledgementMode(acknowledgement_mode)
        self.acquire_mode = (
            AcquireMode[acquire_mode.upper()] if isinstance(acquire_mode, str) else acquire_mode
        )
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.check_crcs = check_crcs
        self.retry_backoff = retry_backoff_ms / 1000
        self.acknowledgement_callback = acknowledgement_callback
        # the lock duration the brokers last told (AcquisitionLockTimeoutMs), None before
        self.acquisition_lock_timeout_ms: int | None = None
        self._member = ShareMember(self.cluster, group_id, rack_id=client_rack)
        self._subscribed: tuple[str, ...] = ()
        self._sessions: dict[int, ShareSession] = {}
        self._node_locks: dict[int, asyncio.Lock] = {}
        self._held: dict[tuple[TopicPartition, int], _Held] = {}
        self._pending: _Pending = {}
        self._failure: KafkaError | None = None
        self._closed = False

    @property
    def member_id(self) -> str:
        return self._member.member_id

    # ------------------------------------------------------------------------------------------
    # Subscription

    def subscribe(self, topics: Iterable[str]) -> None:
        """Joins the share group for these topics (the heartbeat goes out at once)."""
        names = tuple(sorted(set(topics)))
        if not names:
            raise ValueError("subscribe() needs topics; unsubscribe() leaves the group")
        self._check_open()
        self._subscribed = names
        self._member.subscribe(names)

    def subscription(self) -> list[str]:
        return list(self._subscribed)

    def assignment(self) -> list[TopicPartition]:
        return self._member.assigned_partitions()

    async def unsubscribe(self) -> None:
        """Acknowledges what implicit mode owes, then leaves the group."""
        if not self._subscribed:
            return
        await self.commit()
        await self._member.leave()
        self._subscribed = ()

    # ------------------------------------------------------------------------------------------
    # Acknowledging

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Explicit mode: says what becomes of a record the last poll returned. It goes out
        with the next poll or commit()."""
        self.acknowledge_offset(record.topic, record.partition, record.offset, type)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType = AcknowledgeType.ACCEPT,
    ) -> None:
        if self.acknowledgement_mode is not AcknowledgementMode.EXPLICIT:
            raise ValueError("acknowledge() needs acknowledgement_mode='explicit'")
        type = AcknowledgeType(type)
        if type is AcknowledgeType.GAP:
            raise ValueError("GAP is the client's own acknowledgement, not the caller's")
        key = (TopicPartition(topic, partition), offset)
        held = self._held.get(key)
        if held is None:
            raise ValueError(f"{key[0]} offset {offset} is not a record this consumer holds")
        self._queue(held.node, held.tip, offset, type)
        if type is AcknowledgeType.RENEW:
            held.renewed = True
        else:
            del self._held[key]

    def _queue(self, node: int, tip: TopicIdPartition, offset: int, kind: AcknowledgeType) -> None:
        self._pending.setdefault(node, {}).setdefault(tip, {})[offset] = kind

    def _accept_held(self) -> None:
        """Implicit mode: everything handed out is accepted."""
        for (_tp, offset), held in self._held.items():
            self._queue(held.node, held.tip, offset, AcknowledgeType.ACCEPT)
        self._held.clear()

    def _take_pending(self, node: int) -> dict[TopicIdPartition, dict[int, AcknowledgeType]]:
        return self._pending.pop(node, {})

    def _put_back(
        self, node: int, acks: Mapping[TopicIdPartition, Mapping[int, AcknowledgeType]]
    ) -> None:
        mine = self._pending.setdefault(node, {})
        for tip, offsets in acks.items():
            for offset, kind in offsets.items():
                mine.setdefault(tip, {}).setdefault(offset, kind)

    def _report(
        self,
        acks: Mapping[TopicIdPartition, Mapping[int, AcknowledgeType]],
        errors: Mapping[TopicIdPartition, KafkaError | None],
        results: dict[TopicPartition, KafkaError | None] | None = None,
    ) -> None:
        for tip, offsets in acks.items():
            tp = self._name(tip)
            error = errors.get(tip)
            if error is not None:
                log.warning("share group %s: acknowledging %s failed: %s", self.group_id, tp, error)
            if results is not None and (results.get(tp) is None):
                results[tp] = error
            if self.acknowledgement_callback is not None:
                self.acknowledgement_callback(tp, frozenset(offsets), error)

    def _name(self, tip: TopicIdPartition) -> TopicPartition:
        return TopicPartition(
            self._member.names.get(tip.topic_id, str(tip.topic_id)), tip.partition
        )

    async def commit(self) -> dict[TopicPartition, KafkaError | None]:
        """Sends every pending acknowledgement now (ShareAcknowledge to each broker) and
        returns each partition's outcome: None, or the error the broker answered."""
        self._check_open()
        if self.acknowledgement_mode is AcknowledgementMode.IMPLICIT:
            self._accept_held()
        results: dict[TopicPartition, KafkaError | None] = {}
        await asyncio.gather(*(self._acknowledge(node, results) for node in list(self._pending)))
        return results

    async def _acknowledge(
        self,
        node: int,
        results: dict[TopicPartition, KafkaError | None],
        *,
        final: bool = False,
    ) -> None:
        async with self._node_lock(node):
            acks = self._take_pending(node)
            session = self._sessions.setdefault(node, ShareSession())
            epoch = FINAL_EPOCH if final and session.open else session.plan_acknowledge()
            if not acks and epoch != FINAL_EPOCH:
                return
            if epoch is None:
                error = KafkaError(f"no share session with broker {node}: acknowledgements lost")
                self._report(acks, dict.fromkeys(acks, error), results)
                return
            renew = any(AcknowledgeType.RENEW in offsets.values() for offsets in acks.values())
            batches = {tip: ack_batches(offsets) for tip, offsets in acks.items()}
            try:
                connection = await self.cluster.connection(node)
                version = connection.version_for(
                    SHARE_ACKNOWLEDGE,
                    min_version=FIRST_RENEW_VERSION if renew else FIRST_SHARE_VERSION,
                )
                answer = await connection.request(
                    SHARE_ACKNOWLEDGE,
                    {
                        "group_id": self.group_id,
                        "member_id": self.member_id,
                        "share_session_epoch": epoch,
                        "is_renew_ack": renew,
                        "topics": acknowledge_wire(batches),
                    },
                    version=version,
                )
            except UnsupportedVersionError:
                self._put_back(node, acks)
                raise
            except KafkaError as exc:
                session.reset()
                self._report(acks, dict.fromkeys(acks, exc), results)
                return
            self._note_lock_timeout(answer)
            code = ErrorCode(answer.error_code)
            if code != ErrorCode.none:
                error = error_for(code, answer.error_message, f"ShareAcknowledge to {node}")
                if code in SESSION_ERRORS:
                    session.reset()
                    if not final:
                        self._put_back(node, acks)  # none applied: next session carries them
                        return
                self._report(acks, dict.fromkeys(acks, error), results)
                if not error.retriable and code not in SESSION_ERRORS:
                    raise error
                return
            session.acknowledged(epoch)
            errors: dict[TopicIdPartition, KafkaError | None] = {}
            for topic in answer.responses:
                for part in topic.partitions:
                    tip = TopicIdPartition(topic.topic_id, int(part.partition_index))
                    errors[tip] = self._partition_error(
                        part.error_code, part.error_message, "ShareAcknowledge", tip
                    )
            self._report(acks, errors, results)

    def _partition_error(
        self, code: int, message: str | None, what: str, tip: TopicIdPartition
    ) -> KafkaError | None:
        if code == ErrorCode.none:
            return None
        error = error_for(code, message, f"{what} {self._name(tip)}")
        if error.retriable:
            self.cluster.invalidate(self._name(tip).topic)
        return error

    # ------------------------------------------------------------------------------------------
    # Polling

    async def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """Records acquired for this member, with their delivery counts; waits up to
        `timeout_ms` for some (the first poll waits for the group's assignment too)."""
        self._check_open()
        if self._member.fatal is not None:
            raise self._member.fatal
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if not self._subscribed:
            raise ValueError("poll() needs subscribe() first")
        if self.acknowledgement_mode is AcknowledgementMode.IMPLICIT:
            self._accept_held()
        elif any(not held.renewed for held in self._held.values()):
            raise ValueError(
                "explicit acknowledgement: every record of the last poll must be acknowledged "
                "before the next poll"
            )
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        renewing = bool(self._held)  # renewed records still in hand: no new ones meanwhile
        while True:
            records = await self._round(deadline, fetch=not renewing)
            if records or renewing or time.monotonic() >= deadline:
                return records
            if self._member.fatal is not None:
                raise self._member.fatal

    async def _round(self, deadline: float, *, fetch: bool) -> list[ShareRecord]:
        """One ShareFetch to every broker that leads an assigned partition or has
        acknowledgements pending (ShareAcknowledge to those with only acknowledgements)."""
        wanted: dict[int, set[TopicIdPartition]] = {}
        if fetch:
            if not self._member.assignment:
                await self._flush_acknowledgements()
                await self._member.wait_for_assignment(deadline)
            wanted = await self._leaders()
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        max_wait = min(self.fetch_max_wait_ms, remaining_ms)
        nodes = sorted(set(wanted) | set(self._pending))
        if not nodes:
            await asyncio.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))
            return []
        results = await asyncio.gather(
            *(self._exchange(node, wanted.get(node, set()), max_wait) for node in nodes),
            return_exceptions=True,
        )
        records: list[ShareRecord] = []
        failed = False
        for node, result in zip(nodes, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, KafkaError) and result.retriable:
                    failed = True
                    self._leaders_lost(wanted.get(node, set()))
                    continue
                raise result
            records.extend(result)
        if failed and not records:
            await asyncio.sleep(self.retry_backoff)
        return records

    def _leaders_lost(self, partitions: Iterable[TopicIdPartition]) -> None:
        """A broker that failed (unreachable, timed out) may no longer lead these partitions:
        their topics' metadata is asked again before the next fetch, else a killed leader
        would be fetched from for as long as it stays down."""
        for tip in partitions:
            name = self._member.names.get(tip.topic_id)
            if name is not None:
                self.cluster.invalidate(name)

    async def _flush_acknowledgements(self) -> None:
        await asyncio.gather(*(self._acknowledge(node, {}) for node in list(self._pending)))

    async def _leaders(self) -> dict[int, set[TopicIdPartition]]:
        by_node: dict[int, set[TopicIdPartition]] = {}
        for tip in self._member.assignment:
            name = self._member.names.get(tip.topic_id)
            if name is None:
                continue
            try:
                partition = await self.cluster.partition(TopicPartition(name, tip.partition))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                continue
            if partition.leader_id >= 0:
                by_node.setdefault(partition.leader_id, set()).add(tip)
        return by_node

    def _node_lock(self, node: int) -> asyncio.Lock:
        return self._node_locks.setdefault(node, asyncio.Lock())

    async def _exchange(
        self, node: int, wanted: set[TopicIdPartition], max_wait_ms: int
    ) -> list[ShareRecord]:
        pending = self._pending.get(node, {})
        renew = any(AcknowledgeType.RENEW in offsets.values() for offsets in pending.values())
        if renew or not wanted:
            # nothing to fetch there, or a renewal (which must not wait behind a long fetch):
            # the acknowledgements go alone
            await self._acknowledge(node, {})
        if not wanted:
            return []
        return await self._fetch(node, wanted, max_wait_ms)

    async def _fetch(
        self, node: int, wanted: set[TopicIdPartition], max_wait_ms: int
    ) -> list[ShareRecord]:
        async with self._node_lock(node):
            session = self._sessions.setdefault(node, ShareSession())
            acks = self._take_pending(node) if session.open else {}
            plan = session.plan_fetch(
                wanted, {tip: ack_batches(offsets) for tip, offsets in acks.items()}
            )
            topics, forgotten = plan.wire()
            try:
                connection = await self.cluster.connection(node)
                version = connection.version_for(SHARE_FETCH, min_version=FIRST_SHARE_VERSION)
                answer = await connection.request(
                    SHARE_FETCH,
                    {
                        "group_id": self.group_id,
                        "member_id": self.member_id,
                        "share_session_epoch": plan.epoch,
                        "max_wait": max_wait_ms,
                        "min_bytes": self.fetch_min_bytes,
                        "max_bytes": self.fetch_max_bytes,
                        "max_records": self.max_poll_records,
                        "batch_size": self.max_poll_records,
                        "share_acquire_mode": int(self.acquire_mode),
                        "is_renew_ack": False,
                        "topics": topics,
                        "forgotten_topics_data": forgotten,
                    },
                    version=version,
                    timeout_ms=self.cluster.request_timeout_ms + max_wait_ms,
                )
            except UnsupportedVersionError as exc:
                self._put_back(node, acks)
                raise ShareGroupsUnsupportedError(f"broker {node}: {exc}") from exc
            except KafkaError as exc:
                session.reset()
                self._report(acks, dict.fromkeys(acks, exc))
                raise
            self._note_lock_timeout(answer)
            code = ErrorCode(answer.error_code)
            if code != ErrorCode.none:
                error = error_for(code, answer.error_message, f"ShareFetch to {node}")
                if code in SESSION_ERRORS:
                    log.info("share group %s: broker %d: %s", self.group_id, node, error)
                    session.reset()
                    self._put_back(node, acks)
                    return []
                self._put_back(node, acks)
                raise error
            session.fetched(plan)
            return self._received(node, plan, acks, answer)

    def _received(
        self,
        node: int,
        plan: FetchPlan,
        acks: Mapping[TopicIdPartition, Mapping[int, AcknowledgeType]],
        answer: Any,
    ) -> list[ShareRecord]:
        records: list[ShareRecord] = []
        ack_errors: dict[TopicIdPartition, KafkaError | None] = {}
        for topic in answer.responses:
            name = self._member.names.get(topic.topic_id)
            for part in topic.partitions:
                tip = TopicIdPartition(topic.topic_id, int(part.partition_index))
                if tip in acks:
                    ack_errors[tip] = self._partition_error(
                        part.acknowledge_error_code,
                        part.acknowledge_error_message,
                        "acknowledgement",
                        tip,
                    )
                error = self._partition_error(
                    part.error_code, part.error_message, "ShareFetch", tip
                )
                if error is not None:
                    if part.error_code in PARTITION_FATAL and self._failure is None:
                        self._failure = error
                    elif not error.retriable:
                        log.warning("share group %s: %s", self.group_id, error)
                    continue
                if name is None or not part.acquired_records:
                    continue
                got = decode_acquired(
                    name,
                    tip.partition,
                    bytes(part.records or b""),
                    [
                        AcquiredRange(
                            int(r.first_offset), int(r.last_offset), int(r.delivery_count)
                        )
                        for r in part.acquired_records
                    ],
                    check_crcs=self.check_crcs,
                )
                for offset in got.gaps:
                    self._queue(node, tip, offset, AcknowledgeType.GAP)
                tp = TopicPartition(name, tip.partition)
                for record in got.records:
                    self._held[(tp, record.offset)] = _Held(node, tip)
                records.extend(got.records)
        self._report(acks, ack_errors)
        return records

    def _note_lock_timeout(self, answer: Any) -> None:
        timeout = getattr(answer, "acquisition_lock_timeout", None)
        if timeout is not None:
            ms = int(timeout.total_seconds() * 1000)
            if ms > 0:
                self.acquisition_lock_timeout_ms = ms

    # ------------------------------------------------------------------------------------------
    # Closing

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaConnectionError("the share consumer is closed")

    async def close(self) -> None:
        """Acknowledges what implicit mode owes, closes every share session (epoch -1: the
        broker releases what this member still holds), leaves the group, then closes the
        connections."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.acknowledgement_mode is AcknowledgementMode.IMPLICIT:
                self._accept_held()
            self._held.clear()
            nodes = {n for n, s in self._sessions.items() if s.open} | set(self._pending)
            await asyncio.gather(
                *(self._close_session(node) for node in nodes), return_exceptions=True
            )
            await self._member.leave()
        finally:
            await super().close()

    async def _close_session(self, node: int) -> None:
        """ShareAcknowledge with the final epoch (-1), with or without acknowledgements, as
        Kafka's client closes: the broker applies them, then drops the session and releases
        what this member still holds there."""
        session = self._sessions.get(node)
        if session is not None and session.open:
            await self._acknowledge(node, {}, final=True)
        elif self._pending.get(node):
            await self._acknowledge(node, {})  # no session: reported lost
