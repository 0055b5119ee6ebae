# client/properties.py — the blocking facades' configuration: a confluent-style dict of Kafka
# property names becomes the keyword arguments of the asyncio client inside. Written once for
# the producer's and the consumer's facade: the security properties (security_options.py), the
# connection properties every client takes, and the refusal of a property a facade does not know.
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lockgate.client.security_options import SECURITY_PROPERTIES, security_from_properties

# Kafka property → (keyword of the asyncio client, conversion).
PropertyTable = Mapping[str, tuple[str, Callable[[Any], Any]]]

# What every client needs to reach the cluster (ClusterClient in cluster.py takes them).
CONNECTION_PROPERTIES: PropertyTable = {
    "bootstrap.servers": ("bootstrap_servers", str),
    "client.id": ("client_id", str),
    "request.timeout.ms": ("request_timeout_ms", int),
}


def options_from_properties(
    config: Mapping[str, Any],
    properties: PropertyTable,
    *,
    unknown: str,
    name_bad_values: bool,
) -> dict[str, Any]:
    """The keyword arguments for `config`: `security` when any security property is given,
    and each other property converted through `properties`. A property missing from the table
    raises ValueError(f"{unknown} {name!r}"). `name_bad_values`: a value its conversion refuses
    raises ValueError naming the property (otherwise the conversion's own error goes through:
    the two facades have always differed there)."""
    options: dict[str, Any] = {}
    security = security_from_properties(config)
    if security is not None:
        options["security"] = security
    for name, value in config.items():
        if name in SECURITY_PROPERTIES:
            continue
        entry = properties.get(name)
        if entry is None:
            raise ValueError(f"{unknown} {name!r}")
        keyword, convert = entry
        if not name_bad_values:
            options[keyword] = convert(value)
            continue
        try:
            options[keyword] = convert(value)
        except (KeyError, ValueError, TypeError):
            raise ValueError(f"bad value {value!r} for {name}") from None
    return options
