"""TLS contexts from Kafka's ssl.* properties, the client-certificate principal, cipher names,
the handshake run by a TLS listener (one log line per refusal) and the client's TLS context."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest

from lockgate.client.security import ClientSecurity
from lockgate.client.security_options import security_from_properties
from lockgate.client.tls import client_context
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.security.listeners import parse_listeners
from lockgate.security.session import SecurityProtocol
from lockgate.security.tls import TlsAcceptor, openssl_cipher_name, peer_principal, server_context
from tests.support.tls import CLIENT_DN, PASSWORD, Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def context_for(settings: dict[str, str]) -> ssl.SSLContext:
    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", **settings})
    context = server_context(config, parse_listeners(config)[0])
    assert context is not None
    return context


def test_a_plaintext_listener_has_no_context() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert server_context(config, parse_listeners(config)[0]) is None


@pytest.mark.parametrize(
    ("client_auth", "mode"),
    [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_client_auth_modes(pki: Pki, client_auth: str, mode: ssl.VerifyMode) -> None:
    assert context_for(pki.server_settings(client_auth)).verify_mode == mode


def test_versions_and_ciphers(pki: Pki) -> None:
    context = context_for({**pki.server_settings(), "ssl.enabled.protocols": "TLSv1.2"})
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_2
    narrowed = context_for(
        {
            **pki.server_settings(),
            "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        }
    )
    tls12 = [c["name"] for c in narrowed.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    for bad, message in [
        ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.1 is not served"),
        ({"ssl.client.auth": "sometimes"}, "none, requested or required"),
        ({"ssl.cipher.suites": "NO_SUCH_CIPHER"}, "none of NO_SUCH_CIPHER"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "cannot be narrowed"),
    ]:
        with pytest.raises(ConfigError, match=message):
            context_for({**pki.server_settings(), **bad})


@pytest.mark.parametrize(
    ("iana", "openssl"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
        ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
        ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ],
)
def test_kafka_cipher_names_map_to_openssl_names(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl


@pytest.mark.parametrize(("kind", "value"), [("keystore", "JKS"), ("truststore", "PKCS12")])
def test_jks_and_pkcs12_stores_are_refused(pki: Pki, kind: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"ssl.{kind}.type={value}.*PEM"):
        context_for({**pki.server_settings("required"), f"ssl.{kind}.type": value})


def test_missing_and_broken_keystores_are_refused(pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"set ssl\.keystore\.location"):
        context_for({})
    with pytest.raises(ConfigError, match=r"ssl\.keystore"):
        context_for({"ssl.keystore.location": pki.ca})  # a certificate without its key
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location"):
        context_for(
            {"ssl.keystore.location": pki.path("server.pem"), "ssl.client.auth": "required"}
        )


def test_inline_pem_keystore_and_truststore(pki: Pki) -> None:
    with open(pki.path("server.key")) as key, open(pki.path("server.crt")) as chain:
        key_text, chain_text = key.read(), chain.read()
    with open(pki.ca) as ca:
        ca_text = ca.read()
    context = context_for(
        {
            "ssl.keystore.key": key_text,
            "ssl.keystore.certificate.chain": chain_text,
            "ssl.truststore.certificates": ca_text,
            "ssl.client.auth": "required",
        }
    )
    assert context.get_ca_certs()[0]["subject"] == ((("commonName", "Lockgate Test CA"),),)


def test_an_encrypted_key_with_ssl_key_password(pki: Pki) -> None:
    chain = pki.directory / "encrypted-keystore.pem"
    key = (pki.directory / "client_encrypted.key").read_text()
    chain.write_text(key + (pki.directory / "client.crt").read_text())
    context_for({"ssl.keystore.location": str(chain), "ssl.key.password": PASSWORD})
    with pytest.raises(ConfigError):
        context_for({"ssl.keystore.location": str(chain), "ssl.key.password": "wrong"})


# ------------------------------------------------------------------------------------------
# Principal


def test_the_principal_is_the_subject_dn_in_rfc2253_order(pki: Pki) -> None:
    decoded = ssl._ssl._test_decode_cert(pki.path("client.crt"))  # type: ignore[attr-defined]
    assert peer_principal(decoded) == f"User:{CLIENT_DN}"
    assert peer_principal(None) is None
    assert peer_principal({}) is None


def test_principal_escaping_multi_valued_rdns_and_oid_attributes() -> None:
    certificate: dict[str, object] = {
        "subject": (
            (("countryName", "SE"),),
            (("organizationName", "Acme, Inc."),),
            (("commonName", "svc"), ("userId", "42")),
            (("emailAddress", "a@b"),),
        )
    }
    assert peer_principal(certificate) == (
        "User:1.2.840.113549.1.9.1=#1603614062,CN=svc+UID=42,O=Acme\\, Inc.,C=SE"
    )


# ------------------------------------------------------------------------------------------
# The listener's handshake


async def _serve(context: ssl.SSLContext) -> tuple[asyncio.Server, int, list[str]]:
    principals: list[str] = []
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        principals.append(peer_principal(writer.get_extra_info("peercert")) or "ANONYMOUS")
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: TlsAcceptor(context, "SSL", accept, 5.0, 1 << 16, tasks), "127.0.0.1", 0
    )
    return server, server.sockets[0].getsockname()[1], principals


async def _echo(port: int, security: ClientSecurity) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(security), server_hostname="127.0.0.1"
    )
    writer.write(b"ping")
    try:
        return await asyncio.wait_for(reader.read(4), 5)
    finally:
        writer.close()


async def test_handshakes_refused_in_one_log_line_others_served(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate.security.tls")
    server, port, principals = await _serve(context_for(pki.server_settings("required")))
    async with server:
        good = ClientSecurity(
            SecurityProtocol.SSL,
            ssl_cafile=pki.ca,
            ssl_certfile=pki.path("client.crt"),
            ssl_keyfile=pki.path("client.key"),
        )
        results = await asyncio.gather(*[_echo(port, good) for _ in range(8)])
        assert results == [b"ping"] * 8
        assert principals == [f"User:{CLIENT_DN}"] * 8
        for name in ("client-expired", "client-other", None):
            bad = ClientSecurity(
                SecurityProtocol.SSL,
                ssl_cafile=pki.ca,
                ssl_certfile=pki.path(f"{name}.crt") if name else None,
                ssl_keyfile=pki.path(f"{name}.key") if name else None,
            )
            caplog.clear()
            with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
                answer = await _echo(port, bad)
                if answer != b"ping":  # TLS 1.3: the refusal arrives after the client's hello
                    raise ConnectionResetError(answer)
            for _ in range(100):
                if caplog.records:
                    break
                await asyncio.sleep(0.02)
            lines = [r for r in caplog.records if "TLS handshake" in r.getMessage()]
            assert len(lines) == 1 and lines[0].levelno == logging.WARNING
            assert lines[0].exc_info is None
        assert await _echo(port, good) == b"ping"


async def test_a_port_probe_is_not_logged(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lockgate.security.tls")
    server, port, _ = await _serve(context_for(pki.server_settings()))
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await asyncio.sleep(0.2)
        security = ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.ca)
        assert await _echo(port, security) == b"ping"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------------------------
# Client side


def test_client_context_checks_the_broker(pki: Pki) -> None:
    context = client_context(ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.ca))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    relaxed = client_context(
        ClientSecurity(SecurityProtocol.SSL, ssl_cafile=pki.ca, ssl_check_hostname=False)
    )
    assert not relaxed.check_hostname


def test_client_properties_java_and_librdkafka_names(pki: Pki) -> None:
    assert security_from_properties({"bootstrap.servers": "h:1"}) is None
    java = security_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.location": pki.ca,
            "ssl.keystore.location": pki.path("client.pem"),
            "ssl.key.password": "pw",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="u" password="p";',
        }
    )
    assert java == ClientSecurity(
        SecurityProtocol.SASL_SSL,
        ssl_cafile=pki.ca,
        ssl_certfile=pki.path("client.pem"),
        ssl_password="pw",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u",
        sasl_password="p",
    )
    librdkafka = security_from_properties(
        {
            "security.protocol": "ssl",
            "ssl.ca.location": pki.ca,
            "ssl.certificate.location": pki.path("client.crt"),
            "ssl.key.location": pki.path("client.key"),
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert librdkafka is not None
    assert (librdkafka.ssl_certfile, librdkafka.ssl_keyfile) == (
        pki.path("client.crt"),
        pki.path("client.key"),
    )
    assert not librdkafka.ssl_check_hostname


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"security.protocol": "FOO"}, "security.protocol='FOO'"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "PEM files only"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "not served"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "needs credentials"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, "always"),
    ],
)
def test_client_properties_refused(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        security_from_properties(properties)
