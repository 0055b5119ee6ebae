# The SCRAM credential store: user → {mechanism name → ScramCredential}, one JSON document
# (lockgate.storage.documents): a single node's storage engine, or a cluster's etcd key read
# afresh by every broker on each authentication (a change through one broker is seen by all at
# once). A change is a pure function of the current users, retried on a lost race.
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockgate.protocol.errors import ErrorCode
from lockgate.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
)
from lockgate.storage.documents import Document, EtcdDocument, LocalDocument, parse_cluster_url

if TYPE_CHECKING:
    from lockgate.storage.engine import StorageEngine

Users = dict[str, dict[str, ScramCredential]]
Change = Callable[[Users], Users]

DOCUMENT = "scram-credentials.json"  # the storage engine's file
_FORMAT_VERSION = 1


def encode_users(users: Users) -> bytes:
    document = {
        "version": _FORMAT_VERSION,
        "users": {
            user: {mechanism: credential.to_json() for mechanism, credential in entries.items()}
            for user, entries in sorted(users.items())
            if entries
        },
    }
    return json.dumps(document, sort_keys=True).encode()


def decode_users(raw: bytes | None) -> Users:
    if not raw:
        return {}
    document = json.loads(raw)
    if document.get("version") != _FORMAT_VERSION:
        raise ValueError(f"SCRAM credentials in format {document.get('version')!r}, not 1")
    return {
        str(user): {
            str(mechanism): ScramCredential.from_json(credential)
            for mechanism, credential in entries.items()
        }
        for user, entries in document["users"].items()
    }


def copy_users(users: Users) -> Users:
    """A copy a change may edit freely (credentials themselves are immutable)."""
    return {user: dict(entries) for user, entries in users.items()}


class CredentialStore:
    """The users as one document; every read goes to it afresh (in a cluster, to etcd:
    authentications are rare next to requests, and a cached copy would let a deleted user in
    for a while)."""

    def __init__(self, document: Document) -> None:
        self.document = document

    async def start(self) -> None:
        await self.document.start()

    async def close(self) -> None:
        await self.document.close()

    async def credentials(self, user: str) -> dict[str, ScramCredential]:
        """The user's credentials by mechanism name ({} for an unknown user)."""
        return (await self.users()).get(user, {})

    async def users(self) -> Users:
        return decode_users(await self.document.read())

    async def change(self, change: Change) -> Users:
        """Applies `change` (pure: it may run more than once) atomically; returns the result."""

        def compute(data: bytes | None) -> bytes | None:
            current = decode_users(data)
            changed = change(copy_users(current))
            return None if changed == current else encode_users(changed)

        return decode_users(await self.document.change(compute))


class LocalCredentialStore(CredentialStore):
    """A single node: one file in the broker's storage engine."""

    def __init__(self, storage: StorageEngine) -> None:
        super().__init__(LocalDocument(storage, DOCUMENT))


class EtcdCredentialStore(CredentialStore):
    """A cluster: key /lockgate/<namespace>/scram_credentials, read on every use."""

    def __init__(self, endpoints: Sequence[str], namespace: str) -> None:
        super().__init__(EtcdDocument(endpoints, namespace, "scram_credentials", watch=False))

    @classmethod
    def from_url(cls, url: str) -> EtcdCredentialStore:
        return cls(*parse_cluster_url(url))


def open_credential_store(storage: StorageEngine, cluster_url: str) -> CredentialStore:
    """The cluster's store when `cluster_url` (lockgate.cluster) is set, else the node's."""
    if cluster_url:
        return EtcdCredentialStore.from_url(cluster_url)
    return LocalCredentialStore(storage)


# -- Describe/AlterUserScramCredentials semantics (Kafka's, pure) --------------------------------


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int  # Kafka's SCRAM type code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def _check_name_and_mechanism(user: str, mechanism: int) -> UserResult | None:
    if not user:
        return UserResult(user, ErrorCode.unacceptable_credential, "Username must not be empty")
    if ScramMechanism.by_type(mechanism) is None:
        return UserResult(user, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def alter(
    users: Users, deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]
) -> tuple[Users, list[UserResult]]:
    """AlterUserScramCredentials as Kafka's controller does it: a user named twice in one
    request (in either list) is DUPLICATE_RESOURCE and nothing of that user changes; an empty
    name UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations
    outside 4096..16384 UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist
    RESOURCE_NOT_FOUND. Everything else applies, all at once. Returns the new users and one
    result per user named."""
    errors: dict[str, UserResult] = {}
    to_delete: dict[str, Deletion] = {}
    to_upsert: dict[str, Upsertion] = {}
    duplicate = "A user credential cannot be altered twice in the same request"
    for deletion in deletions:
        if deletion.user in errors:
            continue
        if to_delete.pop(deletion.user, None) is not None:
            errors[deletion.user] = UserResult(
                deletion.user, ErrorCode.duplicate_resource, duplicate
            )
            continue
        failure = _check_name_and_mechanism(deletion.user, deletion.mechanism)
        mechanism = ScramMechanism.by_type(deletion.mechanism)
        if failure is None and (
            mechanism is None or mechanism.mechanism_name not in users.get(deletion.user, {})
        ):
            failure = UserResult(
                deletion.user,
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        if failure is not None:
            errors[deletion.user] = failure
        else:
            to_delete[deletion.user] = deletion
    for upsertion in upsertions:
        if upsertion.user in errors:
            continue
        if (
            to_delete.pop(upsertion.user, None) is not None
            or to_upsert.pop(upsertion.user, None) is not None
        ):
            errors[upsertion.user] = UserResult(
                upsertion.user, ErrorCode.duplicate_resource, duplicate
            )
            continue
        failure = _check_name_and_mechanism(upsertion.user, upsertion.mechanism)
        if failure is None and upsertion.iterations < MIN_ITERATIONS:
            failure = UserResult(upsertion.user, ErrorCode.unacceptable_credential,
                                 "Too few iterations")  # fmt: skip
        elif failure is None and upsertion.iterations > MAX_ITERATIONS:
            failure = UserResult(upsertion.user, ErrorCode.unacceptable_credential,
                                 "Too many iterations")  # fmt: skip
        if failure is not None:
            errors[upsertion.user] = failure
        else:
            to_upsert[upsertion.user] = upsertion
    changed = copy_users(users)
    results: list[UserResult] = []
    for deletion in to_delete.values():
        mechanism = ScramMechanism.by_type(deletion.mechanism)
        assert mechanism is not None
        entries = changed.get(deletion.user, {})
        entries.pop(mechanism.mechanism_name, None)
        if not entries:
            changed.pop(deletion.user, None)
        results.append(UserResult(deletion.user))
    for upsertion in to_upsert.values():
        mechanism = ScramMechanism.by_type(upsertion.mechanism)
        assert mechanism is not None
        changed.setdefault(upsertion.user, {})[mechanism.mechanism_name] = (
            credential_from_salted_password(
                mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
        )
        results.append(UserResult(upsertion.user))
    results.extend(errors.values())
    return changed, results


@dataclass(frozen=True, slots=True)
class Described:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism type code, iterations)


def describe(users: Users, names: Sequence[str] | None) -> list[Described]:
    """DescribeUserScramCredentials: every user when `names` is None or empty; a name asked
    twice is DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND."""
    wanted: dict[str, bool] = {}  # name → asked more than once
    for name in names if names else sorted(users):
        wanted[name] = name in wanted
    results = []
    for name, twice in wanted.items():
        if twice:
            results.append(Described(name, ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {name}"))  # fmt: skip
            continue
        entries = users.get(name, {})
        found = tuple(
            (mechanism.type_code, entries[mechanism.mechanism_name].iterations)
            for mechanism in ScramMechanism
            if mechanism.mechanism_name in entries
        )
        if not found:
            results.append(Described(name, ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {name}"))  # fmt: skip
        else:
            results.append(Described(name, credentials=found))
    return results
