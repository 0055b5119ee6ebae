"""ACLs end to end, through confluent-kafka, kafka-python, aiokafka, kcat and lockgate's own
client. Every client here connects over PLAINTEXT as User:ANONYMOUS; the first ACLs are
written with `lockgate acls add --data-dir` before the broker starts (letting ANONYMOUS
manage ACLs and use resources named ok-*), and the tests grant and revoke more at run time
through kafka-python's and confluent-kafka's admin clients (CreateAcls/DescribeAcls/
DeleteAcls). Anything not named ok-* is denied with the Kafka error of its API family."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding as CkAclBinding
from confluent_kafka.admin._acl import AclBindingFilter as CkAclBindingFilter
from confluent_kafka.admin._acl import AclOperation, AclPermissionType
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourcePatternType
from confluent_kafka.admin._resource import ResourceType as CkResourceType
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import (
    GroupAuthorizationFailedError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
)

from lockgate.client.errors import KafkaError as LockgateError
from lockgate.client.producer import Producer as LockgateProducer
from lockgate.protocol.errors import ErrorCode
from tests.support.broker import BrokerProcess

ANONYMOUS = "User:ANONYMOUS"
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "transaction.two.phase.commit.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


def acls_cli(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "acls", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("acls") / "data"
    data.mkdir()
    seed = ["--data-dir", str(data), "--allow-principal", ANONYMOUS]
    acls_cli("add", *seed, "--cluster", "--operation", "Alter", "--operation", "Describe")
    prefixed = [*seed, "--resource-pattern-type", "prefixed", "--operation", "All"]
    acls_cli("add", *prefixed, "--topic", "ok-", "--group", "ok-", "--transactional-id", "ok-")
    # two-phase ids: WRITE and DESCRIBE only; TWO_PHASE_COMMIT is granted by a test
    acls_cli(
        "add",
        *seed,
        "--resource-pattern-type",
        "prefixed",
        "--transactional-id",
        "tpc-",
        "--operation",
        "Write",
        "--operation",
        "Describe",
    )
    process = BrokerProcess(data, SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        yield client
    finally:
        client.close()


def ck_filter(topic: str, pattern: ResourcePatternType) -> CkAclBindingFilter:
    """confluent-kafka's filter on a topic's ACLs, any principal and host."""
    anyone: Any = None  # its stubs do not admit None, the client does
    return CkAclBindingFilter(
        CkResourceType.TOPIC,
        topic,
        pattern,
        anyone,
        anyone,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def test_the_seeded_acls_are_listed_by_kafka_python(admin: KafkaAdminClient) -> None:
    everything = ACLFilter(
        principal=None,
        host=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    acls, error = admin.describe_acls(everything)
    assert error.errno == 0
    topics = [a for a in acls if a.resource_pattern.resource_type == ResourceType.TOPIC]
    assert [(a.resource_pattern.resource_name, a.operation, a.permission_type) for a in topics] == [
        ("ok-", ACLOperation.ALL, ACLPermissionType.ALLOW)
    ]
    assert topics[0].resource_pattern.pattern_type == ACLResourcePatternType.PREFIXED
    assert topics[0].principal == ANONYMOUS


def test_create_and_delete_topics(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    allowed, denied = unique("ok-admin-"), unique("no-admin-")
    admin.create_topics([NewTopic(allowed, 1, 1)])
    with pytest.raises(TopicAuthorizationFailedError):
        admin.create_topics([NewTopic(denied, 1, 1)])
    assert allowed in admin.list_topics()
    assert denied not in admin.list_topics()
    # configs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic
    # configs (confluent-kafka: kafka-python's describe_configs drops per-resource errors)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    [described] = client.describe_configs([ConfigResource("topic", allowed)]).values()
    assert "retention.ms" in described.result(30)
    denied_resource = ConfigResource("topic", denied, set_config={"retention.ms": "1000"})
    for futures in (
        client.describe_configs([ConfigResource("topic", denied)]),
        client.alter_configs([denied_resource]),
    ):
        [future] = futures.values()
        with pytest.raises(KafkaException) as raised:
            future.result(30)
        assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin.delete_topics([allowed])
    assert allowed not in admin.list_topics()


def test_produce_and_consume_allowed(broker: BrokerProcess) -> None:
    topic, group = unique("ok-data-"), unique("ok-group-")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    errors: list[KafkaError | None] = []
    for number in range(5):
        producer.produce(topic, f"m{number}".encode(), on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None] * 5
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    seen = []
    for _ in range(60):
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            seen.append(message.value())
            if len(seen) == 5:
                break
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == [f"m{n}".encode() for n in range(5)]


def test_produce_denied(broker: BrokerProcess) -> None:
    topic = unique("no-data-")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    [error] = errors
    assert error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=10_000)
        try:
            kafka_producer.send(topic, b"x").get(timeout=30)
        finally:
            kafka_producer.close()


def test_consume_denied_without_group_or_topic_read(broker: BrokerProcess) -> None:
    topic = unique("ok-read-")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"x").get(timeout=30)
    producer.close()
    # the group is not ok-*: JoinGroup gets GROUP_AUTHORIZATION_FAILED
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id="no-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in consumer:
                break
    finally:
        consumer.close()
    # the topic is not readable: the fetch gets TOPIC_AUTHORIZATION_FAILED
    confluent = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("ok-g-"),
            "auto.offset.reset": "earliest",
        }
    )
    confluent.subscribe([unique("no-read-")])
    codes = set()
    for _ in range(30):
        message = confluent.poll(1.0)
        error = message.error() if message is not None else None
        if error is not None:
            codes.add(error.code())
            if KafkaError.TOPIC_AUTHORIZATION_FAILED in codes:
                break
    confluent.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes


async def test_aiokafka_consumer_group_denied(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import GroupAuthorizationFailedError as AioGroupDenied

    consumer = AIOKafkaConsumer(
        unique("ok-aio-"), bootstrap_servers=broker.bootstrap, group_id="no-aio-group"
    )
    with pytest.raises(AioGroupDenied):
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=10_000)
        finally:
            await consumer.stop()


def test_transactional_produce_needs_write_on_the_transactional_id(broker: BrokerProcess) -> None:
    denied = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "no-tx"})
    with pytest.raises(KafkaException) as raised:
        denied.init_transactions(30)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    allowed = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ok-tx"})
    allowed.init_transactions(30)
    allowed.begin_transaction()
    allowed.produce(unique("ok-txn-"), b"x")
    allowed.commit_transaction(30)


async def test_two_phase_commit_needs_two_phase_commit_on_the_id(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    transactional_id = unique("tpc-")
    async with LockgateProducer(broker.bootstrap, transactional_id=transactional_id) as producer:
        with pytest.raises(LockgateError) as raised:
            await producer.init_transactions(enable_2pc=True)
        assert raised.value.code == ErrorCode.transactional_id_authorization_failed
    # WRITE alone still allows the ordinary protocol
    async with LockgateProducer(broker.bootstrap, transactional_id=transactional_id) as producer:
        await producer.init_transactions()
    grant = ACL(
        ANONYMOUS,
        "*",
        ACLOperation.WRITE,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, transactional_id),
    )
    grant.operation = 15  # TWO_PHASE_COMMIT (KIP-939): kafka-python has no name for it
    result = admin.create_acls([grant])
    assert not result["failed"], result
    async with LockgateProducer(broker.bootstrap, transactional_id=transactional_id) as producer:
        await producer.init_transactions(enable_2pc=True)
        producer.begin_transaction()
        await producer.send(unique("ok-tpc-"), b"x")
        await producer.prepare_transaction()
        await producer.commit_transaction()


def test_confluent_admin_creates_describes_and_deletes_acls(broker: BrokerProcess) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("granted-")
    binding = CkAclBinding(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        ANONYMOUS,
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in client.create_acls([binding]).values():
        future.result(30)
    found = client.describe_acls(ck_filter(topic, ResourcePatternType.MATCH)).result(30)
    assert found == [binding]
    # WRITE was granted, CREATE was not: creating the topic is still refused
    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kafka_admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        kafka_admin.close()
    everything = ck_filter(topic, ResourcePatternType.ANY)
    deleted = {f: future.result(30) for f, future in client.delete_acls([everything]).items()}
    assert list(deleted.values()) == [[binding]]
    assert client.describe_acls(everything).result(30) == []


def test_kafka_python_deletes_acls_and_access_goes(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    group = unique("granted-group-")
    grant = ACL(
        ANONYMOUS,
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.GROUP, group),
    )
    assert not admin.create_acls([grant])["failed"]
    offsets = admin.list_group_offsets(group)  # OffsetFetch: READ implies DESCRIBE
    assert offsets == {group: {}}
    matching = ACLFilter(
        principal=ANONYMOUS,
        host="*",
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            ResourceType.GROUP, group, ACLResourcePatternType.LITERAL
        ),
    )
    [(_, removed, error)] = admin.delete_acls([matching])
    assert error.errno == 0 and [a.resource_pattern.resource_name for a in removed] == [group]
    with pytest.raises(GroupAuthorizationFailedError):
        admin.list_group_offsets(group)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_sees_only_described_topics_and_cannot_produce_elsewhere(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    assert KCAT is not None
    visible = unique("ok-kcat-")
    admin.create_topics([NewTopic(visible, 1, 1)])
    listing = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-L", "-J"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert visible in listing
    assert "__consumer_offsets" not in listing  # not DESCRIBE-able by ANONYMOUS
    denied = subprocess.run(
        [
            KCAT,
            "-b",
            broker.bootstrap,
            "-P",
            "-t",
            unique("no-kcat-"),
            "-p",
            "0",
            "-X",
            "message.timeout.ms=10000",
        ],
        input="x\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "authoriz" in (denied.stderr + denied.stdout).lower()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "data").start()
    try:
        client = KafkaAdminClient(bootstrap_servers=plain.bootstrap)
        try:
            everything = ACLFilter(
                principal=None,
                host=None,
                operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(
                    ResourceType.ANY, None, ACLResourcePatternType.ANY
                ),
            )
            with pytest.raises(SecurityDisabledError):
                client.describe_acls(everything)
        finally:
            client.close()
    finally:
        plain.kill()
