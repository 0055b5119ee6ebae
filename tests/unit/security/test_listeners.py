"""Listeners by name, their protocols, advertised addresses and what is refused; per-listener
endpoints in broker registrations; the inter-broker ClientSecurity; JAAS parsing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.cluster.membership import on_listener
from lockgate.cluster.metadata import BrokerRegistration, Endpoint
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.security.jaas import JaasError, client_login, parse_jaas
from lockgate.security.listeners import check_properties, inter_broker_listener, parse_listeners
from lockgate.security.session import SecurityProtocol
from lockgate.server.inter_broker import inter_broker_security
from tests.support.tls import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def config(**values: str) -> BrokerConfig:
    return BrokerConfig({key.replace("_", "."): value for key, value in values.items()})


def test_listeners_with_protocols_and_advertised_addresses() -> None:
    given = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093,CLIENT://0.0.0.0:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CLIENT:SASL_SSL",
            "advertised.listeners": "SSL://broker.example:19093,CLIENT://public.example:443",
        }
    )
    listeners = parse_listeners(given)
    assert [(item.name, item.protocol) for item in listeners] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT),
        ("SSL", SecurityProtocol.SSL),
        ("CLIENT", SecurityProtocol.SASL_SSL),
    ]
    assert [(item.advertised_host, item.advertised_port) for item in listeners] == [
        ("127.0.0.1", 9092),
        ("broker.example", 19093),
        ("public.example", 443),
    ]
    assert listeners[1].host == ""  # every interface


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"listeners": "FOO://127.0.0.1:9092"}, "FOO has no security protocol"),
        (
            {"listeners": "A://127.0.0.1:9092", "listener.security.protocol.map": "A:FOO"},
            "unknown security protocol",
        ),
        ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "names a listener twice"),
        ({"advertised.listeners": "SSL://h:1"}, "not in listeners"),
        ({"listeners": "127.0.0.1:notaport"}, "is not NAME://HOST:PORT"),
        ({"some.unknown.property": "1"}, "unknown broker property"),
        ({"listener.name.nope.ssl.client.auth": "required"}, "no listener named NOPE"),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "GSSAPI"},
            "GSSAPI",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "OAUTHBEARER"},
            "OAUTHBEARER",
        ),
        ({"inter.broker.listener.name": "INTERNAL"}, "not in listeners"),
        ({"security.inter.broker.protocol": "SSL"}, "no listener uses"),
    ],
)
def test_what_is_not_served_is_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_properties(BrokerConfig(settings))


def test_the_broker_properties_behind_group_configs_are_served() -> None:
    """Kafka's broker-wide defaults of share and streams group configs (what a group without
    its own value gets, and the bounds of a group's value) may be set on the broker."""
    settings = {
        "group.share.record.lock.duration.ms": "5000",
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.delivery.count.limit": "3",
        "group.streams.num.standby.replicas": "1",
    }
    check_properties(BrokerConfig(settings))


def test_the_inter_broker_listener_by_name_or_by_protocol() -> None:
    two = "PLAINTEXT://h:1,SSL://h:2"
    by_name = BrokerConfig({"listeners": two, "inter.broker.listener.name": "ssl"})
    assert inter_broker_listener(by_name, parse_listeners(by_name)).name == "SSL"
    by_protocol = BrokerConfig({"listeners": two, "security.inter.broker.protocol": "SSL"})
    assert inter_broker_listener(by_protocol, parse_listeners(by_protocol)).name == "SSL"
    default = BrokerConfig({"listeners": two})
    assert inter_broker_listener(default, parse_listeners(default)).name == "PLAINTEXT"


# ------------------------------------------------------------------------------------------
# Endpoints per listener


def test_a_registration_carries_every_listener_and_decodes_old_ones() -> None:
    registration = BrokerRegistration(
        1,
        "10.0.0.1",
        9092,
        incarnation="x",
        endpoints=(Endpoint("PLAINTEXT", "10.0.0.1", 9092), Endpoint("SSL", "public", 9093)),
    )
    decoded = BrokerRegistration.decode(registration.encode())
    assert decoded == registration
    ssl_view = decoded.on_listener("SSL")
    assert ssl_view is not None and (ssl_view.host, ssl_view.port) == ("public", 9093)
    assert decoded.on_listener("SASL_SSL") is None
    old = b'{"node_id": 2, "host": "h", "port": 1, "rack": null, "incarnation": "y"}'
    legacy = BrokerRegistration.decode(old)
    assert legacy.endpoints == ()
    assert legacy.on_listener("SSL") == legacy  # its one address serves every listener


def test_brokers_without_the_listener_are_left_out() -> None:
    both = BrokerRegistration(
        0, "h", 1, endpoints=(Endpoint("PLAINTEXT", "h", 1), Endpoint("SSL", "h", 2))
    )
    plain_only = BrokerRegistration(1, "h", 3, endpoints=(Endpoint("PLAINTEXT", "h", 3),))
    assert [(b.node_id, b.port) for b in on_listener([both, plain_only], "SSL")] == [(0, 2)]
    assert [(b.node_id, b.port) for b in on_listener([both, plain_only], "PLAINTEXT")] == [
        (0, 1),
        (1, 3),
    ]


# ------------------------------------------------------------------------------------------
# Inter-broker security


def test_inter_broker_plaintext_needs_nothing() -> None:
    assert inter_broker_security(BrokerConfig({"listeners": "PLAINTEXT://h:1"})) is None


def test_inter_broker_ssl_uses_the_truststore_and_presents_the_keystore(pki: Pki) -> None:
    settings = {
        "listeners": "PLAINTEXT://h:1,INTERNAL://h:2",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        **pki.server_settings("required", prefix="listener.name.internal."),
    }
    security = inter_broker_security(BrokerConfig(settings))
    assert security is not None and security.security_protocol is SecurityProtocol.SSL
    context = security.ssl_context
    assert context is not None and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "Lockgate Test CA"),),)
    ]
    without_identification = BrokerConfig({**settings, "ssl.endpoint.identification.algorithm": ""})
    security = inter_broker_security(without_identification)
    assert security is not None and security.ssl_context is not None
    assert not security.ssl_context.check_hostname


def test_inter_broker_sasl_takes_the_mechanism_and_the_brokers_login(pki: Pki) -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="b-secret";'
    )
    settings = {
        "listeners": "SASL_SSL://h:1",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas,
        **pki.server_settings("none"),
    }
    security = inter_broker_security(BrokerConfig(settings))
    assert security is not None
    assert (security.security_protocol, security.sasl_mechanism) == (
        SecurityProtocol.SASL_SSL,
        "SCRAM-SHA-256",
    )
    assert (security.sasl_username, security.sasl_password) == ("broker", "b-secret")
    assert security.ssl_context is not None
    missing = {k: v for k, v in settings.items() if "jaas" not in k}
    with pytest.raises(ConfigError, match=r"scram-sha-256\.sasl\.jaas\.config"):
        inter_broker_security(BrokerConfig(missing))
    disabled = {**settings, "sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ConfigError, match="not enabled"):
        inter_broker_security(BrokerConfig(disabled))


# ------------------------------------------------------------------------------------------
# JAAS


def test_jaas_scram_and_plain_logins() -> None:
    login = client_login(
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\"w;d";',
        "SCRAM-SHA-512",
    )
    assert (login.username, login.password) == ("alice", 'p"w;d')
    plain = client_login(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        "username=bob password='x y';",
        "PLAIN",
    )
    assert (plain.username, plain.password) == ("bob", "x y")
    broker = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="a" user_admin="a" user_alice="s";'
    )
    assert broker[0].options["user_alice"] == "s"


@pytest.mark.parametrize(
    ("text", "mechanism", "message"),
    [
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="a" password="b";',
            "SCRAM-SHA-256",
            "does not log in with",
        ),
        (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
            "PLAIN",
            "not served",
        ),
        (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";',
            "PLAIN",
            "needs username and password",
        ),
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule maybe a=b;",
            "PLAIN",
            "not a login module flag",
        ),
        (
            'org.apache.kafka.common.security.plain.PlainLoginModule required a="b',
            "PLAIN",
            "not closed",
        ),
        ("", "PLAIN", "empty"),
    ],
)
def test_jaas_refusals(text: str, mechanism: str, message: str) -> None:
    with pytest.raises(JaasError, match=message):
        client_login(text, mechanism)


def test_a_missing_keystore_names_the_listener(tmp_path: Path) -> None:
    # a PEM keystore that does not exist is a ConfigError naming the listener
    settings = {"listeners": "SSL://h:1", "ssl.keystore.location": str(tmp_path / "none.pem")}
    from lockgate.security.tls import server_context

    given = BrokerConfig(settings)
    with pytest.raises(ConfigError, match="listener SSL"):
        server_context(given, parse_listeners(given)[0])


# ------------------------------------------------------------------------------------------
# `lockgate serve` refuses what it does not serve: a clear message, a non-zero exit


def _serve(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(tmp_path / "d")]
    for item in settings:
        command += ["--set", item]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["listeners=FOO://127.0.0.1:0"], "listener FOO has no security protocol"),
        (
            ["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=GSSAPI"],
            "SASL mechanism GSSAPI (listener SASL_PLAINTEXT) is not served",
        ),
        (
            ["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=OAUTHBEARER"],
            "OAUTHBEARER",
        ),
        (["ssl.keystore.filename=x"], "unknown broker property 'ssl.keystore.filename'"),
        (["listeners=SSL://127.0.0.1:0"], "set ssl.keystore.location"),
        (
            ["listeners=SSL://127.0.0.1:0", "ssl.keystore.location=/nonexistent/keystore.pem"],
            "ssl.keystore (listener SSL)",
        ),
        (
            ["listeners=SSL://127.0.0.1:0", "ssl.keystore.type=JKS"],
            "ssl.keystore.type=JKS (listener SSL) is not served",
        ),
    ],
)
def test_serve_refuses_what_it_does_not_serve(
    tmp_path: Path, settings: list[str], message: str
) -> None:
    result = _serve(tmp_path, *settings)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert message in output, output
    assert "Traceback" not in output
