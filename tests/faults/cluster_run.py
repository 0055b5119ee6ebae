"""Fault runs on a 3-broker cluster: `python -m tests.faults.cluster_run --seeds 1-200`
(`make soak CLUSTER=1`).

Each seed starts 3 etcd members and 3 brokers (each broker behind a fault proxy that it
advertises, so that clients and the other brokers reach it only through the proxy, and behind
cuttable TCP proxies on its way to etcd), creates the workload's topics with 3 replicas and
min.insync.replicas 2, and runs run.py's workload (transactional writers, a confluent-kafka
writer in a child process, a consume-transform-produce stage, two share consumers) while a
nemesis driven by the seed injects one fault at a time, each healed before the next:

  kill-leader       kill -9 of the leader of a workload partition, restarted 0.5-3 s later
  kill-coordinator  kill -9 of the transaction coordinator of a writer's transactional id,
                    of the stage's group coordinator or of the share coordinator of a share
                    partition of run.py's share group, restarted 0.5-3 s later
  pause             SIGSTOP of a leader or coordinator for 2-7.5 s (past its 3 s lease)
  kill-etcd         kill -9 of an etcd member, restarted 1-3 s later
  cut-etcd          a broker cut off from etcd (not from anyone else) for 2-6 s
  isolate           nobody reaches a broker (clients and brokers: its proxy refuses) for 2-6 s;
                    it still reaches etcd and the other brokers
  delay-end-txn     an EndTxn held back 1-6 s on its way to a coordinator
  drop / cut        dropped Produce, EndTxn or TxnOffsetCommit frames; connections cut
  crash-client      SIGKILL of the confluent-kafka writer and a new incarnation

Then everything is healed and checked exactly as run.py does (checker.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from lockgate.client.errors import KafkaError
from lockgate.coordinator.txn.log import partition_for
from tests.faults import share_workload, workload
from tests.faults.checker import check, table
from tests.faults.history import History, load
from tests.faults.run import (
    BROKER_SETTINGS,
    END_TXN,
    HEAL_TIMEOUT_S,
    PRODUCE,
    SHARE_GROUP,
    SHARE_TOPICS,
    TXN_OFFSET_COMMIT,
    ConfluentWriterProcess,
    FaultLoop,
    SeedResult,
    ShareReaders,
    _final_reads,
    _settle,
    _wait_for_pipeline,
    declare_share_group,
    discard_clean,
    parse_seeds,
)
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster, etcd_available
from tests.support.fault_proxy import Direction, FaultProxy
from tests.support.tcp_proxy import TcpProxy

log = logging.getLogger("faults.cluster")

SIZE = 3
INTERNAL_PARTITIONS = 6
CLUSTER_SETTINGS = {
    **BROKER_SETTINGS,
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "share.coordinator.state.topic.num.partitions": str(INTERNAL_PARTITIONS),
}
FAULTS = (
    "kill-leader",
    "kill-coordinator",
    "pause",
    "kill-etcd",
    "cut-etcd",
    "isolate",
    "delay-end-txn",
    "drop",
    "cut",
    "crash-client",
)


class ClusterUnderTest:
    """etcd, the brokers, and the proxies in front of each broker and on its way to etcd."""

    def __init__(self, base: Path) -> None:
        self.etcd = EtcdCluster(base / "etcd")
        self.etcd_proxies: dict[int, list[TcpProxy]] = {}
        self.proxies = {node: FaultProxy() for node in range(SIZE)}
        self.brokers: BrokerCluster | None = None
        self.base = base

    def start(self) -> ClusterUnderTest:
        self.etcd.start()
        for proxy in self.proxies.values():
            proxy.start()
        urls = {}
        for node in range(SIZE):
            proxies = [TcpProxy(m.client_port).start() for m in self.etcd.members]
            self.etcd_proxies[node] = proxies
            urls[node] = "etcd://" + ",".join(p.address for p in proxies)
        brokers = BrokerCluster(self.base, self.etcd, SIZE, CLUSTER_SETTINGS, urls)
        for node, broker in brokers.brokers.items():
            broker.settings["advertised.listeners"] = self.proxies[node].address
            self.proxies[node].set_upstream(broker.port)
        self.brokers = brokers.start()
        return self

    @property
    def cluster(self) -> BrokerCluster:
        assert self.brokers is not None
        return self.brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(proxy.address for proxy in self.proxies.values())

    def heal(self) -> None:
        """Every fault undone: proxies clear and open, etcd members and brokers running."""
        for proxy in self.proxies.values():
            proxy.clear_rules()
            proxy.refuse_connections(False)
        for proxies in self.etcd_proxies.values():
            for tcp in proxies:
                tcp.cut(False)
        for member in self.etcd.members:
            if not member.running:
                self.etcd.restart(member)
        for node, broker in self.cluster.brokers.items():
            self.cluster.resume(node)
            if broker.process is None:
                broker.start()

    def stop(self) -> None:
        if self.brokers is not None:
            self.brokers.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        for proxies in self.etcd_proxies.values():
            for tcp in proxies:
                tcp.stop()
        self.etcd.stop()


@contextlib.contextmanager
def cluster_under_test(base: Path) -> Iterator[ClusterUnderTest]:
    under_test = ClusterUnderTest(base)
    try:
        yield under_test.start()
    finally:
        under_test.stop()


class ClusterNemesis(FaultLoop):
    def __init__(
        self,
        under_test: ClusterUnderTest,
        rng: random.Random,
        client: ConfluentWriterProcess,
        transactional_ids: list[str],
    ) -> None:
        super().__init__(rng, client, FAULTS)
        self.under_test = under_test
        self.cluster = under_test.cluster
        self.transactional_ids = transactional_ids

    # -- whom to hit ----------------------------------------------------------------------------

    async def _leader(self) -> int:
        topic = self.rng.choice((*workload.TOPICS, workload.PIPE_OUTPUT))
        index = self.rng.randrange(workload.PARTITIONS)
        return await self._leader_of(topic, index)

    async def _coordinator(self) -> int:
        draw = self.rng.random()
        if draw < 0.2:
            key, topic = workload.PIPE_GROUP, "__consumer_offsets"
        elif draw < 0.4:
            return await self._share_coordinator()
        else:
            key, topic = self.rng.choice(self.transactional_ids), "__transaction_state"
        return await self._leader_of(topic, partition_for(key, INTERNAL_PARTITIONS))

    async def _share_coordinator(self) -> int:
        """The share coordinator of one share partition of the share group (FindCoordinator
        key type 2), or any broker if none answers."""
        topic = self.rng.choice(SHARE_TOPICS)
        index = self.rng.randrange(workload.PARTITIONS)
        try:
            async with asyncio.timeout(10):
                node = await share_workload.share_coordinator(
                    self.cluster.bootstrap, SHARE_GROUP, topic, index
                )
        except Exception:  # a broker away mid-question
            node = -1
        return node if node in self.cluster.brokers else self.rng.randrange(SIZE)

    async def _leader_of(self, topic: str, index: int) -> int:
        """The partition's leader by the cluster's metadata, or any broker if none answers."""
        try:
            partitions = await asyncio.to_thread(self.cluster.partitions, topic)
            leader = partitions[index].leader
        except Exception:  # a broker away mid-question
            leader = -1
        return leader if leader in self.cluster.brokers else self.rng.randrange(SIZE)

    # -- the faults -----------------------------------------------------------------------------

    async def _kill(self, node: int, what: str) -> None:
        log.info("nemesis: kill -9 broker %d (%s)", node, what)
        await asyncio.to_thread(self.cluster.brokers[node].kill)
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(self.cluster.brokers[node].start)

    async def _kill_leader(self) -> None:
        await self._kill(await self._leader(), "a leader")

    async def _kill_coordinator(self) -> None:
        await self._kill(await self._coordinator(), "a coordinator")

    async def _pause(self) -> None:
        node = await (self._leader() if self.rng.random() < 0.5 else self._coordinator())
        log.info("nemesis: SIGSTOP broker %d", node)
        self.cluster.pause(node)
        try:
            await asyncio.sleep(self.rng.uniform(2.0, 7.5))
        finally:
            self.cluster.resume(node)

    async def _kill_etcd(self) -> None:
        member = self.rng.choice(self.under_test.etcd.members)
        log.info("nemesis: kill -9 etcd member %s", member.name)
        await asyncio.to_thread(self.under_test.etcd.kill, member)
        await asyncio.sleep(self.rng.uniform(1.0, 3.0))
        await asyncio.to_thread(self.under_test.etcd.restart, member)

    async def _cut_etcd(self) -> None:
        node = self.rng.randrange(SIZE)
        log.info("nemesis: broker %d cut off from etcd", node)
        proxies = self.under_test.etcd_proxies[node]
        for tcp in proxies:
            await asyncio.to_thread(tcp.cut)
        try:
            await asyncio.sleep(self.rng.uniform(2.0, 6.0))
        finally:
            for tcp in proxies:
                tcp.cut(False)

    async def _isolate(self) -> None:
        node = self.rng.randrange(SIZE)
        log.info("nemesis: nobody reaches broker %d", node)
        proxy = self.under_test.proxies[node]
        proxy.refuse_connections(True)
        proxy.cut_connections()
        try:
            await asyncio.sleep(self.rng.uniform(2.0, 6.0))
        finally:
            proxy.refuse_connections(False)

    async def _delay_end_txn(self) -> None:
        proxy = self.under_test.proxies[await self._coordinator()]
        proxy.delay(Direction.REQUEST, self.rng.uniform(1.0, 6.0), [END_TXN], limit=1)

    async def _drop(self) -> None:
        proxy = self.rng.choice(list(self.under_test.proxies.values()))
        keys = self.rng.choice([[PRODUCE], [END_TXN], [TXN_OFFSET_COMMIT]])
        direction = self.rng.choice([Direction.REQUEST, Direction.RESPONSE])
        proxy.drop(direction, keys, limit=self.rng.randint(1, 3))

    async def _cut(self) -> None:
        self.rng.choice(list(self.under_test.proxies.values())).cut_connections()


async def run_cluster_seed(seed: int, duration: float, scratch: Path) -> SeedResult:
    rng = random.Random(seed)
    history_path = scratch / f"history-{seed}.jsonl"
    history = History(history_path)
    with cluster_under_test(scratch / f"cluster-{seed}") as under_test:
        cluster, bootstrap = under_test.cluster, under_test.bootstrap
        client = ConfluentWriterProcess(f"cw-{seed}", bootstrap, scratch, seed)
        try:
            for topic in (*workload.TOPICS, workload.PIPE_OUTPUT):
                await asyncio.to_thread(cluster.create_topic, topic, workload.PARTITIONS, SIZE)
            history.record(
                "pipe",
                input_topic=workload.PIPE_INPUT,
                output_topic=workload.PIPE_OUTPUT,
                group=workload.PIPE_GROUP,
            )
            await _retrying(declare_share_group, bootstrap, history)
            client.start()
            writers = [workload.Writer(f"w{i}-{seed}", bootstrap, history, seed) for i in range(3)]
            ids = [writer.name for writer in writers] + [client.name, workload.PIPE_WRITER]
            nemesis = ClusterNemesis(under_test, rng, client, ids)
            pipeline = workload.Pipeline(bootstrap, history)
            stop_faults, stop_writers, stop_pipeline = (asyncio.Event() for _ in range(3))
            tasks = [asyncio.create_task(w.run(stop_writers)) for w in writers]
            pipe_task = asyncio.create_task(pipeline.run(stop_pipeline))
            sharers = ShareReaders(bootstrap, history, seed)
            nemesis_task = asyncio.create_task(nemesis.run(stop_faults))
            await asyncio.sleep(duration)
            stop_faults.set()
            await nemesis_task
            await asyncio.to_thread(under_test.heal)
            stop_writers.set()
            await asyncio.wait_for(asyncio.gather(*tasks), HEAL_TIMEOUT_S)
            await asyncio.to_thread(client.stop, HEAL_TIMEOUT_S)
            await _retrying(_settle, bootstrap)
            await _retrying(_wait_for_pipeline, bootstrap)
            stop_pipeline.set()
            await asyncio.wait_for(pipe_task, HEAL_TIMEOUT_S)
            await _retrying(_settle, bootstrap)
            await _retrying(_final_reads, bootstrap, history)
            await sharers.finish(bootstrap)
        finally:
            history.close()
            client.crash()
    return SeedResult(check(load([history_path, *client.histories])), nemesis.applied)


async def _retrying(step: Callable[..., Awaitable[None]], *args: Any) -> None:
    """A step of the heal asked again while the cluster settles (a coordinator still loading
    answers COORDINATOR_LOAD_IN_PROGRESS, a broker just back may refuse a first request)."""
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    while True:
        try:
            await step(*args)
            return
        except (KafkaError, OSError) as exc:
            if time.monotonic() > deadline:
                raise
            log.info("heal: %s; asking again", exc)
            await asyncio.sleep(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-3", help="e.g. 1-200 or 4,9,12")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of faults per seed")
    parser.add_argument(
        "--keep", type=Path, help="keep histories here (and data and logs of seeds with anomalies)"
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if not etcd_available():
        print("etcd is not installed: run `make system-deps`", file=sys.stderr)
        return 2
    results: dict[int, Counter[str]] = {}
    with tempfile.TemporaryDirectory(prefix="lockgate-cluster-faults-") as temporary:
        scratch = options.keep or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        for seed in parse_seeds(options.seeds):
            started = time.monotonic()
            result = asyncio.run(run_cluster_seed(seed, options.duration, scratch))
            results[seed] = result.anomalies
            discard_clean(scratch / f"cluster-{seed}", result)
            print(
                f"seed {seed}: {sum(result.anomalies.values())} anomalies in "
                f"{time.monotonic() - started:.0f}s; faults {dict(result.faults)}",
                flush=True,
            )
    print(table(results))
    return 1 if any(sum(c.values()) for c in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
