from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.support.broker import BrokerProcess
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster, etcd_available
from tests.support.fault_proxy import FaultProxy, broker_behind
from tests.support.franz_go import franzcheck_binary
from tests.support.object_store import S3ProxyServer
from tests.support.reference_kafka import spark_kafka_jars

# No per-example deadline for generated tests: on a machine shared with other work an example
# that takes 100 ms alone can take 250 ms, and a test must not fail for the machine's load (a
# test that really hangs meets the suite's timeout instead). Tests that set their own
# settings(deadline=...) keep them.
settings.register_profile("lockgate", deadline=None)
settings.load_profile("lockgate")

# The slowest directories are collected first. `make test` runs xdist with --no-loadscope-reorder,
# so its workers take the modules in this order (by default xdist orders them by test count,
# which put the longest modules, single tests of minutes, last): the long ones start first and
# the many short unit-test modules even out the workers at the end. The stable order keeps runs
# comparable. Order within each directory is kept.
SLOW_FIRST = ("tests/spark/", "tests/faults/", "tests/reference/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        for position, prefix in enumerate(SLOW_FIRST):
            if item.nodeid.startswith(prefix):
                return position
        return len(SLOW_FIRST)

    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile, with the modules that share the Spark session and the reference brokers
    as one unit of work (tests/support/scheduling.py); every other mode is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.support.scheduling import SharedSessionFileScheduling

    return SharedSessionFileScheduling(config, log)


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker in a child process with its data under tmp_path; stopped afterwards."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
async def memory_broker() -> AsyncIterator[Broker]:
    """An in-process broker on an ephemeral port, storing in memory."""
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache"})
    broker = Broker(config, MemoryEngine())
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session per pytest worker running Spark tests, with lockgate's data
    source registered and Spark's own Kafka connector on its classpath when resolved (one
    session serves tests/spark and tests/reference alike: jars are fixed at its creation)."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run our interpreter
    from lockgate.spark.pipeline import session

    spark_session = session("lockgate-tests", "local[2]", jars=spark_kafka_jars())
    try:
        yield spark_session
    finally:
        spark_session.stop()


# What the Spark tests' broker allows: the exactly-once sinks need two-phase commit.
SPARK_BROKER_SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One lockgate broker per pytest worker for the Spark tests (tests/spark, and Spark's
    own connector in tests/reference)."""
    data = tmp_path_factory.mktemp("spark") / "data"
    broker = BrokerProcess(data, SPARK_BROKER_SETTINGS).start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def fault_proxy() -> Iterator[FaultProxy]:
    """A started fault proxy on 127.0.0.1 with no upstream yet; stopped afterwards."""
    with FaultProxy() as proxy:
        yield proxy


@pytest.fixture
def proxied_broker(
    request: pytest.FixtureRequest, tmp_path: Path, fault_proxy: FaultProxy
) -> Iterator[BrokerProcess]:
    """A broker in a child process reached through `fault_proxy` and advertising its address,
    so that clients reconnect through the proxy too. Extra broker properties come from
    indirect parametrization: `@pytest.mark.parametrize("proxied_broker", [{...}],
    indirect=True)`. Killed afterwards."""
    settings: dict[str, str] = getattr(request, "param", None) or {}
    broker = broker_behind(fault_proxy, tmp_path / "data", settings).start()
    try:
        yield broker
    finally:
        broker.kill()


# Cluster mode, per test module: a 3-member etcd, and 3 brokers in a namespace of it.
@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    if not etcd_available():
        reason = "etcd is not installed: run `make system-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    brokers = BrokerCluster(tmp_path_factory.mktemp("cluster"), etcd).start()
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture(scope="session")
def franzcheck() -> Path:
    """franz-go's check program (tests/go/franzcheck), built by `make go-deps`. Without it a
    test is skipped with the reason, except under CI, where the test command has built it and
    its absence is a failure."""
    found = franzcheck_binary()
    if found is None:
        reason = "franz-go's check program is not built: run `make go-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


# The object store of tiered storage: S3Proxy (tests/support/object_store.py). One server per
# test module (about 2 s to start); tests keep apart by key prefix. A test that stops or
# breaks the server takes the function-scoped one.
@pytest.fixture(scope="module")
def s3proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3ProxyServer]:
    server = S3ProxyServer(tmp_path_factory.mktemp("s3proxy")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3proxy_own(tmp_path: Path) -> Iterator[S3ProxyServer]:
    server = S3ProxyServer(tmp_path / "s3proxy").start()
    try:
        yield server
    finally:
        server.stop()
