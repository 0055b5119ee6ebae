"""TLS listeners through real clients: an SSL listener beside PLAINTEXT.

One broker serves PLAINTEXT and SSL (no client certificates asked); a second serves SSL with
ssl.client.auth=required. The test CA and certificates are generated per module
(tests/support/tls.py). Each client (confluent-kafka, kafka-python, aiokafka, kcat, lockgate's
own client) produces over TLS and reads its records back over TLS; Metadata on the SSL listener
must advertise the SSL port (a client sent to the plaintext port would fail its handshake).
Refusals: a client without a certificate, with one from another CA or an expired one (client
auth required), a client trusting another CA, and a broker presenting an expired certificate;
each refused client leaves one log line on the broker, and the broker keeps serving others.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from lockgate.client import Consumer as LockgateConsumer
from lockgate.client import Producer as LockgateProducer
from lockgate.client.errors import KafkaError as LockgateKafkaError
from lockgate.client.security import ClientSecurity
from lockgate.client.sync import Producer as SyncProducer
from lockgate.client.sync_consumer import Consumer as SyncConsumer
from lockgate.security.session import SecurityProtocol
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.tls import Pki, make_pki

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _start(base: Path, settings: dict[str, str]) -> BrokerProcess:
    return BrokerProcess(base / "data", settings, listeners=("PLAINTEXT", "SSL")).start()


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = _start(tmp_path_factory.mktemp("tls"), pki.server_settings("none"))
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def mutual_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """ssl.client.auth=required on the SSL listener only (listener.name.ssl.*)."""
    settings = pki.server_settings("required", prefix="listener.name.ssl.")
    broker = _start(tmp_path_factory.mktemp("mtls"), settings)
    try:
        yield broker
    finally:
        broker.kill()


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def _ssl_config(pki: Pki, broker: BrokerProcess, **extra: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_for("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": pki.ca,
        **extra,
    }


def _client_cert(pki: Pki, name: str = "client") -> dict[str, str]:
    return {
        "ssl.certificate.location": pki.path(f"{name}.crt"),
        "ssl.key.location": pki.path(f"{name}.key"),
    }


def _confluent_round_trip(config: dict[str, str], topic: str, count: int = 20) -> list[bytes]:
    producer = Producer({**config, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = ConfluentConsumer(
        {**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def _refused_log_lines(broker: BrokerProcess, before: int) -> list[str]:
    lines = broker.log().splitlines()[before:]
    return [line for line in lines if "TLS handshake with" in line]


def _wait_for_lines(broker: BrokerProcess, before: int, count: int) -> list[str]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = _refused_log_lines(broker, before)
        if len(found) >= count:
            return found
        time.sleep(0.1)
    return _refused_log_lines(broker, before)


# ------------------------------------------------------------------------------------------
# Produce and consume over TLS with every client


def test_confluent_kafka_over_ssl(tls_broker: BrokerProcess, pki: Pki) -> None:
    topic = _topic()
    values = _confluent_round_trip(_ssl_config(pki, tls_broker), topic)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))


def test_metadata_on_the_ssl_listener_advertises_the_ssl_port(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    ssl_admin = AdminClient(dict(_ssl_config(pki, tls_broker)))
    brokers = ssl_admin.list_topics(timeout=20).brokers
    advertised = [(str(b.host), b.port) for b in brokers.values()]
    assert advertised == [("127.0.0.1", tls_broker.ports["SSL"])]
    plain_admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap_for("PLAINTEXT")})
    brokers = plain_admin.list_topics(timeout=20).brokers
    advertised = [(str(b.host), b.port) for b in brokers.values()]
    assert advertised == [("127.0.0.1", tls_broker.ports["PLAINTEXT"])]


def test_kafka_python_over_ssl(tls_broker: BrokerProcess, pki: Pki) -> None:
    topic = _topic()
    options = {
        "bootstrap_servers": tls_broker.bootstrap_for("SSL"),
        "security_protocol": "SSL",
        "ssl_cafile": pki.ca,
    }
    producer = kafka.KafkaProducer(acks="all", **options)
    try:
        for i in range(10):
            producer.send(topic, f"kp{i}".encode()).get(timeout=30)
    finally:
        producer.close(10)
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **options
    )
    try:
        # range first: zip would otherwise wait consumer_timeout_ms for an 11th record
        values = [record.value for _, record in zip(range(10), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"kp{i}".encode() for i in range(10)]


def test_aiokafka_over_ssl_with_a_client_certificate(
    mutual_broker: BrokerProcess, pki: Pki
) -> None:
    topic = _topic()
    context = ssl.create_default_context(cafile=pki.ca)
    context.load_cert_chain(pki.path("client.crt"), pki.path("client.key"))

    async def run() -> list[bytes]:
        common = {
            "bootstrap_servers": mutual_broker.bootstrap_for("SSL"),
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        producer = aiokafka.AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"ak{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(30):
                async for record in consumer:
                    assert record.value is not None
                    values.append(record.value)
                    if len(values) == 10:
                        break
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"ak{i}".encode() for i in range(10)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make system-deps)")
def test_kcat_over_ssl(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert KCAT is not None
    topic = _topic()
    create_topic(tls_broker.bootstrap_for("PLAINTEXT"), topic, 1)
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca}"]
    bootstrap = tls_broker.bootstrap_for("SSL")
    lines = b"".join(f"kc{i}\n".encode() for i in range(10))
    produced = subprocess.run(
        [KCAT, "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all", *tls],
        input=lines, timeout=60, check=False, capture_output=True,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    result = subprocess.run(
        [KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *tls],
        timeout=60, check=False, capture_output=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout.splitlines() == [f"kc{i}".encode() for i in range(10)]


def test_lockgate_client_over_ssl_with_a_client_certificate(
    mutual_broker: BrokerProcess, pki: Pki
) -> None:
    topic = _topic()
    security = ClientSecurity(
        SecurityProtocol.SSL,
        ssl_cafile=pki.ca,
        ssl_certfile=pki.path("client.crt"),
        ssl_keyfile=pki.path("client_encrypted.key"),
        ssl_password="key-secret",
    )
    bootstrap = mutual_broker.bootstrap_for("SSL")

    async def run() -> list[bytes | None]:
        async with LockgateProducer(bootstrap, security=security) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, f"lg{i}".encode(), partition=0)
        async with LockgateConsumer(
            bootstrap, security=security, auto_offset_reset="earliest"
        ) as consumer:
            from lockgate.client.cluster import TopicPartition

            consumer.assign([TopicPartition(topic, 0)])
            values: list[bytes | None] = []
            async with asyncio.timeout(30):
                while len(values) < 10:
                    values.extend(m.value for m in await consumer.poll(timeout_ms=500))
            return values

    assert asyncio.run(run()) == [f"lg{i}".encode() for i in range(10)]


def test_lockgate_sync_facades_take_kafka_property_names(
    mutual_broker: BrokerProcess, pki: Pki
) -> None:
    topic = _topic()
    config = {**_ssl_config(pki, mutual_broker), **_client_cert(pki)}
    producer = SyncProducer(config)
    try:
        producer.produce(topic, b"sync", partition=0)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    consumer = SyncConsumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while not values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                values.append(message.value)
    finally:
        consumer.close()
    assert values == [b"sync"]


# ------------------------------------------------------------------------------------------
# Refusals


def _refused(config: dict[str, str]) -> str:
    """Produces one record with confluent-kafka; returns the delivery error (the test fails
    if the record was delivered)."""
    producer = Producer({**config, "message.timeout.ms": "4000", "log_level": "0"})
    errors: list[str] = []
    producer.produce(_topic(), b"x", on_delivery=lambda err, _msg: errors.append(str(err)))
    producer.flush(15)
    assert errors and errors[0] != "None", "the record was delivered"
    return errors[0]


def test_client_auth_required_refuses_a_client_without_a_certificate(
    mutual_broker: BrokerProcess, pki: Pki
) -> None:
    before = len(mutual_broker.log().splitlines())
    _refused(_ssl_config(pki, mutual_broker))
    lines = _wait_for_lines(mutual_broker, before, 1)
    assert lines and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in lines[0]
    assert "Traceback" not in "\n".join(mutual_broker.log().splitlines()[before:])
    # the plaintext listener and certified clients are unaffected
    values = _confluent_round_trip(
        {**_ssl_config(pki, mutual_broker), **_client_cert(pki)}, _topic(), 5
    )
    assert len(values) == 5


@pytest.mark.parametrize("certificate", ["client-other", "client-expired"])
def test_client_auth_required_refuses_an_untrusted_or_expired_client_certificate(
    mutual_broker: BrokerProcess, pki: Pki, certificate: str
) -> None:
    before = len(mutual_broker.log().splitlines())
    _refused({**_ssl_config(pki, mutual_broker), **_client_cert(pki, certificate)})
    lines = _wait_for_lines(mutual_broker, before, 1)
    assert lines, "the broker logged no refused handshake"
    expected = "certificate has expired" if certificate == "client-expired" else "unable to get"
    assert expected in lines[0]
    assert "Traceback" not in "\n".join(mutual_broker.log().splitlines()[before:])


def test_lockgate_client_without_a_certificate_is_refused(
    mutual_broker: BrokerProcess, pki: Pki
) -> None:
    security = ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.ca)

    async def run() -> None:
        async with LockgateProducer(
            mutual_broker.bootstrap_for("SSL"), security=security, request_timeout_ms=5000
        ) as producer:
            await producer.send_and_wait(_topic(), b"x")

    with pytest.raises(LockgateKafkaError):
        asyncio.run(run())


def test_a_client_trusting_another_ca_refuses_the_broker(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    error = _refused({**_ssl_config(pki, tls_broker), "ssl.ca.location": pki.other_ca})
    assert "Local: " in error or "SSL" in error or "transport" in error.lower()
    security = ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.other_ca)

    async def run() -> None:
        async with LockgateProducer(
            tls_broker.bootstrap_for("SSL"), security=security, request_timeout_ms=5000
        ):
            pass

    with pytest.raises(LockgateKafkaError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(run())


def test_a_broker_with_an_expired_certificate_is_refused(pki: Pki, tmp_path: Path) -> None:
    settings = {
        **pki.server_settings("none"),
        "ssl.keystore.location": pki.path("server-expired.pem"),
    }
    broker = _start(tmp_path, settings)
    try:
        security = ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.ca)

        async def run() -> None:
            async with LockgateProducer(
                broker.bootstrap_for("SSL"), security=security, request_timeout_ms=5000
            ):
                pass

        with pytest.raises(LockgateKafkaError, match="certificate has expired"):
            asyncio.run(run())
        _refused(_ssl_config(pki, broker))
    finally:
        broker.kill()


def test_a_plaintext_client_on_the_ssl_listener_is_refused_in_one_line(
    tls_broker: BrokerProcess,
) -> None:
    before = len(tls_broker.log().splitlines())
    with pytest.raises(KafkaException):
        admin = AdminClient(
            {"bootstrap.servers": tls_broker.bootstrap_for("SSL"), "log_level": "0"}
        )
        admin.list_topics(timeout=3)
    lines = _wait_for_lines(tls_broker, before, 1)
    assert lines
    assert "Traceback" not in "\n".join(tls_broker.log().splitlines()[before:])
