"""SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against lockgate through every client.

A broker with a PLAINTEXT and a SASL_PLAINTEXT listener; its first user is created offline
with `lockgate users add --data-dir` before it starts, as Kafka's `kafka-storage format
--add-scram` does. For each mechanism, confluent-kafka, kafka-python, aiokafka, kcat and
lockgate's own client produce and consume back over SASL; a wrong password and an unknown
user fail with each client's authentication error (short timeouts bound every attempt). A
request before authentication, an unknown mechanism, and a raw (SaslHandshake v0) exchange are
checked on the wire. Credentials managed through Describe/AlterUserScramCredentials by
confluent-kafka's and kafka-python's admin clients and by `lockgate users`, and they survive
a broker restart.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (  # (the package does not re-export them for mypy)
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonTopicPartition

from lockgate.client.consumer import Consumer
from lockgate.client.errors import SaslAuthenticationFailedError
from lockgate.client.producer import Producer as LockgateProducer
from lockgate.client.security import ClientSecurity
from lockgate.security.scram import ScramClient
from lockgate.security.scram import ScramMechanism as Mechanism
from lockgate.security.session import SecurityProtocol
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic
from tests.support.kafka_wire import (
    ConnectionClosed,
    Cursor,
    KafkaWire,
    compact_string,
    int32,
    string,
    tagged_fields,
)

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.compat

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kcat", "lockgate"]
USER, PASSWORD = "alice", "alice-secret"
COUNT = 10
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18


def lockgate_users(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "users", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def new_broker(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(data_dir, listeners=("PLAINTEXT", "SASL_PLAINTEXT"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("sasl") / "data"
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        done = lockgate_users(
            "add", USER, "--password", PASSWORD, "--mechanism", mechanism,
            "--data-dir", str(data_dir),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    process = new_broker(data_dir).start()
    try:
        yield process
    finally:
        process.kill()


# -- produce and consume back through each client ----------------------------------------------


def confluent_settings(bootstrap: str, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def kafka_python_settings(mechanism: str, user: str, password: str) -> dict[str, object]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "request_timeout_ms": 10_000,
    }


def values() -> list[bytes]:
    return [f"sasl-{i}".encode() for i in range(COUNT)]


def round_trip_confluent(bootstrap: str, topic: str, mechanism: str) -> list[bytes]:
    producer = Producer(confluent_settings(bootstrap, mechanism, USER, PASSWORD))
    for value in values():
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = confluent_consumer(
        bootstrap, **confluent_settings(bootstrap, mechanism, USER, PASSWORD)
    )
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < COUNT and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                if message.error() is None and message.value() is not None:
                    seen.append(message.value())  # type: ignore[arg-type]
    finally:
        consumer.close()
    return seen


def round_trip_kafka_python(bootstrap: str, topic: str, mechanism: str) -> list[bytes]:
    settings = kafka_python_settings(mechanism, USER, PASSWORD)
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    try:
        for value in values():
            producer.send(topic, value, partition=0).get(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **settings)
    try:
        consumer.assign([KafkaPythonTopicPartition(topic, 0)])
        consumer.seek(KafkaPythonTopicPartition(topic, 0), 0)
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(record.value for record in records)
    finally:
        consumer.close()
    return seen


async def round_trip_aiokafka(bootstrap: str, topic: str, mechanism: str) -> list[bytes]:
    settings = kafka_python_settings(mechanism, USER, PASSWORD)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
    await producer.start()
    try:
        for value in values():
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **settings)
    await consumer.start()
    try:
        partition = AioTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < COUNT and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.extend(record.value for record in records if record.value is not None)
    finally:
        await consumer.stop()
    return seen


def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert KCAT is not None
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=60, check=False)


def kcat_security(mechanism: str, user: str, password: str) -> list[str]:
    return [
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
        "-X", f"sasl.username={user}", "-X", f"sasl.password={password}",
    ]  # fmt: skip


def round_trip_kcat(bootstrap: str, topic: str, mechanism: str) -> list[bytes]:
    security = kcat_security(mechanism, USER, PASSWORD)
    written = kcat("-P", "-b", bootstrap, "-t", topic, "-p", "0", *security,
                   stdin=b"".join(v + b"\n" for v in values()))  # fmt: skip
    assert written.returncode == 0, written.stderr
    read = kcat("-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *security)
    assert read.returncode == 0, read.stderr
    return read.stdout.splitlines()


def lockgate_security(mechanism: str, user: str, password: str) -> ClientSecurity:
    return ClientSecurity(
        SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=password,
    )


async def round_trip_lockgate(bootstrap: str, topic: str, mechanism: str) -> list[bytes]:
    from lockgate.client.cluster import TopicPartition

    security = lockgate_security(mechanism, USER, PASSWORD)
    async with LockgateProducer(bootstrap, security=security) as producer:
        for value in values():
            await producer.send(topic, value, partition=0)
        await producer.flush()
    seen: list[bytes] = []
    async with Consumer(bootstrap, auto_offset_reset="earliest", security=security) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while len(seen) < COUNT and time.monotonic() < deadline:
            seen.extend(m.value for m in await consumer.poll(200) if m.value is not None)
    return seen


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
async def test_produce_and_consume(broker: BrokerProcess, client: str, mechanism: str) -> None:
    if client == "kcat" and KCAT is None:
        pytest.skip("kcat is not installed (make system-deps)")
    topic = f"sasl-{client}-{mechanism}"
    create_topic(broker.bootstrap, topic, 1)  # through PLAINTEXT
    bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")
    if client == "confluent-kafka":
        seen = await asyncio.to_thread(round_trip_confluent, bootstrap, topic, mechanism)
    elif client == "kafka-python":
        seen = await asyncio.to_thread(round_trip_kafka_python, bootstrap, topic, mechanism)
    elif client == "aiokafka":
        seen = await round_trip_aiokafka(bootstrap, topic, mechanism)
    elif client == "kcat":
        seen = await asyncio.to_thread(round_trip_kcat, bootstrap, topic, mechanism)
    else:
        seen = await round_trip_lockgate(bootstrap, topic, mechanism)
    assert seen == values()


# -- wrong password and unknown user: each client's authentication error -------------------------


def confluent_failure(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    errors: list[KafkaError] = []
    settings: dict[str, object] = {
        **confluent_settings(bootstrap, mechanism, user, password),
        "error_cb": errors.append,
    }
    producer = Producer(settings)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return str(errors[0])
    raise AssertionError(f"no authentication error, only {errors}")


def kafka_python_failure(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    """kafka-python logs the connection's SaslAuthenticationFailedError, then gives up on
    bootstrapping (a timeout, bounded short here)."""
    import kafka.errors

    settings = kafka_python_settings(mechanism, user, password)
    with pytest.raises(kafka.errors.KafkaError) as failure:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, bootstrap_timeout_ms=1_500, **settings
        )
        producer.close(timeout=5)
    return repr(failure.value)


async def aiokafka_failure(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    """aiokafka logs the connection's SaslAuthenticationFailed, then gives up bootstrapping."""
    import aiokafka.errors

    settings = kafka_python_settings(mechanism, user, password)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
    with pytest.raises(aiokafka.errors.KafkaError) as failure:
        await producer.start()
    await producer.stop()
    return repr(failure.value)


def kcat_failure(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    result = kcat("-L", "-b", bootstrap, "-m", "1", *kcat_security(mechanism, user, password))
    assert result.returncode != 0
    return result.stderr.decode(errors="replace")


async def lockgate_failure(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    from lockgate.client.connection import BrokerConnection

    host, port = bootstrap.rsplit(":", 1)
    connection = BrokerConnection(
        host, int(port), security=lockgate_security(mechanism, user, password)
    )
    with pytest.raises(SaslAuthenticationFailedError) as failure:
        await connection.connect()
    assert not failure.value.retriable
    return str(failure.value)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
async def test_authentication_fails(
    broker: BrokerProcess, client: str, mechanism: str, who: str, caplog: pytest.LogCaptureFixture
) -> None:
    if client == "kcat" and KCAT is None:
        pytest.skip("kcat is not installed (make system-deps)")
    user, password = (USER, "not-the-password") if who == "wrong-password" else ("mallory", "x")
    bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")
    if client == "confluent-kafka":
        text = await asyncio.to_thread(confluent_failure, bootstrap, mechanism, user, password)
    elif client == "kafka-python":
        with caplog.at_level(logging.ERROR, logger="kafka"):
            await asyncio.to_thread(kafka_python_failure, bootstrap, mechanism, user, password)
        text = caplog.text
        assert "SaslAuthenticationFailedError" in text
    elif client == "aiokafka":
        with caplog.at_level(logging.ERROR, logger="aiokafka"):
            await aiokafka_failure(bootstrap, mechanism, user, password)
        text = caplog.text  # it logs the broker's error, then fails to bootstrap
        assert "SaslAuthenticationFailed" in text
    elif client == "kcat":
        text = await asyncio.to_thread(kcat_failure, bootstrap, mechanism, user, password)
    else:
        text = await lockgate_failure(bootstrap, mechanism, user, password)
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    ) in text


# -- the wire: the gate, the handshake's errors, raw tokens ----------------------------------


def api_versions(wire: KafkaWire) -> None:
    body = compact_string("wire") + compact_string("1") + tagged_fields()
    cursor = wire.request(API_VERSIONS, 3, body, flexible=True, flexible_response=False)
    assert cursor.int16() == 0


def handshake(wire: KafkaWire, mechanism: str, version: int = 1) -> tuple[int, list[str]]:
    cursor = wire.request(
        SASL_HANDSHAKE, version, string(mechanism), flexible=False, flexible_response=False
    )
    code = cursor.int16()
    return code, [str(cursor.string()) for _ in range(cursor.array_length())]


def metadata_v1(wire: KafkaWire) -> Cursor:
    return wire.request(METADATA, 1, int32(-1), flexible=False, flexible_response=False)


def test_a_request_before_authentication_closes_the_connection(broker: BrokerProcess) -> None:
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        wire.send_request(METADATA, 1, int32(-1), flexible=False)
        assert wire.is_closed_by_peer()
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        api_versions(wire)
        assert handshake(wire, "SCRAM-SHA-256")[0] == 0
        wire.send_request(METADATA, 1, int32(-1), flexible=False)  # not SaslAuthenticate
        assert wire.is_closed_by_peer()
    assert "before SASL authentication completed" in broker.log()


def test_unknown_mechanism_lists_the_enabled_ones_then_closes(broker: BrokerProcess) -> None:
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        code, mechanisms = handshake(wire, "GSSAPI")
        assert code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
        assert wire.is_closed_by_peer()


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(broker: BrokerProcess) -> None:
    with KafkaWire(broker.bootstrap) as wire:
        assert handshake(wire, "PLAIN")[0] == 34  # ILLEGAL_SASL_STATE, as KafkaApis answers
        body = compact_string(None)[:0] + b"\x01" + tagged_fields()  # empty compact bytes
        cursor = wire.request(SASL_AUTHENTICATE, 2, body, flexible=True, flexible_response=True)
        assert cursor.int16() == 34
        metadata_v1(wire)  # the connection stays usable


def authenticate_v2(wire: KafkaWire, token: bytes) -> tuple[int, bytes]:
    from tests.support.kafka_wire import uvarint

    body = uvarint(len(token) + 1) + token + tagged_fields()
    cursor = wire.request(SASL_AUTHENTICATE, 2, body, flexible=True, flexible_response=True)
    code = cursor.int16()
    cursor.string(compact=True)
    length = cursor.uvarint() - 1
    data = cursor.data[cursor.pos : cursor.pos + length]
    return code, bytes(data)


def test_scram_on_the_wire_and_a_second_handshake_after_success(broker: BrokerProcess) -> None:
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        assert handshake(wire, "SCRAM-SHA-512")[0] == 0
        client = ScramClient(Mechanism.SCRAM_SHA_512, USER, PASSWORD)
        code, server_first = authenticate_v2(wire, client.first())
        assert code == 0
        code, server_final = authenticate_v2(wire, client.final(server_first))
        assert code == 0
        client.verify(server_final)
        metadata_v1(wire)
        assert handshake(wire, "PLAIN")[0] == 34  # re-authentication is not served


def test_raw_tokens_after_handshake_v0(broker: BrokerProcess) -> None:
    token = b"\x00" + USER.encode() + b"\x00" + PASSWORD.encode()
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        assert handshake(wire, "PLAIN", version=0)[0] == 0
        wire.send_raw(int32(len(token)) + token)
        assert wire.read_frame() == b""  # PLAIN's empty answer, framed by its length only
        metadata_v1(wire)
    with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
        assert handshake(wire, "PLAIN", version=0)[0] == 0
        bad = b"\x00" + USER.encode() + b"\x00wrong"
        wire.send_raw(int32(len(bad)) + bad)
        with pytest.raises(ConnectionClosed):
            wire.read_frame()  # v0 has no error answer: the connection closes


def test_failure_logging_is_rate_limited(broker: BrokerProcess) -> None:
    before = broker.log().count("SASL authentication failed")
    for _ in range(5):
        with KafkaWire(broker.bootstrap_for("SASL_PLAINTEXT")) as wire:
            assert handshake(wire, "PLAIN")[0] == 0
            code, _ = authenticate_v2(wire, b"\x00nobody\x00guess")
            assert code == 58
    assert broker.log().count("SASL authentication failed") - before <= 1


# -- credential management ---------------------------------------------------------------------


def test_confluent_admin_alters_and_describes(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-pw", b"carol-salt")]
    )
    wait_all(futures)
    (result,) = wait_all(admin.describe_user_scram_credentials(["carol"]))
    assert [(c.mechanism, c.iterations) for c in result.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    assert confluent_failure(
        broker.bootstrap_for("SASL_PLAINTEXT"), "SCRAM-SHA-256", "carol", "wrong"
    )
    seen = Producer(confluent_settings(broker.bootstrap_for("SASL_PLAINTEXT"), "SCRAM-SHA-256",
                                       "carol", "carol-pw")).list_topics(timeout=20)  # fmt: skip
    assert seen.brokers
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|does not exist"):
        wait_all(admin.describe_user_scram_credentials(["nobody"]))
    wait_all(
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
        )
    )
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|does not exist"):
        wait_all(admin.describe_user_scram_credentials(["carol"]))


def wait_all(futures: Any) -> list[Any]:
    """The results of an admin call's futures (one per user)."""
    return [future.result(timeout=20) for future in futures.values()]


def test_kafka_python_admin_alters_and_describes(broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin._users import ScramMechanism as KpMechanism
    from kafka.admin._users import UserScramCredentialUpsertion as KpUpsertion

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        outcome = admin.alter_user_scram_credentials(
            [KpUpsertion("dave", KpMechanism.SCRAM_SHA_512, "dave-pw", iterations=4096)]
        )
        assert outcome == {"dave": None}
        described = admin.describe_user_scram_credentials(["dave"])
        assert "dave" in repr(described) and "4096" in repr(described)
    finally:
        admin.close()
    assert asyncio.run(
        round_trip_login(broker.bootstrap_for("SASL_PLAINTEXT"), "SCRAM-SHA-512", "dave", "dave-pw")
    )


async def round_trip_login(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    from lockgate.client.connection import BrokerConnection

    host, port = bootstrap.rsplit(":", 1)
    connection = BrokerConnection(
        host, int(port), security=lockgate_security(mechanism, user, password)
    )
    await connection.connect()
    await connection.close()
    return True


def test_lockgate_users_online_with_command_config(broker: BrokerProcess, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
    )
    where = ["--bootstrap-server", broker.bootstrap_for("SASL_PLAINTEXT"),
             "--command-config", str(config)]  # fmt: skip
    added = lockgate_users("add", "erin", "--password", "erin-pw", "--mechanism",
                           "SCRAM-SHA-512", *where)  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = lockgate_users("list", *where)
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.split() == ["erin", "SCRAM-SHA-512", "4096"] for line in listed.stdout.splitlines()
    )
    assert asyncio.run(
        round_trip_login(broker.bootstrap_for("SASL_PLAINTEXT"), "PLAIN", "erin", "erin-pw")
    )
    deleted = lockgate_users("delete", "erin", *where)
    assert deleted.returncode == 0, deleted.stderr
    assert "erin" not in lockgate_users("list", *where).stdout
    refused = lockgate_users("list", "--bootstrap-server", broker.bootstrap_for("SASL_PLAINTEXT"),
                             "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                             "--sasl-username", USER, "--sasl-password", "wrong")  # fmt: skip
    assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr


def test_credentials_survive_a_restart(tmp_path: Path) -> None:
    broker = new_broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        wait_all(
            admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("frank", info, b"frank-pw", b"frank-salt")]
            )
        )
        broker.restart()
        assert asyncio.run(
            round_trip_login(
                broker.bootstrap_for("SASL_PLAINTEXT"), "SCRAM-SHA-512", "frank", "frank-pw"
            )
        )
        listed = lockgate_users("list", "--bootstrap-server", broker.bootstrap)
        assert "frank" in listed.stdout, listed.stderr
    finally:
        broker.kill()
    offline = lockgate_users("list", "--data-dir", str(tmp_path / "data"))
    assert "frank" in offline.stdout, offline.stderr


def test_console_reaches_the_cluster_with_command_config(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """`lockgate console --command-config` authenticates as the CLI does; with a wrong
    password its page says so (502) and neither the page nor its log shows the password."""
    import urllib.error
    import urllib.request

    from tests.support.console import running_console

    def page(url: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    for password, expected in ((PASSWORD, 200), ("wrong-secret-pw", 502)):
        config = tmp_path / f"client-{expected}.properties"
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{password}";\n'
        )
        args = ("--command-config", str(config))
        log_path = tmp_path / f"console-{expected}.log"
        with running_console(broker.bootstrap_for("SASL_PLAINTEXT"), log_path,
                             extra_args=args) as console:  # fmt: skip
            status, text = page(f"{console.url}/cluster")
            log_text = console.log()
        assert status == expected, text
        assert password not in text and password not in log_text
        if expected == 200:
            assert broker.bootstrap_for("SASL_PLAINTEXT").rsplit(":", 1)[1] in text
        else:
            assert "SASL_AUTHENTICATION_FAILED" in text and "Traceback" not in text
