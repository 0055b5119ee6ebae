# The broker's listeners as Kafka names them: `listeners` (NAME://HOST:PORT, comma separated),
# `listener.security.protocol.map` (NAME:PROTOCOL), `advertised.listeners` (by name) and the
# per-listener overrides `listener.name.<name>.<property>`. Everything is checked before the
# broker binds: an unknown protocol, mechanism or property is a ConfigError, never a listener
# silently served as plaintext.
from __future__ import annotations

import re
from dataclasses import dataclass

from lockgate.config.group_configs import GROUP_BROKER_DEFAULTS
from lockgate.config.properties import (
    _ALIASES,
    BROKER_DEFAULTS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
)
from lockgate.security.session import SecurityProtocol

# SASL mechanisms lockgate serves (GSSAPI and OAUTHBEARER are not).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's class names for its ACL authorizer; both select lockgate's.
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "lockgate",
)

_PER_LISTENER = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_MECHANISM_JAAS = re.compile(r"^(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper case, as Kafka compares them
    protocol: SecurityProtocol
    host: str  # "" binds every interface
    port: int
    advertised_host: str
    advertised_port: int


def _split_endpoint(text: str, what: str) -> tuple[str, str, int]:
    """'NAME://HOST:PORT' (or 'HOST:PORT', named PLAINTEXT) → (NAME, host, port)."""
    text = text.strip()
    name, sep, address = text.partition("://")
    if not sep:
        name, address = "PLAINTEXT", text
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise ConfigError(f"{what} entry {text!r} is not NAME://HOST:PORT")
    return name.upper(), host.strip("[]"), int(port)


def protocol_map(config: BrokerConfig) -> dict[str, SecurityProtocol]:
    result: dict[str, SecurityProtocol] = {}
    for item in config.get("listener.security.protocol.map").split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        try:
            result[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            served = ", ".join(p.value for p in SecurityProtocol)
            raise ConfigError(
                f"listener.security.protocol.map: {item.strip()!r} names an unknown security "
                f"protocol (lockgate serves {served})"
            ) from None
        if not sep:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
    return result


def parse_listeners(config: BrokerConfig) -> list[Listener]:
    """The listeners in the order given; raises ConfigError on anything not served."""
    protocols = protocol_map(config)
    bound: list[tuple[str, str, int]] = []
    for item in config.get("listeners").split(","):
        if item.strip():
            bound.append(_split_endpoint(item, "listeners"))
    if not bound:
        raise ConfigError("listeners is empty")
    names = [name for name, _, _ in bound]
    if len(set(names)) != len(names):
        raise ConfigError(f"listeners names a listener twice: {config.get('listeners')!r}")
    advertised: dict[str, tuple[str, int]] = {}
    for item in config.get("advertised.listeners").split(","):
        if item.strip():
            name, host, port = _split_endpoint(item, "advertised.listeners")
            if name not in names:
                raise ConfigError(f"advertised.listeners names {name}, which is not in listeners")
            advertised[name] = (host, port)
    result = []
    for name, host, port in bound:
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"listener {name} has no security protocol: name one of "
                f"{', '.join(p.value for p in SecurityProtocol)} or map it in "
                "listener.security.protocol.map"
            )
        ad_host, ad_port = advertised.get(name, (host, port))
        result.append(Listener(name, protocol, host, port, ad_host, ad_port))
    return result


def inter_broker_listener(config: BrokerConfig, listeners: list[Listener]) -> Listener:
    """inter.broker.listener.name, else the first listener of security.inter.broker.protocol."""
    wanted = config.get("inter.broker.listener.name").upper()
    if wanted:
        found = [item for item in listeners if item.name == wanted]
        if not found:
            raise ConfigError(f"inter.broker.listener.name={wanted} is not in listeners")
        return found[0]
    protocol = config.get("security.inter.broker.protocol").upper()
    for item in listeners:
        if item.protocol.value == protocol:
            return item
    if len(listeners) == 1 and protocol == "PLAINTEXT":  # the default with one secured listener
        return listeners[0]
    raise ConfigError(f"no listener uses security.inter.broker.protocol={protocol}")


def listener_property(config: BrokerConfig, listener: str, name: str) -> str:
    """A property for one listener: listener.name.<listener>.<name>, else <name>."""
    return config.values.get(
        f"listener.name.{listener.lower()}.{name}", config.values.get(name, "")
    )


def enabled_mechanisms(config: BrokerConfig, listener: str) -> list[str]:
    raw = listener_property(config, listener, "sasl.enabled.mechanisms")
    mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"SASL mechanism {mechanism} (listener {listener}) is not served; lockgate "
                f"serves {', '.join(SASL_MECHANISMS)}"
            )
    if not mechanisms:
        raise ConfigError(f"listener {listener} uses SASL but sasl.enabled.mechanisms is empty")
    return mechanisms


def check_properties(config: BrokerConfig) -> list[Listener]:
    """Every property given must be one lockgate knows and serves; returns the listeners."""
    listeners = parse_listeners(config)
    names = {item.name.lower() for item in listeners}
    for key in config.values:
        # the broker properties behind group configs (group.share.record.lock.duration.ms...)
        # are Kafka's broker properties too: their broker-wide values are set here
        if key in BROKER_DEFAULTS or key in _ALIASES or key in TOPIC_CONFIGS:
            continue
        if key in GROUP_BROKER_DEFAULTS:
            continue
        # the object store's settings, under the remote storage manager's prefix
        if key.startswith(config.get("remote.log.storage.manager.impl.prefix")):
            continue
        per_listener = _PER_LISTENER.match(key)
        if per_listener:
            listener, inner = per_listener.groups()
            if listener not in names:
                raise ConfigError(f"{key}: there is no listener named {listener.upper()}")
            if (inner in BROKER_DEFAULTS and inner.startswith(("ssl.", "sasl.", "connections.")))\
                    or _MECHANISM_JAAS.match(inner):  # fmt: skip
                continue
        raise ConfigError(f"unknown broker property {key!r}: lockgate does not serve it")
    authorizer = config.get("authorizer.class.name")
    if authorizer and authorizer not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name={authorizer!r} is not served; use "
            f"{AUTHORIZER_CLASSES[0]} (lockgate's ACL authorizer) or leave it empty"
        )
    for item in listeners:
        if item.protocol.uses_sasl:
            enabled_mechanisms(config, item.name)
    inter_broker_listener(config, listeners)
    if config.integer("connections.max.reauth.ms") != 0:
        raise ConfigError(
            "connections.max.reauth.ms: KIP-368 re-authentication is not served; leave it at 0"
        )
    return listeners
