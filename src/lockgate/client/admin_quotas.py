# client/admin_quotas.py — client quotas as Kafka's Admin offers them (KIP-546): describe the
# quota entities that match a filter, and set or remove quota keys of entities. An entity maps
# entity types ("user", "client-id") to a name, None being the type's default (<default>).
# Any broker answers (in a cluster every broker reads and writes the same store).
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockgate.client.cluster import Cluster
from lockgate.client.errors import raise_for
from lockgate.protocol.api import ApiKey

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@dataclass(frozen=True, slots=True)
class QuotaFilterComponent:
    """One entity type's condition: `exact(type, name)`, `default(type)` or `any(type)`."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def exact(cls, entity_type: str, name: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_EXACT, name)

    @classmethod
    def default(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT)

    @classmethod
    def any(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_ANY)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Keys to set (key → value) and keys to remove, of one entity."""

    entity: Mapping[str, str | None]
    set_quotas: Mapping[str, float] = field(default_factory=dict)
    remove_quotas: Collection[str] = ()


@dataclass(frozen=True, slots=True)
class ClientQuotaEntry:
    entity: dict[str, str | None]
    values: dict[str, float]


async def describe_client_quotas(
    cluster: Cluster, components: Sequence[QuotaFilterComponent] = (), *, strict: bool = False
) -> list[ClientQuotaEntry]:
    connection = await cluster.any_connection()
    response = await connection.request(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        {
            "components": [
                {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
                for c in components
            ],
            "strict": strict,
        },
    )
    raise_for(response.error_code, response.error_message, "DescribeClientQuotas")
    return [
        ClientQuotaEntry(
            {e.entity_type: e.entity_name for e in entry.entity},
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in response.entries or ()
    ]


async def alter_client_quotas(
    cluster: Cluster, alterations: Sequence[ClientQuotaAlteration], *, validate_only: bool = False
) -> None:
    """Raises the error of the first entity refused (the others may have been applied)."""
    entries: list[dict[str, Any]] = []
    for alteration in alterations:
        ops = [
            {"key": k, "value": float(v), "remove": False} for k, v in alteration.set_quotas.items()
        ]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in alteration.remove_quotas]
        entries.append(
            {
                "entity": [
                    {"entity_type": kind, "entity_name": name}
                    for kind, name in alteration.entity.items()
                ],
                "ops": ops,
            }
        )
    connection = await cluster.any_connection()
    response = await connection.request(
        ApiKey.ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only}
    )
    for entry in response.entries:
        entity = ", ".join(f"{e.entity_type}={e.entity_name or '<default>'}" for e in entry.entity)
        raise_for(entry.error_code, entry.error_message, f"client quotas of {entity}")
