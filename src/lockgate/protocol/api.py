# Message bodies through kio: version lookup, decode, encode, and a version-agnostic builder.
#
# kio has one generated dataclass per (API, version). Handlers describe a response once, in the
# shape of the newest version, as plain dicts; `build` keeps the fields the negotiated version
# has and converts values to kio's types. kio rejects bytearray input and raises on unknown
# tagged fields: `decode_body` wraps both so callers only ever see BodyDecodeError.
from __future__ import annotations

import datetime
import enum
import functools
import io
import typing
import uuid
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.protocol import Entity

from lockgate.protocol.frame import MalformedFrame
from lockgate.protocol.length_guard import check_lengths

E = TypeVar("E", bound=Entity)


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class BodyDecodeError(Exception):
    """The request body does not match its schema (truncated, bad lengths, unknown tags...)."""


@functools.cache
def request_class(api_key: int, version: int) -> type[Any] | None:
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    cls = request_class(api_key, version)
    return bool(cls is not None and cls.__flexible__)


def decode_body(cls: type[E], payload: bytes, offset: int) -> E:
    raw = bytes(payload) if isinstance(payload, bytearray) else payload
    try:
        check_lengths(cls, raw, offset)  # before kio's native reader: see length_guard.py
        value, _size = entity_reader(cls)(memoryview(raw), offset)
    except MalformedFrame as exc:
        raise BodyDecodeError(str(exc)) from exc
    except (SerialError, KeyError, ValueError, TypeError, OverflowError, IndexError) as exc:
        raise BodyDecodeError(f"{type(exc).__name__}: {exc}") from exc
    # Trailing bytes are ignored, as Kafka does: librdkafka's all-topics Metadata request
    # carries a few.
    _check_nulls(type(value), value)
    return value


# kio reads a null array (length -1) even where the schema does not allow one; Kafka's own
# parser rejects such a request, and handlers rely on it. Per class: the fields that must not be
# null, and the entity classes to look into (directly or inside arrays).
_NullPlan = tuple[tuple[str, bool, type[Any] | None], ...]
_NULL_PLANS: dict[type[Any], _NullPlan] = {}


def _null_plan(cls: type[Any]) -> _NullPlan:
    plan = _NULL_PLANS.get(cls)
    if plan is None:
        entries = []
        for name, annotation in typing.get_type_hints(cls).items():
            if name not in {f.name for f in fields(cls)}:
                continue
            args = typing.get_args(annotation)
            nullable = type(None) in args
            inner = [a for a in args if a is not type(None)]
            target = inner[0] if nullable and len(inner) == 1 else annotation
            if typing.get_origin(target) is tuple:
                target = typing.get_args(target)[0]
            nested = target if isinstance(target, type) and is_dataclass(target) else None
            if not nullable or nested is not None:
                entries.append((name, nullable, nested))
        plan = _NULL_PLANS[cls] = tuple(entries)
    return plan


def _check_nulls(cls: type[Any], value: Any) -> None:
    for name, nullable, nested in _null_plan(cls):
        item = getattr(value, name)
        if item is None:
            if not nullable:
                raise BodyDecodeError(f"{cls.__qualname__}.{name} is null")
            continue
        if nested is not None:
            for element in item if isinstance(item, tuple) else (item,):
                _check_nulls(nested, element)


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# Builder: dicts in the newest version's shape → the kio dataclass of the negotiated version.

_Converter = typing.Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _to_timedelta(value: Any) -> Any:
    return (
        value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    )


def _to_error_code(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _to_uuid(value: Any) -> Any:
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(bytes=value)


def _converter_for(annotation: Any) -> _Converter:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        conv = _converter_for(inner[0]) if len(inner) == 1 else _identity
        return lambda v: None if v is None else conv(v)
    if origin is tuple:
        item = _converter_for(args[0])
        if item is _identity:
            return lambda v: tuple(v)
        return lambda v: tuple(item(x) for x in v)
    if isinstance(annotation, type):
        if is_dataclass(annotation):
            return functools.partial(build, annotation)  # type: ignore[type-var]
        if issubclass(annotation, ErrorCode):
            return _to_error_code
        if issubclass(annotation, datetime.timedelta):
            return _to_timedelta
        if issubclass(annotation, uuid.UUID):
            return _to_uuid
    return _identity


def _plan(cls: type[Any]) -> tuple[tuple[str, bool, _Converter], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


_PLANS: dict[type[Any], tuple[tuple[str, bool, _Converter], ...]] = {}


def _make_plan(cls: type[Any]) -> tuple[tuple[str, bool, _Converter], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        required = f.default is MISSING and f.default_factory is MISSING
        plan.append((f.name, required, _converter_for(hints[f.name])))
    return tuple(plan)


def build(cls: type[E], data: Mapping[str, Any] | E) -> E:
    """Builds `cls` from a mapping, ignoring keys the version lacks. Missing required fields
    raise KeyError: that is a handler bug, not a client error."""
    if isinstance(data, cls):
        return data
    assert isinstance(data, Mapping), f"cannot build {cls.__name__} from {type(data).__name__}"
    kwargs: dict[str, Any] = {}
    for name, required, convert in _plan(cls):
        if name in data:
            kwargs[name] = convert(data[name])
        elif required:
            raise KeyError(f"{cls.__qualname__}.{name} is required")
    return cls(**kwargs)
