# The object store client of tiered storage (KIP-405): rolled segments are copied to an
# S3-compatible store and read back from it. One interface, two engines: S3ObjectStore (obstore,
# Rust's object_store crate, for the broker) and MemoryObjectStore (a twin for unit tests).
#
# Invariants, for every engine:
# - Nothing blocks the event loop: obstore runs requests on its own runtime's threads and
#   wakes the loop only when one completes (bench/object_store.py measures the loop's lag).
# - Keys are "/"-separated, relative to the store's prefix; `list(prefix)` matches keys that
#   start with `prefix` as a string (as S3's ListObjectsV2 does).
# - `get_range(key, start, end)` reads [start, end), cut at the object's end; a start at or
#   past the end is an error (S3 answers 416).
# - `delete` is idempotent: missing keys are not an error.
# - Every failure is an ObjectStoreError whose `retriable` says whether trying again later can
#   help (the store down, 5xx, timeouts) or not (credentials, permissions, a bad request);
#   a missing object is ObjectNotFound. Transient errors are first retried by the client, a
#   bounded number of times with backoff, before they surface.
# - The secret access key appears in no repr, message or log line.
from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    InvalidPathError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
    UnknownConfigurationKeyError,
)
from obstore.store import S3Store

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's prefix
    size: int


class ObjectStoreError(Exception):
    """An object store operation failed; `retriable` says whether a later attempt can succeed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class ObjectNotFound(ObjectStoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}", retriable=False)
        self.key = key


class ObjectStore(Protocol):
    async def put(self, key: str, data: bytes) -> None:
        """Writes the whole object at once (replacing any object at `key`)."""

    async def put_file(self, key: str, path: Path) -> None:
        """Writes a local file's contents; a large file goes up in parts (multipart upload),
        never read whole into memory."""

    async def get(self, key: str) -> bytes: ...

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object, fewer if it ends before `end`."""

    async def delete(self, keys: Sequence[str]) -> None:
        """Deletes every key; a key with no object is not an error."""

    async def list(self, prefix: str) -> list[ObjectInfo]:
        """The objects whose key starts with `prefix`, in key order."""

    async def head(self, key: str) -> ObjectInfo | None:
        """The object's size, or None when there is none."""


def check_key(key: str) -> None:
    """The keys both engines accept: object_store's paths (no empty, "." or ".." segment)."""
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise ObjectStoreError(f"invalid object key: {key!r}", retriable=False)


def _check_range(key: str, start: int, end: int) -> None:
    check_key(key)
    if start < 0 or end <= start:
        raise ObjectStoreError(f"invalid range [{start}, {end}) of {key}", retriable=False)


# --- S3 -----------------------------------------------------------------------------------

# Property names, relative to the remote storage manager's prefix (Kafka's
# remote.log.storage.manager.impl.prefix, "rsm.config." by default): the caller strips it.
PROPERTY_ENDPOINT = "s3.endpoint"
PROPERTY_BUCKET = "s3.bucket"
PROPERTY_PREFIX = "s3.prefix"
PROPERTY_REGION = "s3.region"
PROPERTY_ACCESS_KEY_ID = "s3.access.key.id"
PROPERTY_SECRET_ACCESS_KEY = "s3.secret.access.key"
PROPERTY_ALLOW_HTTP = "s3.allow.http"
PROPERTY_REQUEST_TIMEOUT_MS = "s3.request.timeout.ms"
PROPERTY_MAX_RETRIES = "s3.max.retries"

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    endpoint: str | None = None  # None: AWS itself, by region
    prefix: str = ""  # every key is stored under it ("" or e.g. "cluster-1/tiered")
    region: str = DEFAULT_REGION
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    allow_http: bool = False  # plain http endpoints (a local test server)
    request_timeout_s: float = 30.0  # one request, connect to the last byte
    connect_timeout_s: float = 5.0
    # Transient failures (connection refused or reset, 5xx, timeouts of reads) are retried
    # with exponential backoff from 100 ms up to 2 s between tries, within retry_timeout_s.
    max_retries: int = 3
    retry_timeout_s: float = 60.0

    def __repr__(self) -> str:
        secret = "<set>" if self.secret_access_key else None
        return (
            f"S3Settings(bucket={self.bucket!r}, endpoint={self.endpoint!r}, "
            f"prefix={self.prefix!r}, region={self.region!r}, "
            f"access_key_id={self.access_key_id!r}, secret_access_key={secret!r}, "
            f"allow_http={self.allow_http!r}, request_timeout_s={self.request_timeout_s!r}, "
            f"max_retries={self.max_retries!r})"
        )

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], environ: Mapping[str, str] | None = None
    ) -> S3Settings:
        """From properties (names above), falling back to the standard AWS environment
        variables for the endpoint, region and credentials."""
        env = os.environ if environ is None else environ
        bucket = properties.get(PROPERTY_BUCKET, "")
        if not bucket:
            raise ValueError(f"{PROPERTY_BUCKET} is required")
        endpoint = properties.get(PROPERTY_ENDPOINT) or env.get("AWS_ENDPOINT_URL") or None
        region = (
            properties.get(PROPERTY_REGION)
            or env.get("AWS_REGION")
            or env.get("AWS_DEFAULT_REGION")
            or DEFAULT_REGION
        )
        access_key_id = properties.get(PROPERTY_ACCESS_KEY_ID) or env.get("AWS_ACCESS_KEY_ID")
        secret = properties.get(PROPERTY_SECRET_ACCESS_KEY) or env.get("AWS_SECRET_ACCESS_KEY")
        allow_http = properties.get(PROPERTY_ALLOW_HTTP)
        timeout_ms = properties.get(PROPERTY_REQUEST_TIMEOUT_MS)
        max_retries = properties.get(PROPERTY_MAX_RETRIES)
        return cls(
            bucket=bucket,
            endpoint=endpoint,
            prefix=properties.get(PROPERTY_PREFIX, "").strip("/"),
            region=region,
            access_key_id=access_key_id or None,
            secret_access_key=secret or None,
            allow_http=(
                allow_http.lower() == "true"
                if allow_http is not None
                else bool(endpoint and endpoint.startswith("http://"))
            ),
            request_timeout_s=int(timeout_ms) / 1000 if timeout_ms else cls.request_timeout_s,
            max_retries=int(max_retries) if max_retries else cls.max_retries,
        )


# obstore's errors that no retry can cure; GenericError is decided by its HTTP status.
_PERMANENT: tuple[type[BaseException], ...] = (
    PermissionDeniedError,
    UnauthenticatedError,
    InvalidPathError,
    NotSupportedError,
    AlreadyExistsError,
    PreconditionError,
    UnknownConfigurationKeyError,
    ValueError,
)
_STATUS_MARK = "status code: "


def _client_error_status(message: str) -> int | None:
    """The 4xx status in an obstore message ("... non-2xx status code: 400 Bad Request"):
    obstore's GenericError carries no status of its own."""
    at = message.find(_STATUS_MARK)
    if at < 0:
        return None
    digits = message[at + len(_STATUS_MARK) : at + len(_STATUS_MARK) + 3]
    if not digits.isdigit():
        return None
    status = int(digits)
    return status if 400 <= status < 500 else None


class S3ObjectStore:
    """The broker's object store: an S3 bucket (or S3-compatible server) through obstore."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        client: ClientConfig = {
            "allow_http": settings.allow_http,
            "timeout": timedelta(seconds=settings.request_timeout_s),
            "connect_timeout": timedelta(
                seconds=min(settings.connect_timeout_s, settings.request_timeout_s)
            ),
        }
        retry: RetryConfig = {
            "max_retries": settings.max_retries,
            "retry_timeout": timedelta(seconds=settings.retry_timeout_s),
            "backoff": {
                "init_backoff": timedelta(milliseconds=100),
                "max_backoff": timedelta(seconds=2),
                "base": 2,
            },
        }
        config: dict[str, Any] = {"region": settings.region}
        if settings.endpoint:
            config["endpoint"] = settings.endpoint
        if settings.access_key_id:
            config["access_key_id"] = settings.access_key_id
        if settings.secret_access_key:
            config["secret_access_key"] = settings.secret_access_key
        try:
            self._store = S3Store(
                settings.bucket,
                prefix=settings.prefix or None,
                config=config,  # type: ignore[arg-type]  # keys as S3Config's, built up above
                client_options=client,
                retry_config=retry,
            )
        except (BaseError, ValueError) as error:
            self._raise(error, "")

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.settings!r})"

    def _raise(self, error: BaseException, key: str) -> NoReturn:
        if isinstance(error, FileNotFoundError):
            raise ObjectNotFound(key) from None
        message = str(error).split("\n\nDebug source:", 1)[0]
        message = " ".join(message.split())  # one line (an S3 error's XML body spans lines)
        secret = self.settings.secret_access_key
        if secret:
            message = message.replace(secret, "<secret>")
        retriable = not isinstance(error, _PERMANENT)
        if retriable and isinstance(error, BaseError):
            status = _client_error_status(message)
            retriable = status is None or status in (408, 429)
        # `from None`: the original's chain and arguments are the library's, unscrubbed
        raise ObjectStoreError(message, retriable=retriable) from None

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        try:
            await obstore.put_async(self._store, key, data)
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, key)

    async def put_file(self, key: str, path: Path) -> None:
        check_key(key)
        try:
            # A Path is read by obstore's own threads, part by part (5 MiB, several at once);
            # above one part it is a multipart upload, aborted if a part fails.
            await obstore.put_async(self._store, key, path)
        except (BaseError, OSError, ValueError) as error:
            if isinstance(error, FileNotFoundError) and not path.exists():
                raise  # the local file is missing, not the object
            self._raise(error, key)

    async def get(self, key: str) -> bytes:
        check_key(key)
        try:
            result = await obstore.get_async(self._store, key)
            return bytes(await result.bytes_async())
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        _check_range(key, start, end)
        try:
            return bytes(await obstore.get_range_async(self._store, key, start=start, end=end))
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, key)

    async def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        for key in keys:
            check_key(key)
        try:
            # DeleteObjects, 1000 keys a request; S3 answers missing keys as deleted
            await obstore.delete_async(self._store, list(keys))
        except FileNotFoundError:
            return
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, keys[0])

    async def list(self, prefix: str) -> list[ObjectInfo]:
        # object_store lists by directory ("a/b" means "a/b/..."): list the prefix's directory
        # and keep the keys that start with the prefix as a string
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else None
        try:
            found = await obstore.list(self._store, directory).collect_async()
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, prefix)
        return sorted(
            (
                ObjectInfo(meta["path"], meta["size"])
                for meta in found
                if meta["path"].startswith(prefix)
            ),
            key=lambda info: info.key,
        )

    async def head(self, key: str) -> ObjectInfo | None:
        check_key(key)
        try:
            meta = await obstore.head_async(self._store, key)
        except FileNotFoundError:
            return None
        except (BaseError, OSError, ValueError) as error:
            self._raise(error, key)
        return ObjectInfo(meta["path"], meta["size"])


# --- memory -------------------------------------------------------------------------------


class MemoryObjectStore:
    """The same contract in a dict, for unit tests of the code that uses an object store.
    `unavailable`, when set, makes every call fail with it (the store down, credentials
    refused)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.unavailable: ObjectStoreError | None = None

    def _check(self) -> None:
        if self.unavailable is not None:
            raise self.unavailable

    def _object(self, key: str) -> bytes:
        check_key(key)
        self._check()
        try:
            return self.objects[key]
        except KeyError:
            raise ObjectNotFound(key) from None

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        self._check()
        self.objects[key] = bytes(data)

    async def put_file(self, key: str, path: Path) -> None:
        check_key(key)
        self._check()
        self.objects[key] = await asyncio.to_thread(path.read_bytes)

    async def get(self, key: str) -> bytes:
        return self._object(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        _check_range(key, start, end)
        data = self._object(key)
        if start >= len(data):
            raise ObjectStoreError(
                f"range [{start}, {end}) starts past the end of {key} ({len(data)} bytes)",
                retriable=False,
            )
        return data[start:end]

    async def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            check_key(key)
        self._check()
        for key in keys:
            self.objects.pop(key, None)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        self._check()
        return [
            ObjectInfo(key, len(data))
            for key, data in sorted(self.objects.items())
            if key.startswith(prefix)
        ]

    async def head(self, key: str) -> ObjectInfo | None:
        check_key(key)
        self._check()
        data = self.objects.get(key)
        return None if data is None else ObjectInfo(key, len(data))
