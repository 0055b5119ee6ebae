# client/security_options.py — ClientSecurity from the property names other Kafka clients use,
# so that a configuration written for them works unchanged: the Java client's (security.protocol,
# ssl.truststore.location, ssl.keystore.location, ssl.key.password, sasl.mechanism,
# sasl.jaas.config; PEM stores only) and librdkafka's (ssl.ca.location, ssl.certificate.location,
# ssl.key.location, sasl.mechanisms, sasl.username, sasl.password). The sync facades and the
# Spark connector read them through this one function; anything unusable raises ValueError.
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockgate.client.security import ClientSecurity
from lockgate.security.jaas import JaasError, client_login
from lockgate.security.session import SecurityProtocol

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

SECURITY_PROPERTIES = frozenset(
    {
        "security.protocol",
        # Java client
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.jaas.config",
        # librdkafka
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "enable.ssl.certificate.verification",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
    }
)


def security_from_properties(config: Mapping[str, Any]) -> ClientSecurity | None:
    """The ClientSecurity the properties describe, None when none of them is given (the
    connections stay PLAINTEXT). Other keys of `config` are ignored."""
    given = {k: str(v) for k, v in config.items() if k in SECURITY_PROPERTIES and v is not None}
    if not given:
        return None
    raw_protocol = given.get("security.protocol", "PLAINTEXT").upper()
    try:
        protocol = SecurityProtocol(raw_protocol)
    except ValueError:
        served = ", ".join(p.value for p in SecurityProtocol)
        raise ValueError(f"security.protocol={raw_protocol!r}: use one of {served}") from None
    for kind in ("ssl.truststore.type", "ssl.keystore.type"):
        if given.get(kind, "PEM").upper() != "PEM":
            raise ValueError(
                f"{kind}={given[kind]}: lockgate's client reads PEM files only (convert a JKS "
                "or PKCS12 store with keytool / openssl pkcs12 -nodes)"
            )
    cafile = given.get("ssl.ca.location") or given.get("ssl.truststore.location")
    certfile = given.get("ssl.certificate.location") or given.get("ssl.keystore.location")
    # a Java PEM keystore holds the key beside the certificate chain
    keyfile = given.get("ssl.key.location")
    password = given.get("ssl.key.password") or given.get("ssl.keystore.password")
    identification = given.get("ssl.endpoint.identification.algorithm", "https").lower()
    verify = given.get("enable.ssl.certificate.verification", "true").lower() != "false"
    if not verify:
        raise ValueError(
            "enable.ssl.certificate.verification=false is not served: the broker's "
            "certificate is always checked (give ssl.ca.location)"
        )
    mechanism = (given.get("sasl.mechanism") or given.get("sasl.mechanisms") or "PLAIN").upper()
    username, secret = given.get("sasl.username"), given.get("sasl.password")
    if protocol.uses_sasl:
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"sasl.mechanism={mechanism} is not served; use {', '.join(SASL_MECHANISMS)}"
            )
        if "sasl.jaas.config" in given:
            try:
                login = client_login(given["sasl.jaas.config"], mechanism)
            except JaasError as exc:
                raise ValueError(str(exc)) from None
            username, secret = login.username, login.password
        if username is None or secret is None:
            raise ValueError(
                f"security.protocol={protocol.value} needs credentials: sasl.jaas.config, or "
                "sasl.username and sasl.password"
            )
    return ClientSecurity(
        security_protocol=protocol,
        ssl_cafile=cafile,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        ssl_password=password,
        ssl_check_hostname=identification == "https",
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=secret,
    )
