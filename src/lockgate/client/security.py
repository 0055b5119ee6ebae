# How lockgate's client secures its connections: Kafka's security.protocol, TLS settings
# (PEM files, as kafka-python and aiokafka name them) and SASL credentials. One value per
# client, shared by all its broker connections; None means PLAINTEXT.
from __future__ import annotations

import ssl
from dataclasses import dataclass

from lockgate.security.session import SecurityProtocol


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    # TLS (SSL, SASL_SSL): the CA file that signs the brokers' certificates (None: the
    # system's), this client's certificate and key for ssl.client.auth, and whether the
    # broker's certificate must name the host connected to (ssl.endpoint.identification).
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    ssl_check_hostname: bool = True
    ssl_context: ssl.SSLContext | None = None  # replaces all of the above when given
    # SASL (SASL_PLAINTEXT, SASL_SSL): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
