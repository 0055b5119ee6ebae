# client/tls.py — the TLS context lockgate's client opens SSL and SASL_SSL connections with,
# built from ClientSecurity's PEM files (or its ready-made ssl_context), once per settings value:
# every connection of a client shares it, and the files are read once.
from __future__ import annotations

import functools
import ssl

from lockgate.client.errors import KafkaConnectionError
from lockgate.client.security import ClientSecurity


@functools.lru_cache(maxsize=32)
def client_context(security: ClientSecurity) -> ssl.SSLContext:
    """Verifies the broker against ssl_cafile (the system's CAs without one) and, with
    ssl_check_hostname, that its certificate names the host connected to; presents
    ssl_certfile/ssl_keyfile when given. Raises KafkaConnectionError for unreadable files."""
    if security.ssl_context is not None:
        return security.ssl_context
    try:
        context = ssl.create_default_context(cafile=security.ssl_cafile)
        context.check_hostname = security.ssl_check_hostname
        if security.ssl_certfile:
            context.load_cert_chain(
                security.ssl_certfile, security.ssl_keyfile, password=security.ssl_password
            )
    except (OSError, ssl.SSLError) as exc:
        raise KafkaConnectionError(f"TLS settings: {exc}") from exc
    return context
