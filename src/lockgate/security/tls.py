# TLS for SSL and SASL_SSL listeners through Python's ssl module, configured with Kafka's ssl.*
# properties (per listener: listener.name.<name>.ssl.*). Keystores and truststores are PEM
# files or inline PEM (ssl.keystore.certificate.chain + ssl.keystore.key,
# ssl.truststore.certificates); JKS and PKCS12 are refused with a clear message. A TLS
# listener runs each handshake itself (TlsAcceptor), so that a refused client costs one log
# line (asyncio's own server says nothing, or a traceback) and never touches other connections.
from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from typing import cast

from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.security.listeners import Listener, listener_property

_TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
log = logging.getLogger(__name__)

# The suites TLS 1.3 always offers: Python's ssl cannot narrow them, so a list naming only
# some of them cannot be honoured and is refused.
_TLS13_SUITES = frozenset(
    ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256")
)
_IANA_SUITE = re.compile(
    r"^TLS_(?P<exchange>[A-Z0-9_]+?)_WITH_(?P<cipher>AES_(?:128|256)_(?:GCM|CBC)|"
    r"CHACHA20_POLY1305|AES_(?:128|256)_CCM)_(?P<mac>SHA|SHA256|SHA384)$"
)
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
        _set_ciphers(context, prop("ssl.cipher.suites"), listener.name)
    _load_keystore(context, prop, listener.name)
    client_auth = prop("ssl.client.auth").lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth={client_auth!r}: use none, requested or required")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, prop, listener.name)
    return context


def inter_broker_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The context this broker connects to other brokers' `listener` with, from the same
    listener's properties: their certificates checked against its truststore (the system's
    when none is set), the host checked when ssl.endpoint.identification.algorithm is https,
    and its keystore presented as the client certificate (ssl.client.auth may ask for it)."""

    def prop(name: str) -> str:
        return listener_property(config, listener.name, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, prop("ssl.enabled.protocols"), listener.name)
    if prop("ssl.cipher.suites"):
        _set_ciphers(context, prop("ssl.cipher.suites"), listener.name)
    if prop("ssl.truststore.location") or prop("ssl.truststore.certificates"):
        _load_truststore(context, prop, listener.name)
    else:
        context.load_default_certs()
    context.check_hostname = prop("ssl.endpoint.identification.algorithm").lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _load_keystore(context, prop, listener.name)
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


def openssl_cipher_name(name: str) -> str:
    """Kafka (Java) names cipher suites as IANA does, OpenSSL its own way:
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 → ECDHE-RSA-AES128-GCM-SHA256. Other names pass."""
    match = _IANA_SUITE.match(name)
    if match is None:
        return name
    exchange = match["exchange"].replace("_", "-")
    if exchange == "RSA":  # plain RSA key exchange: OpenSSL leaves the exchange out
        exchange = ""
    cipher, mac = match["cipher"], match["mac"]
    if cipher == "CHACHA20_POLY1305":
        body = "CHACHA20-POLY1305"
    else:
        _, bits, mode = cipher.split("_")
        body = f"AES{bits}-{mode}-{mac}" if mode in ("GCM", "CCM") else f"AES{bits}-{mac}"
        if mode == "CCM":
            body = f"AES{bits}-CCM"
    return f"{exchange}-{body}" if exchange else body


def _set_ciphers(context: ssl.SSLContext, suites: str, listener: str) -> None:
    names = [item.strip() for item in suites.split(",") if item.strip()]
    tls13 = {name for name in names if name in _TLS13_SUITES}
    if tls13 and tls13 != _TLS13_SUITES:
        raise ConfigError(
            f"ssl.cipher.suites (listener {listener}): TLS 1.3 suites cannot be narrowed with "
            f"Python's ssl module; name all of {', '.join(sorted(_TLS13_SUITES))} or none"
        )
    older = [openssl_cipher_name(name) for name in names if name not in _TLS13_SUITES]
    if not older:
        return
    try:
        context.set_ciphers(":".join(older))
    except ssl.SSLError:
        raise ConfigError(
            f"ssl.cipher.suites (listener {listener}): none of {', '.join(names)} is available"
        ) from None


def _check_type(kind: str, value: str, listener: str) -> None:
    kind_name = value.upper()
    if kind_name == "PEM":
        return
    if kind_name == "JKS":
        how = "keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes"
    elif kind_name == "PKCS12":
        how = "openssl pkcs12 -in STORE.p12 -nodes -out STORE.pem"
    else:
        how = "set PEM"
    raise ConfigError(
        f"{kind}={value} (listener {listener}) is not served: lockgate reads PEM key and trust "
        f"stores only; convert it ({how}) and set {kind}=PEM"
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
    """Kafka's default SSL principal: "User:" + the client certificate's subject DN as Java's
    X500Principal.getName() prints it (RFC 2253: most specific RDN first, multi-valued RDNs
    joined by "+", special characters escaped), or None without a certificate."""
    if not certificate:
        return None
    subject = certificate.get("subject")
    if not isinstance(subject, tuple):
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(_attribute(str(key), str(value)) for key, value in rdn))
    return "User:" + ",".join(rdns)


def _attribute(key: str, value: str) -> str:
    if key in _DN_KEYS:
        return f"{_DN_KEYS[key]}={_escape(value)}"
    if key in _DN_OIDS:  # Java prints attributes without an RFC 2253 keyword as OID=#DER
        oid, tag = _DN_OIDS[key]
        raw = value.encode()
        if len(raw) < 128:
            return f"{oid}=#{tag:02x}{len(raw):02x}{raw.hex()}"
    return f"{key}={_escape(value)}"


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


# RFC 2253's keywords (what X500Principal prints by name)
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
# attributes commonly in client certificates that X500Principal prints as OID=#DER:
# name → (OID, DER string tag): IA5String (0x16) and PrintableString (0x13)
_DN_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),
    "serialNumber": ("2.5.4.5", 0x13),
}


class TlsAcceptor(asyncio.Protocol):
    """The protocol of a TLS listener's server: takes the accepted TCP connection without
    reading from it (the client's hello must reach the TLS layer, not a stream buffer), runs
    the handshake, then hands the secured streams to `accept`, as asyncio.start_server would.
    A failed handshake (no, expired or untrusted client certificate, a plaintext client, a
    timeout) is logged in one line and the connection closed."""

    def __init__(
        self,
        context: ssl.SSLContext,
        listener: str,
        accept: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
        timeout_s: float,
        limit: int,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self.context = context
        self.listener = listener
        self.accept = accept
        self.timeout_s = timeout_s
        self.limit = limit
        self.tasks = tasks  # strong references to the running connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._early = bytearray()  # what arrives before the TLS layer is in place
        self._gone = False
        stream = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        stream.pause_reading()  # (uvloop may still deliver the client's hello once)
        task = asyncio.get_running_loop().create_task(self._serve(stream))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def data_received(self, data: bytes) -> None:
        self._early.extend(data)

    def eof_received(self) -> bool | None:
        self._gone = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True  # before the handshake; after it the TLS layer owns the transport

    async def _serve(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self._gone and not self._early:  # a port probe: connected and left at once
            transport.abort()
            return
        reader = asyncio.StreamReader(limit=self.limit)
        protocol = asyncio.StreamReaderProtocol(reader)
        handshake = asyncio.ensure_future(
            loop.start_tls(
                transport,
                protocol,
                self.context,
                server_side=True,
                ssl_handshake_timeout=self.timeout_s,
            )
        )
        try:
            await asyncio.sleep(0)  # start_tls has now put its TLS protocol on the transport
            # (uvloop's TLS protocol is a buffered protocol without the asyncio base class)
            tls_protocol = cast(asyncio.BufferedProtocol, transport.get_protocol())
            if self._early and not isinstance(tls_protocol, TlsAcceptor):
                # the hello that reached us first goes to the TLS layer, ahead of anything
                # else (the client sends nothing more before the server answers it)
                buffer = memoryview(tls_protocol.get_buffer(len(self._early)))
                buffer[: len(self._early)] = self._early
                tls_protocol.buffer_updated(len(self._early))
                self._early.clear()
            secured = await handshake
        except (OSError, TimeoutError, EOFError) as exc:
            # a refused certificate is worth a warning; a client gone before its hello (a port
            # probe, a health check) is not
            level = logging.WARNING if isinstance(exc, ssl.SSLError) else logging.INFO
            log.log(
                level,
                "TLS handshake with %s on listener %s failed: %s",
                address,
                self.listener,
                _reason(exc),
            )
            transport.abort()
            return
        finally:
            if not handshake.done():
                handshake.cancel()
        if secured is None:  # the client went away as the handshake ended
            return
        protocol.connection_made(secured)  # start_tls leaves that call to its caller
        writer = asyncio.StreamWriter(secured, protocol, reader, loop)
        await self.accept(reader, writer)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        verify = getattr(exc, "verify_message", None)
        return f"{exc.reason}" + (f" ({verify})" if verify else "")
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
