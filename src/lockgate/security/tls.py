# TLS for SSL and SASL_SSL listeners through Python's ssl module, configured with Kafka's ssl.*
# properties (per listener: listener.name.<name>.ssl.*). Keystores and truststores are PEM
# files or inline PEM (ssl.keystore.certificate.chain + ssl.keystore.key,
# ssl.truststore.certificates); JKS is refused with a clear message.
from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable

from lockgate.security.listeners import Listener, listener_property
from lockgate.server.config import BrokerConfig, ConfigError

_TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext | None:
    """The TLS context of a listener, None for one without TLS; raises ConfigError."""
    if not listener.protocol.uses_tls:
        return None

    def prop(name: str) -> str:
        return listener_property(config, listener.name, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, prop("ssl.enabled.protocols"), listener.name)
    if prop("ssl.cipher.suites"):
        try:
            context.set_ciphers(":".join(c.strip() for c in prop("ssl.cipher.suites").split(",")))
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl.cipher.suites (listener {listener.name}): {exc}") from None
    _load_keystore(context, prop, listener.name)
    client_auth = prop("ssl.client.auth").lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth={client_auth!r}: use none, requested or required")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, prop, listener.name)
    return context


def _set_versions(context: ssl.SSLContext, enabled: str, listener: str) -> None:
    versions = []
    for item in enabled.split(","):
        name = item.strip()
        if not name:
            continue
        if name not in _TLS_VERSIONS:
            raise ConfigError(
                f"ssl.enabled.protocols (listener {listener}): {name} is not served "
                f"(use {', '.join(_TLS_VERSIONS)})"
            )
        versions.append(_TLS_VERSIONS[name])
    if not versions:
        raise ConfigError(f"ssl.enabled.protocols (listener {listener}) is empty")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)


def _check_type(kind: str, value: str, listener: str) -> None:
    if value.upper() != "PEM":
        raise ConfigError(
            f"{kind}={value} (listener {listener}): lockgate reads PEM key and trust stores; "
            "convert with keytool -importkeystore / openssl pkcs12"
        )


def _load_keystore(context: ssl.SSLContext, get: Callable[[str], str], listener: str) -> None:
    _check_type("ssl.keystore.type", get("ssl.keystore.type"), listener)
    password = get("ssl.key.password") or get("ssl.keystore.password") or None
    location = get("ssl.keystore.location")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif get("ssl.keystore.certificate.chain") and get("ssl.keystore.key"):
            # inline PEM: ssl only loads chains from files, so through a private temporary one
            with tempfile.TemporaryDirectory() as directory:
                path = os.path.join(directory, "keystore.pem")
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
                    handle.write(
                        get("ssl.keystore.key") + "\n" + get("ssl.keystore.certificate.chain")
                    )
                context.load_cert_chain(path, password=password)
        else:
            raise ConfigError(
                f"listener {listener} uses TLS: set ssl.keystore.location (a PEM file with the "
                "private key and certificate chain)"
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore (listener {listener}): {exc}") from None


def _load_truststore(context: ssl.SSLContext, get: Callable[[str], str], listener: str) -> None:
    _check_type("ssl.truststore.type", get("ssl.truststore.type"), listener)
    try:
        if get("ssl.truststore.location"):
            context.load_verify_locations(cafile=get("ssl.truststore.location"))
        elif get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=get("ssl.truststore.certificates"))
        else:
            raise ConfigError(
                f"listener {listener} checks client certificates (ssl.client.auth): set "
                "ssl.truststore.location"
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.truststore (listener {listener}): {exc}") from None


def peer_principal(certificate: dict[str, object] | None) -> str | None:
    """Kafka's default SSL principal: "User:" + the client certificate's subject DN in RFC 2253
    order (most specific first), or None without a certificate."""
    if not certificate:
        return None
    subject = certificate.get("subject")
    if not isinstance(subject, tuple):
        return None
    parts = []
    for rdn in reversed(subject):
        for key, value in rdn:
            parts.append(f"{_DN_KEYS.get(key, key)}={value}")
    return "User:" + ",".join(parts)


_DN_KEYS = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
