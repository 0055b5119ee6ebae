"""Apache Kafka, the reference broker: one per test session (per worker), started from the
jars `make reference-deps` resolved. Without them a test is skipped with the reason, except
under CI, where the test command has resolved them and their absence is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.broker import BrokerProcess
from tests.support.reference_kafka import ReferenceKafka, reference_classpath


@pytest.fixture(scope="session")
def classpath() -> str:
    """Apache Kafka's resolved classpath."""
    found = reference_classpath()
    if found is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def reference_kafka(
    tmp_path_factory: pytest.TempPathFactory, classpath: str
) -> Iterator[ReferenceKafka]:
    kafka = ReferenceKafka(tmp_path_factory.mktemp("reference") / "data", classpath).start()
    try:
        yield kafka
    finally:
        kafka.stop()


# Share groups (KIP-932) on the reference broker: a fresh 4.4 node finalizes share.version 2
# by itself; the share coordinator's state topic needs replication factor and min ISR 1 on a
# single node (set for every reference broker above). The heartbeat interval may not go below
# group.share.min.heartbeat.interval.ms (5 s by default), and a new member's partitions come
# with its heartbeat after the share partitions were initialized: both are cut here so that a
# share consumer gets its assignment within about a second. The group-config tests compare
# Kafka's defaults with lockgate's, so these settings live on a broker of their own.
SHARE_GROUP_SETTINGS = {
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
    # one partition for the share coordinator's state topic (50 by default): its creation on
    # the first share group is most of that group's first assignment wait on a busy machine
    "share.coordinator.state.topic.num.partitions": "1",
}


@pytest.fixture(scope="session")
def share_kafka(
    tmp_path_factory: pytest.TempPathFactory, classpath: str
) -> Iterator[ReferenceKafka]:
    """A reference broker for share groups (started only by the tests that ask for it)."""
    kafka = ReferenceKafka(
        tmp_path_factory.mktemp("share-reference") / "data", classpath, SHARE_GROUP_SETTINGS
    ).start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def share_lockgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """lockgate for the share-group tests, with the same share settings as share_kafka."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("share-lockgate") / "data", SHARE_GROUP_SETTINGS
    ).start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def share_broker(request: pytest.FixtureRequest) -> str:
    """The bootstrap of the broker a share-group test runs against: parametrize it
    (indirect) with "kafka" or "lockgate"."""
    kind = request.param
    if kind == "kafka":
        kafka: ReferenceKafka = request.getfixturevalue("share_kafka")
        return kafka.bootstrap
    if kind == "lockgate":
        lockgate: BrokerProcess = request.getfixturevalue("share_lockgate")
        return lockgate.bootstrap
    raise ValueError(f"unknown broker kind {kind!r}")
