# How this broker secures its own connections to the other brokers of its cluster (replica
# fetchers, transaction markers and verification): the inter-broker listener's protocol, TLS
# from that listener's ssl.* properties (truststore to check the peer, keystore presented as
# the client certificate) and SASL with sasl.mechanism.inter.broker.protocol and the broker's
# own login from listener.name.<listener>.<mechanism>.sasl.jaas.config (or sasl.jaas.config).
# One function builds it, at startup, so that a broker that could not reach its peers refuses
# to start instead of failing on the first fetch.
from __future__ import annotations

from lockgate.client.security import ClientSecurity
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.security.jaas import JaasError, client_login
from lockgate.security.listeners import (
    Listener,
    enabled_mechanisms,
    inter_broker_listener,
    listener_property,
    parse_listeners,
)
from lockgate.security.tls import inter_broker_context


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """The ClientSecurity of connections to other brokers' inter-broker listener; None when
    that listener is PLAINTEXT. Raises ConfigError when it cannot be built."""
    listener = inter_broker_listener(config, parse_listeners(config))
    protocol = listener.protocol
    if not protocol.uses_tls and not protocol.uses_sasl:
        return None
    context = inter_broker_context(config, listener) if protocol.uses_tls else None
    if not protocol.uses_sasl:
        return ClientSecurity(protocol, ssl_context=context)
    mechanism, username, password = _sasl_login(config, listener)
    return ClientSecurity(
        protocol,
        ssl_context=context,
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=password,
    )


def _sasl_login(config: BrokerConfig, listener: Listener) -> tuple[str, str, str]:
    mechanism = config.get("sasl.mechanism.inter.broker.protocol").strip().upper()
    if mechanism not in enabled_mechanisms(config, listener.name):
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on the "
            f"inter-broker listener {listener.name} (sasl.enabled.mechanisms)"
        )
    specific = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.values.get(specific) or listener_property(
        config, listener.name, "sasl.jaas.config"
    )
    if not text:
        raise ConfigError(
            f"the inter-broker listener {listener.name} uses SASL: set {specific} to the "
            "broker's own login (username and password)"
        )
    try:
        login = client_login(text, mechanism)
    except JaasError as exc:
        raise ConfigError(f"{specific}: {exc}") from None
    assert login.username is not None and login.password is not None  # client_login checks
    return mechanism, login.username, login.password
