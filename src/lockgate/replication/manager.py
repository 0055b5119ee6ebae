# Cluster mode: this broker's part in every partition it holds a replica of. It follows the
# metadata store's view (never decides leadership itself): a partition whose state names this
# broker leader, while its registration is live, is led here in that leader epoch; any other
# replica follows its leader through a ReplicaFetcher. As a leader it tracks its followers
# (replication/leader.py), moves the high watermark to the ISR's minimum, answers acks=all
# writes once the high watermark passes them, and changes the ISR by compare-and-swap in the
# store (Kafka's AlterPartition, written directly: the revision it read is the fence).
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from lockgate.cluster.controller import with_isr
from lockgate.cluster.metadata import NO_LEADER, Change, MetadataStore, PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.replication.fetcher import FetchSettings, ReplicaFetcher, TieredHistory
from lockgate.replication.group_commit import GroupCommit
from lockgate.replication.leader import LeaderReplication, acks_all_answer, check_before_append
from lockgate.replication.selector import ReplicaSelector, ReplicaView
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

Key = tuple[str, int]
# (topic, partition, leader epoch) when this broker starts leading it, epoch None when it stops
LeadershipListener = Callable[[str, int, int | None], None]


NO_PREFERENCE = -1  # Fetch's preferred_read_replica when the consumer stays where it is


def _ignore(_end: int) -> None:
    """A follower's flush does not move its high watermark: its leader's does."""


@dataclass(slots=True)
class LeaderTerm:
    state: PartitionState
    revision: int
    replication: LeaderReplication
    # acks=all writes waiting for the high watermark: (required offset, future of the answer)
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    isr_change: asyncio.Task[None] | None = None


class NoFollowers:
    """A single node's side of follower fetches: it has no followers, so a fetch that names a
    replica is a consumer's."""

    def is_follower(self, replica_id: int) -> bool:
        return False

    def on_follower_fetch(
        self, partition: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        return None

    def preferred_read_replica(
        self, partition: Partition, client_rack: str | None, listener: str, fetch_offset: int
    ) -> int:
        return NO_PREFERENCE  # the only replica


NO_FOLLOWERS = NoFollowers()


class ReplicaManager:
    def __init__(
        self,
        store: MetadataStore,
        topics: TopicManager,
        node_id: int,
        group_commit: GroupCommit,
        fetching: FetchSettings,
        lag_max_ms: int,
        isr_changed: Callable[[int], None],
        clock: Callable[[], int],
        selector: ReplicaSelector | None = None,
        tiered: TieredHistory | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.node_id = node_id
        self.group_commit = group_commit  # the followers' appends are flushed by it
        self.fetching = fetching
        self.lag_max_ms = lag_max_ms  # replica.lag.time.max.ms
        self.isr_changed = isr_changed  # an ISR change written: its size's delta (metrics)
        self.clock = clock
        # replica.selector.class (KIP-392): None, every consumer reads from the leader
        self.selector = selector
        # tiered storage (None: off here): followers below their leader's local log start
        # start there with the history the object store holds
        self.tiered = tiered
        self.leaders: dict[Key, LeaderTerm] = {}
        self.following: dict[Key, tuple[int, int]] = {}  # → (leader, leader epoch)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.leadership_listeners: list[LeadershipListener] = []
        self._scheduled = False
        self._lag_task: asyncio.Task[None] | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.store.view.listeners.append(self._on_change)
        self.store.lease_listeners.append(self._on_lease)
        self.reconcile()
        self._lag_task = asyncio.create_task(self._shrink_loop(), name="isr-shrink")

    async def stop(self) -> None:
        """Stops leading and fetching (the broker is about to leave the cluster)."""
        with contextlib.suppress(ValueError):
            self.store.view.listeners.remove(self._on_change)
            self.store.lease_listeners.remove(self._on_lease)
        if self._lag_task is not None:
            self._lag_task.cancel()
        for key in list(self.leaders):
            self._resign(key, ErrorCode.not_leader_or_follower)
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        self.following.clear()

    def _on_change(self, change: Change) -> None:
        # a transaction's events (a topic and its partitions) arrive one by one: act after all
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._reconcile_scheduled)

    def _reconcile_scheduled(self) -> None:
        self._scheduled = False
        self.reconcile()

    def _on_lease(self, live: bool) -> None:
        self.reconcile()  # lost: every partition led here is fenced at once

    # -- following the view ---------------------------------------------------------------------

    def reconcile(self) -> None:
        """Brings every local replica to the role the view gives it. Idempotent."""
        view = self.store.view
        topics = self.topics
        for topic in view.topics.values():
            topics.apply_record(topic.value)
        for name, record in list(topics.topics.items()):
            if name not in view.topics:
                self._drop_topic(name)
                topics.forget(record)
                log.info("topic %s deleted: its replicas here are removed", name)
        live = self.store.live
        for key, versioned in list(view.partitions.items()):
            state = versioned.value
            if self.node_id not in state.replicas or key[0] not in topics.topics:
                continue
            try:
                partition = topics.open_replica(*key)
            except OSError as exc:
                log.error("%s-%d: cannot open the replica's log: %s", *key, exc)
                continue
            if state.leader == self.node_id and live:
                self._lead(key, partition, state, versioned.revision)
            else:
                self._follow(key, partition, state)

    def _drop_topic(self, name: str) -> None:
        for key in [k for k in self.leaders if k[0] == name]:
            self._resign(key, ErrorCode.unknown_topic_or_partition)
        for key in [k for k in self.following if k[0] == name]:
            self._unfollow(key)

    def _lead(self, key: Key, partition: Partition, state: PartitionState, revision: int) -> None:
        term = self.leaders.get(key)
        if term is not None and term.state.leader_epoch == state.leader_epoch:
            term.state, term.revision = state, revision
            term.replication.set_isr(state.isr)
            self._update_high_watermark(partition, term)
            return
        if term is not None:  # led again in a later epoch: the earlier term's waits end
            self._resign(key, ErrorCode.not_leader_or_follower)
        self._unfollow(key)
        if state.leader_epoch > partition.epochs.latest_epoch:
            partition.epochs.begin_epoch(state.leader_epoch, partition.log_end_offset)
        partition.leader_epoch = state.leader_epoch
        replication = LeaderReplication(
            self.node_id,
            state.replicas,
            state.isr,
            partition.log_end_offset,
            partition.high_watermark,
            self.clock(),
        )
        self.leaders[key] = term = LeaderTerm(state, revision, replication)
        partition.on_flushed = lambda _end: self._update_high_watermark(partition, term)
        partition.is_leader = True
        log.info("%s-%d: leading in epoch %d from offset %d (isr %s)", *key,
                 state.leader_epoch, partition.log_end_offset, list(state.isr))  # fmt: skip
        self._update_high_watermark(partition, term)
        for listener in self.leadership_listeners:
            listener(*key, state.leader_epoch)

    def _follow(self, key: Key, partition: Partition, state: PartitionState) -> None:
        if key in self.leaders:
            self._resign(key, ErrorCode.not_leader_or_follower)
        partition.is_leader = False
        partition.on_flushed = _ignore
        partition.leader_epoch = state.leader_epoch
        wanted = (state.leader, state.leader_epoch)
        if self.following.get(key) == wanted:
            return
        self._unfollow(key)
        if state.leader in (NO_LEADER, self.node_id):
            return  # offline, or our own term while our registration is lost: wait
        self.following[key] = wanted
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            fetcher = self.fetchers[state.leader] = ReplicaFetcher(
                self.store, state.leader, self.node_id, self.group_commit, self.fetching,
                self.clock, self.tiered,
            )  # fmt: skip
        fetcher.add(partition, state.leader_epoch)
        log.info("%s-%d: following broker %d in epoch %d from offset %d", *key, state.leader,
                 state.leader_epoch, partition.log_end_offset)  # fmt: skip

    def _unfollow(self, key: Key) -> None:
        followed = self.following.pop(key, None)
        if followed is not None:
            fetcher = self.fetchers.get(followed[0])
            if fetcher is not None:
                fetcher.remove(key)

    def _resign(self, key: Key, answer: ErrorCode) -> None:
        term = self.leaders.pop(key)
        partition = self.topics.get(*key)
        if partition is not None:
            partition.is_leader = False
            partition.on_flushed = _ignore
        for _required, waiter in term.waiters:
            if not waiter.done():
                waiter.set_exception(KafkaProtocolError(answer, f"{key[0]}-{key[1]} moved"))
        if term.isr_change is not None:
            term.isr_change.cancel()
        log.info("%s-%d: no longer leading epoch %d", *key, term.state.leader_epoch)
        for listener in self.leadership_listeners:
            listener(*key, None)

    # -- the leader's side ----------------------------------------------------------------------

    def _update_high_watermark(self, partition: Partition, term: LeaderTerm) -> None:
        """The ISR's minimum (the leader counts with what it flushed); answers the acks=all
        writes it passes."""
        if term.replication.update_high_watermark(partition.flushed_offset):
            partition.advance_high_watermark(term.replication.high_watermark)
        if not term.waiters:
            return
        isr_size = len(term.replication.isr)
        minimum = partition.config.min_insync_replicas
        waiting = []
        for required, waiter in term.waiters:
            answer = acks_all_answer(required, partition.high_watermark, isr_size, minimum)
            if waiter.done():
                continue
            if answer is None:
                waiting.append((required, waiter))
            else:
                waiter.set_result(answer)
        term.waiters = waiting

    def check_append(self, partition: Partition, acks: int) -> None:
        """Before a produce is appended: acks=all needs min.insync.replicas in the ISR."""
        term = self.leaders.get((partition.topic, partition.index))
        if term is None or not self.store.live:
            # the lease's own deadline, not the timer that fences at it: a leader frozen
            # past it (SIGSTOP) must refuse the first request it reads when it wakes
            raise KafkaProtocolError(ErrorCode.not_leader_or_follower)
        minimum = partition.config.min_insync_replicas
        error = check_before_append(acks, len(term.replication.isr), minimum)
        if error:
            raise KafkaProtocolError(
                error, f"isr {sorted(term.replication.isr)} is below min.insync.replicas {minimum}"
            )

    def acknowledged(self, partition: Partition, required: int) -> asyncio.Future[ErrorCode]:
        """Resolves once the high watermark reaches `required` (an acks=all write's end)."""
        waiter: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        term = self.leaders.get((partition.topic, partition.index))
        if term is None:
            waiter.set_exception(KafkaProtocolError(ErrorCode.not_leader_or_follower))
            return waiter
        term.waiters.append((required, waiter))
        self._update_high_watermark(partition, term)
        return waiter

    async def replicated(self, partition: Partition, end: int, timeout_s: float) -> None:
        """A coordinator's acks=all write: returns once the records below `end` are in the
        ISR's logs; raises KafkaProtocolError otherwise (the leadership lost, the ISR below
        min.insync.replicas, REQUEST_TIMED_OUT)."""
        try:
            answer = await asyncio.wait_for(self.acknowledged(partition, end), timeout_s)
        except TimeoutError:
            raise KafkaProtocolError(ErrorCode.request_timed_out) from None
        if answer:
            raise KafkaProtocolError(answer)

    def is_follower(self, replica_id: int) -> bool:
        """Whether a Fetch naming `replica_id` is a follower's (a consumer names -1)."""
        return replica_id >= 0

    def on_follower_fetch(
        self, partition: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower's Fetch: it has everything below `fetch_offset` (from
        `log_start_offset` on)."""
        key = (partition.topic, partition.index)
        term = self.leaders.get(key)
        if term is None:
            return
        replication = term.replication
        replication.on_fetch(
            replica, fetch_offset, partition.log_end_offset, self.clock(), log_start_offset
        )
        self._update_high_watermark(partition, term)
        joining = replication.caught_up(set(self.store.view.brokers))
        if joining:
            self._change_isr(key, term, replication.isr | joining)

    def preferred_read_replica(
        self, partition: Partition, client_rack: str | None, listener: str, fetch_offset: int
    ) -> int:
        """KIP-392 on the leader: the broker the consumer in `client_rack` (reaching brokers on
        `listener`) should read `fetch_offset` from, as replica.selector.class chooses among
        the followers that may serve it and this leader; NO_PREFERENCE for the leader itself,
        without a selector, or where this broker does not lead the partition."""
        if self.selector is None:  # (first: on every consumer fetch of every partition)
            return NO_PREFERENCE
        term = self.leaders.get((partition.topic, partition.index))
        if term is None:
            return NO_PREFERENCE
        brokers = self.store.view.brokers
        now = self.clock()
        mine = brokers.get(self.node_id)
        leader = ReplicaView(
            self.node_id, mine.rack if mine is not None else None, partition.log_end_offset, 0
        )
        replicas = [leader]
        for replica in term.replication.may_serve(fetch_offset):
            registration = brokers.get(replica)
            if registration is None or registration.on_listener(listener) is None:
                continue  # the consumer could not reach it
            state = term.replication.followers[replica]
            replicas.append(ReplicaView(replica, registration.rack, state.log_end_offset,
                                        now - state.last_caught_up_ms))  # fmt: skip
        chosen = self.selector.select(client_rack, leader, replicas)
        if chosen is None or chosen.node_id == self.node_id:
            return NO_PREFERENCE
        return chosen.node_id

    def under_replicated(self) -> tuple[int, int]:
        """Partitions led here whose ISR is smaller than their replica set, and those whose ISR
        is smaller than min.insync.replicas (the health gauges of the metrics)."""
        under = under_min = 0
        for (topic, index), term in self.leaders.items():
            isr = len(term.replication.isr)
            if isr < len(term.state.replicas):
                under += 1
            partition = self.topics.get(topic, index)
            if partition is not None and isr < partition.config.min_insync_replicas:
                under_min += 1
        return under, under_min

    async def _shrink_loop(self) -> None:
        lag_max = self.lag_max_ms
        while True:
            await asyncio.sleep(max(lag_max / 2000, 0.1))
            now = self.clock()
            for key, term in list(self.leaders.items()):
                lagging = term.replication.lagging(now, lag_max)
                if lagging:
                    log.warning("%s-%d: followers %s are more than %d ms behind: leaving the isr",
                                *key, sorted(lagging), lag_max)  # fmt: skip
                    self._change_isr(key, term, term.replication.isr - lagging)

    def _change_isr(self, key: Key, term: LeaderTerm, isr: frozenset[int]) -> None:
        if term.isr_change is not None or not self.store.live:
            return  # one change at a time; the next fetch or check proposes again
        wanted = with_isr(term.state, sorted(isr))
        term.isr_change = asyncio.create_task(self._write_isr(key, term, wanted))

    async def _write_isr(self, key: Key, term: LeaderTerm, wanted: PartitionState) -> None:
        before = len(term.state.isr)  # (the view may change it while this waits)
        try:
            written = await self.store.compare_and_set(key[0], key[1], wanted, term.revision)
        except Exception as exc:  # etcd away: the next fetch or check proposes it again
            log.warning("%s-%d: isr change to %s not written: %s", *key, list(wanted.isr), exc)
            written = None
        finally:
            term.isr_change = None
        if written is None:
            return  # another writer was first: the view's change decides what comes next
        log.info("%s-%d: isr is now %s", *key, list(wanted.isr))
        self.isr_changed(len(wanted.isr) - before)
        self.reconcile()
