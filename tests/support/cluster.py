# A lockgate cluster for tests: brokers (child processes on 127.0.0.1) sharing an etcd
# cluster's namespace, with quick session timeouts so that failover happens within seconds.
# Brokers are killed, paused, resumed and restarted by PID; every wait is bounded.
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.broker import BrokerProcess
from tests.support.etcd import EtcdCluster

# failover in about 3 s: the lease TTL, checked every 0.5 s
FAST_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "num.partitions": "3",
    "default.replication.factor": "3",
}


@dataclass(frozen=True)
class PartitionInfo:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class BrokerCluster:
    def __init__(
        self,
        base: Path,
        etcd: EtcdCluster,
        size: int = 3,
        settings: dict[str, str] | None = None,
        cluster_urls: dict[int, str] | None = None,
        node_settings: dict[int, dict[str, str]] | None = None,
    ) -> None:
        """`cluster_urls` gives a broker another way to etcd (a fault proxy, say);
        `node_settings` a broker its own properties (its broker.rack, say) over `settings`."""
        self.namespace = f"test-{uuid.uuid4().hex[:8]}"
        self.url = f"{etcd.url}/{self.namespace}"
        self.brokers: dict[int, BrokerProcess] = {}
        for node in range(size):
            url = (cluster_urls or {}).get(node, etcd.url) + f"/{self.namespace}"
            config = {**FAST_FAILOVER, **(settings or {}), **(node_settings or {}).get(node, {}),
                      "lockgate.cluster": url, "node.id": str(node)}  # fmt: skip
            self.brokers[node] = BrokerProcess(base / f"broker{node}", config)
        self.paused: set[int] = set()

    def start(self) -> BrokerCluster:
        for broker in self.brokers.values():
            broker.start()
        self.wait_for(lambda: len(self.admin().list_topics(timeout=5).brokers) == len(self.brokers),
                      "every broker registered")  # fmt: skip
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.resume()
            broker.kill()

    def pause(self, node: int) -> None:
        self.brokers[node].pause()
        self.paused.add(node)

    def resume(self, node: int) -> None:
        self.brokers[node].resume()
        self.paused.discard(node)

    @property
    def bootstrap(self) -> str:
        """The running brokers (a paused one would only make clients wait)."""
        return ",".join(
            b.bootstrap
            for n, b in self.brokers.items()
            if b.process is not None and n not in self.paused
        )

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})

    def partitions(self, topic: str) -> dict[int, PartitionInfo]:
        metadata = self.admin().list_topics(topic, timeout=10).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(f"{topic}: {metadata.error}")
        return {
            p.id: PartitionInfo(p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in metadata.partitions.values()
        }

    def create_topic(self, name: str, partitions: int = 3, replication: int = 3,
                     **configs: str) -> None:  # fmt: skip
        topic = NewTopic(name, partitions, replication, config=configs)
        admin = self.admin()  # kept alive until its answer is in
        for future in admin.create_topics([topic]).values():
            future.result(30)
        self.wait_for(lambda: all(len(p.isr) == replication and p.leader >= 0
                                  for p in self.partitions(name).values())
                      and len(self.partitions(name)) == partitions,
                      f"{name} created")  # fmt: skip

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except Exception as exc:  # a broker away mid-question: ask again
                last_error = exc
            time.sleep(0.2)
        raise TimeoutError(f"{what}: not after {timeout} s (last error: {last_error})")

    def wait_leader(self, topic: str, partition: int, other_than: int) -> PartitionInfo:
        found: list[PartitionInfo] = []

        def moved() -> bool:
            info = self.partitions(topic)[partition]
            found[:] = [info]
            return info.leader >= 0 and info.leader != other_than

        self.wait_for(moved, f"{topic}-{partition} led by a broker other than {other_than}")
        return found[0]

    def wait_full_isr(self, topic: str) -> None:
        self.wait_for(
            lambda: all(len(p.isr) == len(p.replicas) for p in self.partitions(topic).values()),
            f"every replica of {topic} back in sync",
        )

    def logs(self) -> str:
        return "\n".join(f"--- broker {n}\n{b.log()[-6000:]}" for n, b in self.brokers.items())
