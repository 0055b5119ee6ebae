"""The connector passes Spark-Kafka security options through to lockgate's client:
kafka.security.protocol, kafka.ssl.truststore.location / keystore.location (PEM),
kafka.ssl.key.password, kafka.sasl.mechanism and kafka.sasl.jaas.config. The mapping is
checked without Spark; one batch write and read over an SSL listener with client certificates
required runs on the local Spark session."""

from __future__ import annotations

import asyncio
import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.client.security import ClientSecurity
from lockgate.security.session import SecurityProtocol
from lockgate.spark.options import OptionError, sink_options, source_options
from tests.conftest import SPARK_BROKER_SETTINGS
from tests.support.broker import BrokerProcess
from tests.support.tls import Pki, make_pki

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="spark" password="s3cret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_security_options_reach_source_and_sink(pki: Pki) -> None:
    given = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "t",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": pki.ca,
        "kafka.ssl.keystore.location": pki.path("client.pem"),
        "kafka.ssl.key.password": "pw",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": SCRAM_JAAS,
    }
    expected = ClientSecurity(
        SecurityProtocol.SASL_SSL,
        ssl_cafile=pki.ca,
        ssl_certfile=pki.path("client.pem"),
        ssl_password="pw",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="spark",
        sasl_password="s3cret",
    )
    source = source_options(given, streaming=False)
    assert source.security == expected
    assert sink_options(given, "prefix").security == expected
    # the options travel to Spark's executors pickled
    assert pickle.loads(pickle.dumps(source)).security == expected
    assert source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False) \
        .security is None  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kafka.security.protocol": "KERBEROS"}, "security.protocol"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}, "GSSAPI"),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": SCRAM_JAAS,
            },
            "does not log in with PLAIN",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"},
            "PEM files only",
        ),
    ],
)
def test_unusable_security_options_are_refused(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        source_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=False
        )


# ------------------------------------------------------------------------------------------
# End to end over SSL


@pytest.fixture(scope="module")
def ssl_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {
        **SPARK_BROKER_SETTINGS,
        **pki.server_settings("required", prefix="listener.name.ssl."),
    }
    broker = BrokerProcess(
        tmp_path_factory.mktemp("spark-ssl") / "data", settings, listeners=("PLAINTEXT", "SSL")
    ).start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.mark.timeout(280)
def test_spark_reads_and_writes_over_ssl_with_a_client_certificate(
    spark: Any, ssl_broker: BrokerProcess, pki: Pki
) -> None:
    source, sink = f"ssl-in-{uuid.uuid4().hex[:8]}", f"ssl-out-{uuid.uuid4().hex[:8]}"
    security = ClientSecurity(
        SecurityProtocol.SSL,
        ssl_cafile=pki.ca,
        ssl_certfile=pki.path("client.pem"),
    )
    bootstrap = ssl_broker.bootstrap_for("SSL")

    async def fill() -> None:
        async with Producer(bootstrap, security=security) as producer:
            for i in range(10):
                await producer.send_and_wait(source, f"v{i}".encode(), partition=0)

    asyncio.run(fill())
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": pki.ca,
        "kafka.ssl.keystore.location": pki.path("client.pem"),
    }
    rows = spark.read.format("lockgate").options(**options, subscribe=source).load()
    assert sorted(bytes(r.value) for r in rows.collect()) == [f"v{i}".encode() for i in range(10)]
    rows.select("value").write.format("lockgate").options(**options, topic=sink).mode(
        "append"
    ).save()

    async def written() -> list[bytes]:
        async with Consumer(bootstrap, security=security, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(sink, 0)])
            values: list[bytes] = []
            async with asyncio.timeout(30):
                while len(values) < 10:
                    values.extend(m.value or b"" for m in await c.poll(timeout_ms=500))
            return values

    assert sorted(asyncio.run(written())) == [f"v{i}".encode() for i in range(10)]
    # the connector never fell back to the plaintext port: nothing was refused on SSL either
    # (a refusal is a WARNING; a readiness probe's reset is logged at INFO)
    assert "WARNING lockgate.security.tls" not in ssl_broker.log()
