"""Three brokers whose inter-broker listener is SASL_SSL (SCRAM-SHA-512 as user "broker"), with
the ACL authorizer on and clients on a SASL_SSL listener of their own. The SCRAM users are
written into the cluster's etcd before the brokers start; the ACLs are created by the super
user "admin" through the admin API, and live in etcd too.

What this proves: followers authenticate to their leaders and are allowed to fetch (the
broker's principal is a super user), transaction markers sent from the coordinator to leaders
on other brokers authenticate, ACLs and SCRAM credentials created through one broker apply on
the others, and a broker with a wrong inter-broker password cannot replicate while the others
keep serving."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.client.admin import Admin
from lockgate.client.admin_scram import ScramUpsertion
from lockgate.client.cluster import Cluster
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import SaslAuthenticationFailedError
from lockgate.client.security import ClientSecurity
from lockgate.protocol.api import ApiKey
from lockgate.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from lockgate.security.session import SecurityProtocol
from tests.support.broker import BrokerProcess
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.tls import Pki, make_pki

T = TypeVar("T")

LISTENERS = ("SASL_SSL", "INTERNAL")  # clients, brokers
MECHANISM = "SCRAM-SHA-512"
PASSWORDS = {"broker": "broker-secret", "admin": "admin-secret", "alice": "alice-secret",
             "bob": "bob-secret"}  # fmt: skip
AUTHENTICATION_FAILED = "Authentication failed"  # Kafka's generic message, which lockgate sends


def _jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


def _settings(pki: Pki, broker_password: str = PASSWORDS["broker"]) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.internal.scram-sha-512.sasl.jaas.config": _jaas("broker", broker_password),
        **pki.server_settings("none", prefix="listener.name.internal."),
        **pki.server_settings("none", prefix="listener.name.sasl_ssl."),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }


def _client(pki: Pki, user: str, password: str | None = None) -> dict[str, str]:
    """confluent-kafka's properties for the SASL_SSL client listener."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": pki.ca,
        "sasl.mechanisms": MECHANISM,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
    }


def _security(pki: Pki, user: str, password: str | None = None) -> ClientSecurity:
    """lockgate's client's security for the same listener."""
    return ClientSecurity(
        SecurityProtocol.SASL_SSL,
        ssl_cafile=pki.ca,
        sasl_mechanism=MECHANISM,
        sasl_username=user,
        sasl_password=PASSWORDS[user] if password is None else password,
    )


class SaslCluster(BrokerCluster):
    """The helpers of BrokerCluster (topic creation, partition states) as the super user: with
    the authorizer on, an anonymous client would not even see the topics."""

    def __init__(self, base: Path, etcd: EtcdCluster, pki: Pki) -> None:
        super().__init__(base, etcd, settings=_settings(pki))
        self.pki = pki
        for node, broker in list(self.brokers.items()):  # two listeners each
            self.brokers[node] = BrokerProcess(
                broker.data_dir, broker.settings, listeners=LISTENERS
            )

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3,
                            **_client(self.pki, "admin")})  # fmt: skip

    def add_users(self) -> None:
        """Writes every user's SCRAM credential into the cluster's etcd, as an operator does
        before the first start (`lockgate users add --cluster`)."""
        for user, password in PASSWORDS.items():
            done = subprocess.run(
                [sys.executable, "-m", "lockgate.cli", "users", "add", user, "--password",
                 password, "--mechanism", MECHANISM, "--cluster", self.url],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr


class _PinnedCluster(Cluster):
    """lockgate's client cluster view sending every any-broker request (ACLs, SCRAM) to one
    broker, so that a test knows which broker a change went through."""

    def __init__(self, node: int, bootstrap: str, security: ClientSecurity) -> None:
        super().__init__(bootstrap, security=security)
        self.node = node

    async def any_connection(self, avoid: Collection[int] = ()) -> BrokerConnection:  # pinned
        if self.node not in self.metadata.brokers:  # starting: the bootstrap server is `node`
            return await super().any_connection()
        return await self.connection(self.node)


def _through(cluster: SaslCluster, node: int, act: Callable[[Admin], Awaitable[T]]) -> T:
    """Runs `act` with an admin (user "admin") whose ACL and SCRAM requests go to `node`."""

    async def run() -> T:
        pinned = _PinnedCluster(
            node, cluster.brokers[node].bootstrap, _security(cluster.pki, "admin")
        )
        await pinned.start()
        try:
            return await act(Admin(cluster=pinned))
        finally:
            await pinned.close()

    return asyncio.run(run())


def _allow(principal: str, resource: ResourceType, name: str, *operations: Operation,
           permission: Permission = Permission.ALLOW) -> list[AclBinding]:  # fmt: skip
    return [
        AclBinding(
            ResourcePattern(resource, name, PatternType.LITERAL),
            AclEntry(principal, "*", operation, permission),
        )
        for operation in operations
    ]


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise TimeoutError(f"{what}: not after {timeout} s")


def _produce(producer: Producer, topic: str, values: list[bytes], partitions: int) -> list[str]:
    """Produces and flushes; returns the delivery errors (empty: every record acknowledged)."""
    errors: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error.name())

    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
    assert producer.flush(30) == 0, "records still in flight after 30 s"
    return errors


def _read(bootstrap: str, config: dict[str, str], topic: str, partitions: int, count: int,
          **extra: str) -> list[bytes]:  # fmt: skip
    """Values read from offset 0 of every partition until `count` came in (bounded), plus
    whatever arrives in a short while after (duplicates would)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "alice-readers",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **config, **extra})  # fmt: skip
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            values += _values(consumer.consume(1000, 0.5))
        values += _values(consumer.consume(1000, 1.0))
    finally:
        consumer.close()
    return values


def _logged(broker: BrokerProcess, *parts: str) -> bool:
    """Whether one line of the broker's log holds every part."""
    return any(all(part in line for part in parts) for line in broker.log().splitlines())


def _values(messages: list[Message]) -> list[bytes]:
    found: list[bytes] = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {error}")
        found.append(message.value() or b"")
    return found


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_cluster(
    etcd: EtcdCluster, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SaslCluster]:
    cluster = SaslCluster(tmp_path_factory.mktemp("sasl-cluster"), etcd, pki)
    cluster.add_users()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_replication_and_a_transaction_over_the_sasl_ssl_inter_broker_listener(
    sasl_cluster: SaslCluster, pki: Pki
) -> None:
    cluster = sasl_cluster
    cluster.create_topic("orders", partitions=3, replication=3, **{"min.insync.replicas": "2"})
    cluster.create_topic("ledger", partitions=3, replication=3, **{"min.insync.replicas": "2"})
    grants = [
        *_allow("User:alice", ResourceType.TOPIC, "orders",
                Operation.WRITE, Operation.READ, Operation.DESCRIBE),
        *_allow("User:alice", ResourceType.TOPIC, "ledger",
                Operation.WRITE, Operation.READ, Operation.DESCRIBE),
        *_allow("User:alice", ResourceType.TRANSACTIONAL_ID, "alice-txn",
                Operation.WRITE, Operation.DESCRIBE),
        *_allow("User:alice", ResourceType.GROUP, "alice-readers", Operation.READ),
    ]  # fmt: skip

    async def grant(admin: Admin) -> None:
        await admin.create_acls(grants)

    _through(cluster, 0, grant)
    for node in cluster.brokers:  # every broker follows the ACL key in etcd

        async def listed(admin: Admin) -> bool:
            found = await admin.describe_acls(AclBindingFilter(principal="User:alice"))
            return set(grants) <= set(found)

        _wait(lambda node=node: _through(cluster, node, listed),  # type: ignore[misc]
              f"alice's ACLs on broker {node}")  # fmt: skip

    # acks=all with min.insync.replicas=2 on three replicas: every record acknowledged means
    # every replica in the ISR at the time has it; a follower that could not fetch would have
    # been dropped from the ISR (replica.lag.time.max.ms) before the acknowledgement
    alice = {"bootstrap.servers": cluster.bootstrap, **_client(pki, "alice")}
    producer = Producer({**alice, "acks": "all", "enable.idempotence": True})
    values = [f"order-{i}".encode() for i in range(300)]
    assert _produce(producer, "orders", values, 3) == []
    states = cluster.partitions("orders")
    assert all(sorted(p.isr) == [0, 1, 2] for p in states.values()), states
    assert len({p.leader for p in states.values()}) > 1, states  # each broker follows some
    assert sorted(_read(cluster.bootstrap, _client(pki, "alice"), "orders", 3, 300)) == sorted(
        values
    )

    # a transaction over partitions led by different brokers: the coordinator's markers reach
    # the leaders that are not itself, else read_committed would never see the records
    ledger = cluster.partitions("ledger")
    assert len({p.leader for p in ledger.values()}) > 1, ledger
    transactional = Producer({**alice, "acks": "all", "transactional.id": "alice-txn"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    committed = [f"entry-{i}".encode() for i in range(30)]
    for i, value in enumerate(committed):
        transactional.produce("ledger", value, partition=i % 3)
    transactional.commit_transaction(30)
    read = _read(cluster.bootstrap, _client(pki, "alice"), "ledger", 3, len(committed),
                 **{"isolation.level": "read_committed"})  # fmt: skip
    assert sorted(read) == sorted(committed)
    assert all(sorted(p.isr) == [0, 1, 2] for p in cluster.partitions("ledger").values())
    for broker in cluster.brokers.values():
        # (client logins may fail in other tests; no broker's may)
        assert not _logged(broker, "SASL authentication failed", "listener INTERNAL")
        assert not _logged(broker, "fetching from broker", "failed")


def test_acls_created_through_one_broker_apply_on_the_others(
    sasl_cluster: SaslCluster, pki: Pki
) -> None:
    cluster = sasl_cluster
    cluster.create_topic("shared", partitions=1, replication=3)
    leader = cluster.partitions("shared")[0].leader
    elsewhere = [node for node in cluster.brokers if node != leader]

    def bob_produces(value: bytes) -> list[str]:
        # a new producer each time: librdkafka keeps a topic's authorization error for a while
        bob = Producer({"bootstrap.servers": cluster.bootstrap, **_client(pki, "bob"),
                        "acks": "all", "log_level": 3})  # fmt: skip
        return _produce(bob, "shared", [value], 1)

    assert bob_produces(b"before") == ["TOPIC_AUTHORIZATION_FAILED"]  # no ACL names bob

    allowed = _allow("User:bob", ResourceType.TOPIC, "shared", Operation.WRITE)
    _through(cluster, elsewhere[0], lambda admin: admin.create_acls(allowed))
    # the produce goes to the leader, which learnt of the grant from etcd
    _wait(lambda: bob_produces(b"granted") == [], f"bob allowed on {leader}")

    denied = _allow("User:bob", ResourceType.TOPIC, "shared", Operation.WRITE,
                    permission=Permission.DENY)  # fmt: skip
    _through(cluster, elsewhere[1], lambda admin: admin.create_acls(denied))
    _wait(
        lambda: bob_produces(b"denied") == ["TOPIC_AUTHORIZATION_FAILED"],
        f"bob refused on {leader}",
    )
    on_leader = _through(
        cluster, leader, lambda admin: admin.describe_acls(AclBindingFilter(principal="User:bob"))
    )
    assert set(allowed + denied) <= set(on_leader)


def test_a_scram_user_added_through_one_broker_authenticates_on_the_others(
    sasl_cluster: SaslCluster, pki: Pki
) -> None:
    cluster = sasl_cluster

    async def authenticates(node: int) -> bool:
        connection = BrokerConnection(
            "127.0.0.1",
            cluster.brokers[node].port,
            security=_security(pki, "carol", "carol-secret"),
        )
        try:
            await connection.connect()
        except SaslAuthenticationFailedError:
            return False
        try:
            answer = await connection.request(
                ApiKey.METADATA,
                {"topics": [], "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": False},
            )  # fmt: skip
            assert len(answer.brokers) == len(cluster.brokers)
        finally:
            await connection.close()
        return True

    assert not asyncio.run(authenticates(2))  # no such user yet
    upsertion = ScramUpsertion("carol", "carol-secret", MECHANISM)
    _through(cluster, 0, lambda admin: admin.alter_user_scram_credentials([upsertion]))
    for node in (1, 2):
        _wait(lambda node=node: asyncio.run(authenticates(node)),  # type: ignore[misc]
              f"carol authenticates on broker {node}")  # fmt: skip


def test_a_broker_with_a_wrong_inter_broker_password_cannot_replicate(
    etcd: EtcdCluster, pki: Pki, tmp_path: Path
) -> None:
    cluster = SaslCluster(tmp_path, etcd, pki)
    cluster.brokers[2].settings.update(_settings(pki, broker_password="not-the-password"))
    cluster.add_users()
    cluster.start()
    try:
        admin = cluster.admin()
        topics = [
            NewTopic("left-out", num_partitions=1, replica_assignment=[[0, 2]]),
            NewTopic("still-serving", num_partitions=1, replica_assignment=[[1, 0, 2]],
                     config={"min.insync.replicas": "2"}),
        ]  # fmt: skip
        for future in admin.create_topics(topics).values():
            future.result(30)
        cluster.wait_for(lambda: cluster.partitions("left-out")[0].leader == 0, "left-out led by 0")
        cluster.wait_for(
            lambda: cluster.partitions("still-serving")[0].leader == 1, "still-serving led by 1"
        )
        # broker 2's fetchers are refused by the leaders, and both sides say so in their logs
        cluster.wait_for(
            lambda: _logged(cluster.brokers[2], "fetching from broker 0 failed",
                            "SASL_AUTHENTICATION_FAILED", AUTHENTICATION_FAILED),
            "broker 2 logs its refused fetch connection",
        )  # fmt: skip
        cluster.wait_for(
            lambda: _logged(cluster.brokers[0], "SASL authentication failed",
                            "'lockgate-replica-2'", "listener INTERNAL"),
            "broker 0 logs the refused inter-broker login",
        )  # fmt: skip
        # created with every replica in the ISR, broker 2 drops out of both and stays out
        cluster.wait_for(lambda: cluster.partitions("left-out")[0].isr == (0,), "left-out ISR")
        cluster.wait_for(
            lambda: sorted(cluster.partitions("still-serving")[0].isr) == [0, 1],
            "still-serving ISR",
        )
        # the others keep serving: acks=all with min.insync.replicas=2 succeeds on 1 and 0
        producer = Producer({"bootstrap.servers": cluster.bootstrap, **_client(pki, "admin"),
                             "acks": "all"})  # fmt: skip
        values = [f"still-{i}".encode() for i in range(50)]
        assert _produce(producer, "still-serving", values, 1) == []
        read = _read(cluster.bootstrap, _client(pki, "admin"), "still-serving", 1, len(values))
        assert sorted(read) == sorted(values)
        assert cluster.partitions("left-out")[0].isr == (0,)
        assert 2 not in cluster.partitions("still-serving")[0].isr
    finally:
        cluster.stop()
