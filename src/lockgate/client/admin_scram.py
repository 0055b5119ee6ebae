# client/admin_scram.py — SCRAM credentials as Kafka's Admin manages them (KIP-554): describe
# which mechanisms and iterations users have, and set or delete credentials. The password never
# travels: the client salts and hashes it (Hi() of RFC 5802) and sends the salted password.
# Any broker answers (in a cluster every broker reads and writes the same store).
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lockgate.client.cluster import Cluster
from lockgate.client.errors import error_for, raise_for
from lockgate.protocol.api import ApiKey
from lockgate.security.scram import MIN_ITERATIONS, ScramMechanism, new_salt


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """Set `user`'s credential for `mechanism` from `password`."""

    user: str
    password: str
    mechanism: str = "SCRAM-SHA-256"
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = None  # None: 32 random bytes


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: str = "SCRAM-SHA-256"


def _mechanism(name: str) -> ScramMechanism:
    mechanism = ScramMechanism.by_name(name)
    if mechanism is None:
        raise ValueError(f"{name} is not a SCRAM mechanism (SCRAM-SHA-256, SCRAM-SHA-512)")
    return mechanism


async def describe_user_scram_credentials(
    cluster: Cluster, users: Iterable[str] | None = None
) -> dict[str, list[ScramCredentialInfo]]:
    """Every user's credentials (users None), or the named users' (an unknown one raises
    ResourceNotFoundError)."""
    connection = await cluster.any_connection()
    wanted = None if users is None else [{"name": name} for name in users]
    response = await connection.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": wanted})
    raise_for(response.error_code, response.error_message, "DescribeUserScramCredentials")
    result: dict[str, list[ScramCredentialInfo]] = {}
    for item in response.results:
        raise_for(item.error_code, item.error_message, f"user {item.user}")
        result[item.user] = [
            ScramCredentialInfo(
                scram.mechanism_name if (scram := ScramMechanism.by_type(info.mechanism)) else
                f"unknown mechanism {info.mechanism}",
                int(info.iterations),
            )
            for info in item.credential_infos
        ]  # fmt: skip
    return result


async def alter_user_scram_credentials(
    cluster: Cluster, alterations: Sequence[ScramUpsertion | ScramDeletion]
) -> None:
    """Applies the alterations; raises the first user's error (the others still applied,
    as Kafka applies every user that has no error)."""
    deletions = []
    upsertions = []
    for item in alterations:
        mechanism = _mechanism(item.mechanism)
        if isinstance(item, ScramDeletion):
            deletions.append({"name": item.user, "mechanism": mechanism.type_code})
            continue
        salt = item.salt if item.salt is not None else new_salt()
        salted = await asyncio.to_thread(
            mechanism.salted_password, item.password, salt, item.iterations
        )
        upsertions.append(
            {
                "name": item.user,
                "mechanism": mechanism.type_code,
                "iterations": item.iterations,
                "salt": salt,
                "salted_password": salted,
            }
        )
    connection = await cluster.any_connection()
    response = await connection.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": deletions, "upsertions": upsertions}
    )
    for result in response.results:
        if result.error_code != 0:
            raise error_for(result.error_code, result.error_message, f"user {result.user}")
