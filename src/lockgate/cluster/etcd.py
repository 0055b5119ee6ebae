# The etcd engine of the metadata store (etcd3aio over gRPC; every etcd member is an endpoint,
# so losing one is a reconnect, not an outage). Keys under /lockgate/<namespace>/:
#   cluster_id                  created once, by whichever broker comes first
#   brokers/<node id>           a BrokerRegistration, under that broker's lease
#   controller                  {"node_id"} under the controller's lease; its create revision
#                               is the controller epoch (it grows with every election)
#   topics/<name>               a TopicRecord
#   partitions/<name>/<index>   a PartitionState, changed only by compare-and-swap on the
#                               key's mod revision
# One watch over the prefix mirrors every change into the view, in revision order, from the
# revision of the first read on; it resumes from the last revision applied (a compacted
# history means a full re-read). Writes return once the view has them.
#
# The lease is kept alive by our own loop, because the broker must know, without hearing
# from etcd, when its lease may have expired: the deadline is the send time of the last
# answered keep-alive plus the TTL, which is never later than etcd's own expiry. Past it the
# store is not `live` and the broker must stop acting as leader or controller; the loop then
# registers again under a new lease as soon as etcd answers.
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from etcd3aio import Etcd3Client, EtcdError, prefix_range_end
from etcd3aio._protobuf import Compare  # the generated message: mod-revision compares need it

from lockgate.cluster.metadata import (
    BrokerRegistration,
    Controller,
    MetadataView,
    PartitionState,
    TopicRecord,
    Versioned,
)
from lockgate.storage.documents import DEFAULT_NAMESPACE, parse_cluster_url

log = logging.getLogger(__name__)

PUT, DELETE = 0, 1  # mvccpb.Event.EventType
RPC_TIMEOUT = 5.0


class DuplicateBrokerError(Exception):
    """Another live broker is registered under this node id."""


class EtcdMetadataStore:
    def __init__(
        self,
        endpoints: Sequence[str],
        namespace: str = DEFAULT_NAMESPACE,
        *,
        session_timeout_ms: int = 9_000,
        heartbeat_interval_ms: int = 2_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = MetadataView()
        self.endpoints = list(endpoints)
        self.prefix = f"/lockgate/{namespace}/".encode()
        # etcd counts lease TTLs in whole seconds
        self.ttl = max(1, math.ceil(session_timeout_ms / 1000))
        # at least three keep-alives per TTL, as Kafka wants its heartbeat well inside the
        # session timeout
        self.heartbeat_interval = min(heartbeat_interval_ms / 1000, self.ttl / 3)
        self.clock = clock
        # called with True when this broker (re)gains a live registration, False when lost
        self.lease_listeners: list[Callable[[bool], None]] = []
        # a watch cut off retries no slower than the keep-alive: a broker back from an outage
        # goes live only once its view has caught up
        self._client = Etcd3Client(
            self.endpoints,
            rpc_max_attempts=3,
            watch_max_reconnect_backoff_seconds=max(0.25, self.heartbeat_interval),
        )
        self._cluster_id = ""
        self._lease_id = 0
        self._registered_at = 0  # the revision of the current registration
        self._lease_deadline = 0.0
        self._live = False
        self._registration: BrokerRegistration | None = None
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> EtcdMetadataStore:
        endpoints, namespace = parse_cluster_url(url)
        return cls(endpoints, namespace, **options)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def live(self) -> bool:
        return self._live and self.clock() < self._lease_deadline

    @property
    def node_id(self) -> int | None:
        return None if self._registration is None else self._registration.node_id

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self._client.connect()
        self._cluster_id = await self._ensure_cluster_id()
        await self._load()
        self._spawn(self._watch_loop(), "etcd-watch")

    async def close(self) -> None:
        """Stops the loops and revokes the lease: this broker's registration and, if it was
        the controller, the controller key go at once (a controlled shutdown)."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._lease_id:
            await self._revoke(self._lease_id)
        self._set_live(False)
        await self._client.close()

    def _spawn(self, coroutine: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coroutine, name=name))

    @property
    def _kv(self) -> Any:
        assert self._client.kv is not None, "start() first"
        return self._client.kv

    @property
    def _lease(self) -> Any:
        assert self._client.lease is not None, "start() first"
        return self._client.lease

    def _key(self, *parts: object) -> bytes:
        return self.prefix + "/".join(str(p) for p in parts).encode()

    # -- the view -----------------------------------------------------------------------------

    async def _ensure_cluster_id(self) -> str:
        key = self._key("cluster_id")
        fresh = uuid.uuid4().bytes.hex()[:22]
        await self._kv.txn(
            [self._absent(key)], [self._kv.txn_op_put(key, fresh)], timeout=RPC_TIMEOUT
        )
        response = await self._kv.get(key, timeout=RPC_TIMEOUT)
        return bytes(response.kvs[0].value).decode()

    async def _load(self) -> None:
        """A full read of the prefix: the view starts over from its revision."""
        response = await self._kv.get(self.prefix, prefix_range_end(self.prefix), timeout=30)
        view = self.view
        view.brokers.clear()
        view.controller = None
        view.topics.clear()
        view.partitions.clear()
        for item in response.kvs:
            self._apply(PUT, item)
        view.revision = int(response.header.revision)
        view.notify(("reload", ""))
        await self._signal()

    async def _watch_loop(self) -> None:
        backoff = 0.1
        while True:
            try:
                await self._follow()
                backoff = 0.1
            except Exception as exc:  # any failure of the stream: resume it
                log.warning("etcd watch interrupted (%s); resuming from revision %d in %.1f s",
                            exc, self.view.revision + 1, backoff)  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _follow(self) -> None:
        """Applies one watch stream's events to the view until the stream ends or must be
        started over from the last revision applied."""
        created = False
        async with contextlib.aclosing(self._client_watch(self.view.revision + 1)) as stream:
            async for response in stream:
                if response.created and created:
                    # The client created the watch again after a stream error, from the
                    # revision after the last response's header. A creation's header is etcd's
                    # current revision, not the last event sent, so a stream lost between a
                    # creation and its catch-up events would skip them: start over instead.
                    log.info("etcd watch re-created; resuming from revision %d",
                             self.view.revision + 1)  # fmt: skip
                    return
                created = created or response.created
                if response.compact_revision:
                    log.warning("etcd compacted past revision %d: reading all metadata again",
                                self.view.revision)  # fmt: skip
                    await self._load()
                    return
                # A revision's events (one transaction's) come in one response; those at or
                # below the last applied revision were seen before a resume.
                applied = self.view.revision
                for event in response.events:
                    if event.kv.mod_revision > applied:
                        self._apply(int(event.type), event.kv)
                        self.view.revision = int(event.kv.mod_revision)
                if response.events:
                    await self._signal()

    def _client_watch(self, start_revision: int) -> Any:
        assert self._client.watch is not None
        return self._client.watch.watch(
            self.prefix, prefix_range_end(self.prefix), start_revision=start_revision
        )

    def _apply(self, event_type: int, item: Any) -> None:
        key = bytes(item.key)[len(self.prefix) :].decode()
        kind, _, rest = key.partition("/")
        value, revision = bytes(item.value), int(item.mod_revision)
        view, put = self.view, event_type == PUT
        if kind == "brokers":
            node = int(rest)
            if put:
                view.brokers[node] = BrokerRegistration.decode(value)
            else:
                view.brokers.pop(node, None)
            view.notify(("broker", rest))
        elif kind == "controller":
            if put:
                node_id = int(json.loads(value)["node_id"])
                view.controller = Controller(node_id, int(item.create_revision))
            else:
                view.controller = None
            view.notify(("controller", ""))
        elif kind == "topics":
            if put:
                view.topics[rest] = Versioned(TopicRecord.decode(value), revision)
            else:
                view.topics.pop(rest, None)
            view.notify(("topic", rest))
        elif kind == "partitions":
            topic, _, index = rest.rpartition("/")
            if put:
                view.partitions[(topic, int(index))] = Versioned(
                    PartitionState.decode(value), revision
                )
            else:
                view.partitions.pop((topic, int(index)), None)
            view.notify(("partition", rest))

    async def _signal(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _reach(self, revision: int, timeout: float = 30.0) -> None:
        """Until the view has applied `revision` (the caller reads its own write)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.view.revision >= revision)

    async def _next_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait()

    # -- compare-and-swap helpers ---------------------------------------------------------------

    @staticmethod
    def _absent(key: bytes) -> Any:
        return Compare(result=Compare.EQUAL, target=Compare.CREATE, key=key, create_revision=0)

    @staticmethod
    def _at_revision(key: bytes, revision: int) -> Any:
        return Compare(result=Compare.EQUAL, target=Compare.MOD, key=key, mod_revision=revision)

    async def _write(self, compare: list[Any], success: list[Any]) -> int | None:
        """The revision of the write if every comparison held, else None."""
        response = await self._kv.txn(compare, success, timeout=RPC_TIMEOUT)
        return int(response.header.revision) if response.succeeded else None

    async def _txn(self, compare: list[Any], success: list[Any]) -> int | None:
        """As _write, returning once the view has the write."""
        revision = await self._write(compare, success)
        if revision is not None:
            await self._reach(revision)
        return revision

    # -- brokers and the lease ------------------------------------------------------------------

    async def register(self, broker: BrokerRegistration) -> None:
        """Registers this broker under a new lease and keeps it alive in the background. A
        previous life of the same node id (killed before its lease ran out) is waited out,
        as Kafka's controller waits out an old incarnation's session; a live other broker
        with this node id is an error."""
        self._registration = broker
        deadline = self.clock() + 2 * self.ttl + 1
        while not await self._try_register(broker):
            if self.clock() > deadline:
                holder = self.view.brokers.get(broker.node_id)
                raise DuplicateBrokerError(
                    f"node id {broker.node_id} is registered by another live broker "
                    f"({holder.host if holder else '?'}:{holder.port if holder else '?'})"
                )
            await self._next_change(timeout=0.5)
        self._spawn(self._keep_alive_loop(), "etcd-lease")
        await self._reach(self._registered_at)
        self._set_live(True)

    async def _try_register(self, broker: BrokerRegistration) -> bool:
        """Writes the registration under a new lease, which the keep-alive loop keeps alive
        from then on. It does not wait for the view: the broker goes live once its view has
        caught up with its registration (as Kafka's controller unfences a broker only once it
        has caught up with the metadata log), which after an outage can take longer than the
        lease's TTL."""
        sent = self.clock()
        lease = await self._lease.grant(self.ttl, timeout=RPC_TIMEOUT)
        key = self._key("brokers", broker.node_id)
        put = self._kv.txn_op_put(key, broker.encode(), lease=int(lease.ID))
        written = await self._write([self._absent(key)], [put])
        if written is None:
            current = self.view.brokers.get(broker.node_id)
            if current is not None and current.incarnation == broker.incarnation:
                # our own registration under a lease we gave up for lost: move it over
                item = await self._kv.get(key, timeout=RPC_TIMEOUT)
                if item.kvs:
                    at = self._at_revision(key, int(item.kvs[0].mod_revision))
                    written = await self._write([at], [put])
        if written is None:
            await self._revoke(int(lease.ID))
            return False
        old, self._lease_id, self._registered_at = self._lease_id, int(lease.ID), written
        self._extend(sent)
        if old:
            await self._revoke(old)
        log.info("broker %d registered in etcd (lease %x, ttl %d s)", broker.node_id,
                 self._lease_id, self.ttl)  # fmt: skip
        return True

    async def _revoke(self, lease_id: int) -> None:
        """Best effort: a lease etcd no longer has (expired) or cannot reach runs out anyway."""
        try:
            await self._lease.revoke(lease_id, timeout=RPC_TIMEOUT)
        except Exception as exc:  # gRPC's NOT_FOUND is not an EtcdError
            log.debug("lease %x not revoked: %s", lease_id, exc)

    async def _keep_alive_loop(self) -> None:
        assert self._registration is not None
        outage_logged = False
        while True:
            sent = self.clock()
            try:
                async with asyncio.timeout(max(self.heartbeat_interval, 0.5)):
                    ttl = await self._keep_alive_once()
                if ttl > 0:
                    self._extend(sent)
                    if self.view.revision >= self._registered_at:
                        self._set_live(True)
                    outage_logged = False
                else:
                    log.warning("the lease of broker %d expired in etcd: registering again",
                                self._registration.node_id)  # fmt: skip
                    self._set_live(False)
                    await self._try_register(self._registration)
            except Exception as exc:  # unreachable, timed out, or a gRPC error alike
                if not outage_logged:
                    left = max(0.0, self._lease_deadline - self.clock())
                    log.warning("etcd keep-alive failed (%s); the lease runs out in %.1f s",
                                type(exc).__name__, left)  # fmt: skip
                    outage_logged = True
            await asyncio.sleep(max(0.0, self.heartbeat_interval - (self.clock() - sent)))

    async def _keep_alive_once(self) -> int:
        call = self._lease.keep_alive(self._lease_id)
        try:
            async for response in call:
                return int(response.TTL)
            return 0
        finally:
            call.cancel()

    def _extend(self, sent: float) -> None:
        """The lease holds until `sent` (when the answered keep-alive left) + TTL; a timer
        says so the moment it runs out, whatever the keep-alive loop is waiting for."""
        self._lease_deadline = sent + self.ttl
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._arm_deadline()

    def _arm_deadline(self) -> None:
        delay = max(0.0, self._lease_deadline - self.clock())
        self._deadline_timer = asyncio.get_running_loop().call_later(delay, self._check_deadline)

    def _check_deadline(self) -> None:
        if self.live:  # the loop runs a timer up to its clock resolution early: wait again
            self._arm_deadline()
        else:
            self._set_live(False)

    def _set_live(self, live: bool) -> None:
        if live == self._live:
            return
        self._live = live
        if not live:
            log.warning("broker %s: etcd registration lost: not acting as leader or controller",
                        self.node_id)  # fmt: skip
        for listener in list(self.lease_listeners):
            listener(live)

    # -- the controller ---------------------------------------------------------------------------

    async def campaign(self) -> Controller:
        """Waits until this broker holds the controller key (under its lease)."""
        assert self._registration is not None, "register() first"
        node = self._registration.node_id
        key = self._key("controller")
        while True:
            current = self.view.controller
            if current is not None and current.node_id == node and self.live:
                return current
            if current is None and self.live:
                body = json.dumps({"node_id": node}).encode()
                put = self._kv.txn_op_put(key, body, lease=self._lease_id)
                won = None
                with contextlib.suppress(EtcdError, TimeoutError):
                    won = await self._txn([self._absent(key)], [put])
                if won is not None:
                    continue
                # another broker won (its key is on the way to the view) or etcd is away
            await self._next_change(timeout=1.0)

    async def resign(self) -> None:
        """Gives the controller key up if this broker holds it."""
        current = self.view.controller
        if current is None or current.node_id != self.node_id:
            return
        key = self._key("controller")
        response = await self._kv.get(key, timeout=RPC_TIMEOUT)
        if response.kvs:
            revision = int(response.kvs[0].mod_revision)
            await self._txn([self._at_revision(key, revision)], [self._kv.txn_op_delete(key)])

    # -- topics and partitions ----------------------------------------------------------------

    def _topic_puts(self, record: TopicRecord, states: dict[int, PartitionState]) -> list[Any]:
        """The topic's record and its (new) partitions' states, written in one transaction."""
        return [self._kv.txn_op_put(self._key("topics", record.name), record.encode())] + [
            self._kv.txn_op_put(self._key("partitions", record.name, index), state.encode())
            for index, state in states.items()
        ]

    async def create_topic(self, record: TopicRecord, states: dict[int, PartitionState]) -> bool:
        key = self._key("topics", record.name)
        return await self._txn([self._absent(key)], self._topic_puts(record, states)) is not None

    async def update_topic(
        self, record: TopicRecord, revision: int, states: dict[int, PartitionState] | None = None
    ) -> bool:
        """A topic's record if still at `revision`: its configs, or with `states` its grown
        partition count and the new partitions (CreatePartitions), at once."""
        key = self._key("topics", record.name)
        puts = self._topic_puts(record, states or {})
        return await self._txn([self._at_revision(key, revision)], puts) is not None

    async def delete_topic(self, name: str) -> bool:
        key = self._key("topics", name)
        partitions = self._key("partitions", name) + b"/"
        deletes = [
            self._kv.txn_op_delete(key),
            self._kv.txn_op_delete(partitions, range_end=prefix_range_end(partitions)),
        ]
        existing = self.view.topics.get(name)
        if existing is None:
            return False
        return await self._txn([self._at_revision(key, existing.revision)], deletes) is not None

    async def allocate_producer_ids(self, size: int) -> int:
        """Moves the producer id counter on by `size` (compare-and-swap, retried when another
        broker moved it first) and returns where it was."""
        key = self._key("producer_id_block")
        while True:
            current = await self._kv.get(key, timeout=RPC_TIMEOUT)
            if current.kvs:
                start = int(bytes(current.kvs[0].value))
                compare = self._at_revision(key, int(current.kvs[0].mod_revision))
            else:
                start, compare = 0, self._absent(key)
            put = self._kv.txn_op_put(key, str(start + size).encode())
            response = await self._kv.txn([compare], [put], timeout=RPC_TIMEOUT)
            if response.succeeded:
                return start

    async def compare_and_set(
        self,
        topic: str,
        index: int,
        state: PartitionState,
        revision: int,
        controller_epoch: int | None = None,
    ) -> Versioned[PartitionState] | None:
        """With `controller_epoch`, the write also needs that controller term to be the
        current one: etcd itself refuses the decisions of a deposed controller."""
        key = self._key("partitions", topic, index)
        compare = [self._at_revision(key, revision)]
        if controller_epoch is not None:
            compare.append(
                Compare(result=Compare.EQUAL, target=Compare.CREATE,
                        key=self._key("controller"), create_revision=controller_epoch)
            )  # fmt: skip
        put = self._kv.txn_op_put(key, state.encode())
        written = await self._txn(compare, [put])
        return None if written is None else Versioned(state, written)
