# Client quotas (KIP-13, KIP-55, KIP-124, KIP-219): the model (entities, keys, validation), the
# eight-level resolution of a (user, client-id) pair to the quota that governs it, the rate
# each governed group of clients is measured at, and the throttle time a violation earns.
# Pure: time is passed in (milliseconds), nothing here awaits except `measured`, which only
# times the handler it wraps. Invariants: `kinds` is empty exactly when no enforced quota is
# configured, so the hot paths pay one truthiness check; a table change applies to the next
# request of every connection (resolutions are recomputed, rates are kept per group).
from __future__ import annotations

import enum
import math
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate.config.properties import ConfigError
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's value type per key: a LONG must be a whole number.
INTEGRAL_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
USER_CLIENT_KEYS = frozenset(
    {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE}
)
# Known to Kafka, refused here with a reason rather than stored and silently not enforced.
NOT_SERVED = {
    CONTROLLER_MUTATION_RATE: (
        "controller_mutation_rate (KIP-599) is not enforced by lockgate, so it is not stored"
    ),
}
IP_NOT_SERVED = "ip quotas (connection_creation_rate, KIP-612) are not served by lockgate"

SECOND_MS = 1000


class QuotaType(enum.Enum):
    """What a quota measures, and the key that configures it."""

    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity as Kafka's ClientQuotaEntity: entity type → name, the name None for the
    type's default (`<default>`). Kept sorted by type so equal entities compare equal."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, parts: Mapping[str, str | None]) -> QuotaEntity:
        return cls(tuple(sorted(parts.items())))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.parts)

    def describe(self) -> str:
        """Kafka's path form: /users/<u>/clients/<c> (defaults as <default>)."""
        names = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
        order = sorted(self.parts, key=lambda part: ENTITY_TYPES.index(part[0]))
        return "".join(f"/{names[kind]}/{name or '<default>'}" for kind, name in order)


QuotaTable = dict[QuotaEntity, dict[str, float]]


# -- validation (as Kafka's controller validates AlterClientQuotas) -----------------------------


def validate_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity, or KafkaProtocolError(INVALID_REQUEST) naming what is wrong."""
    seen: dict[str, str | None] = {}
    for kind, name in parts:
        if kind in seen:
            raise _invalid(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise _invalid(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen:
        raise _invalid("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be combined "
                           "with User or ClientId")  # fmt: skip
        raise _invalid(IP_NOT_SERVED)
    return QuotaEntity.of(seen)


def validate_value(key: str, value: float) -> None:
    """A value to set for a user/client-id entity; raises INVALID_REQUEST as Kafka does."""
    if key not in USER_CLIENT_KEYS:
        raise _invalid(f"Invalid configuration key {key}")
    if key in NOT_SERVED:
        raise _invalid(NOT_SERVED[key])
    if not value > 0.0:  # (NaN too)
        raise _invalid(f"Quota {key} must be greater than 0")
    if key in INTEGRAL_KEYS:
        if value > 2**63 - 1:
            raise _invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")


def _invalid(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(ErrorCode.invalid_request, message)


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entity's changes: key → value to set, or None to remove."""

    entity: QuotaEntity
    changes: Mapping[str, float | None]


def apply_alterations(table: QuotaTable, alterations: Iterable[Alteration]) -> QuotaTable:
    """The table after the (already validated) alterations; an entity left without keys goes."""
    result = {entity: dict(values) for entity, values in table.items()}
    for alteration in alterations:
        values = result.setdefault(alteration.entity, {})
        for key, value in alteration.changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = float(value)
        if not values:
            del result[alteration.entity]
    return result


# -- describe filters (match types 0 exact, 1 default, 2 any) -------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> None:
    """Kafka's checks of a DescribeClientQuotas filter: an empty or repeated type and a bad
    combination are INVALID_REQUEST, an unknown type UNSUPPORTED_VERSION."""
    kinds: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _invalid("Invalid empty entity type.")
        if kind in kinds:
            raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise KafkaProtocolError(
                ErrorCode.unsupported_version, f"Unsupported entity type {kind}"
            )
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _invalid(f"Unexpected match type: {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise _invalid(f"an exact match of {kind} needs a name")
        kinds.add(kind)
    if IP in kinds and kinds & {USER, CLIENT_ID}:
        raise _invalid("Invalid entity filter component combination. IP filter component "
                       "should not be used with user or clientId filter component.")  # fmt: skip


def matches(entity: QuotaEntity, components: Iterable[FilterComponent], strict: bool) -> bool:
    parts = entity.as_dict()
    wanted = list(components)
    if strict and len(parts) != len(wanted):
        return False
    for component in wanted:
        if component.entity_type not in parts:
            return False
        name = parts[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return True


def describe(
    table: Mapping[QuotaEntity, Mapping[str, float]],
    components: list[FilterComponent],
    strict: bool,
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    check_filter(components)
    return [
        (entity, dict(values))
        for entity, values in sorted(table.items(), key=lambda item: item[0].describe())
        if matches(entity, components, strict)
    ]


# -- resolution ---------------------------------------------------------------------------------

# The group a quota is shared by: (user, client-id), "" where the level does not look at it.
# A default quota governs each user (or client) on its own, not all of them together.
Group = tuple[str, str]

_U, _D = "u", "d"  # a level's user or client part: the request's own name, or the default
_LEVELS: tuple[tuple[str | None, str | None], ...] = (
    (_U, _U),  # /users/<u>/clients/<c>
    (_U, _D),  # /users/<u>/clients/<default>
    (_U, None),  # /users/<u>
    (_D, _U),  # /users/<default>/clients/<c>
    (_D, _D),  # /users/<default>/clients/<default>
    (_D, None),  # /users/<default>
    (None, _U),  # /clients/<c>
    (None, _D),  # /clients/<default>
)


def resolve(
    table: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float, Group] | None:
    """The limit for `key` that governs (user, client_id) and the group it is measured over,
    by Kafka's precedence; None when no level sets it."""
    for user_part, client_part in _LEVELS:
        parts: dict[str, str | None] = {}
        if user_part is not None:
            parts[USER] = user if user_part == _U else None
        if client_part is not None:
            parts[CLIENT_ID] = client_id if client_part == _U else None
        values = table.get(QuotaEntity.of(parts))
        if values is not None and key in values:
            group = (user if user_part else "", client_id if client_part else "")
            return values[key], group
    return None


# -- rates --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


@dataclass(slots=True)
class Rate:
    """A windowed sum per second, as Kafka's Rate over a WindowedSum: `samples` windows of
    `window_ms`, one spare kept so that a full set of past windows is always there."""

    samples: int
    window_ms: int
    _kept: list[_Sample] = field(default_factory=list)
    _current: int = 0
    last_record_ms: int = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._kept):
                sample = _Sample(now_ms, now_ms)
                self._kept.append(sample)
            else:
                sample = self._kept[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms
        self.last_record_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._kept:
            self._kept.append(_Sample(now_ms, now_ms))
        return self._kept[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_age = self.samples * self.window_ms
        for sample in self._kept:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate divides by: since the oldest kept window began, padded as if
        the missing earlier windows (a new or long idle sensor) had been empty."""
        self._purge(now_ms)
        oldest = min(s.start_ms for s in self._kept) if self._kept else now_ms
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        wanted = self.samples - 1
        if full_windows < wanted:
            elapsed += (wanted - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self._kept) / (window / SECOND_MS)


def throttle_time_ms(rate: float, limit: float, window_ms: int) -> int:
    """How long a client measured at `rate` must stay silent for the rate over the window to
    fall to `limit`: O·W / (W + X) = T gives X = (O − T) / T · W (rounded half up)."""
    return math.floor((rate - limit) / limit * window_ms + 0.5)


# -- the broker's quota state -----------------------------------------------------------------

# Requests never charged to request_percentage (as Kafka exempts them): version negotiation,
# authentication and inter-broker traffic.
EXEMPT_API_KEYS = frozenset(
    {ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.WRITE_TXN_MARKERS, ApiKey.SASL_AUTHENTICATE}
)
# Not charged by the connection: Produce and Fetch charge themselves (bytes and time together).
SELF_CHARGED_API_KEYS = EXEMPT_API_KEYS | {ApiKey.PRODUCE, ApiKey.FETCH}
IDLE_GROUP_MS = 3600 * SECOND_MS  # a group's rate is forgotten after an hour without requests


class ClientQuotas:
    """The configured table and the measured rates; `mutes` holds the connections being
    throttled (connection serial → monotonic time the mute ends)."""

    def __init__(self, window_num: int = 11, window_size_s: int = 1) -> None:
        if window_num < 1 or window_size_s < 1:
            raise ConfigError("quota.window.num and quota.window.size.seconds must be at least 1")
        self.window_num = window_num
        self.window_ms = window_size_s * SECOND_MS
        self.table: QuotaTable = {}
        self.kinds: frozenset[QuotaType] = frozenset()
        self.mutes: dict[int, float] = {}
        self._resolved: dict[tuple[QuotaType, str, str], tuple[float, Group] | None] = {}
        self._rates: dict[tuple[QuotaType, Group], Rate] = {}

    def replace(self, table: QuotaTable) -> None:
        """A new table (from the store): applies to every connection's next request."""
        self.table = {entity: dict(values) for entity, values in table.items()}
        self.kinds = frozenset(
            kind
            for kind in QuotaType
            if any(kind.value in values for values in self.table.values())
        )
        self._resolved.clear()

    def limit_for(self, kind: QuotaType, user: str, client_id: str) -> tuple[float, Group] | None:
        cached = (kind, user, client_id)
        if cached not in self._resolved:
            self._resolved[cached] = resolve(self.table, kind.value, user, client_id)
        return self._resolved[cached]

    def record(
        self, kind: QuotaType, user: str, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """Charges `value` to the client's group; returns the throttle time it earned (0
        within quota). A request quota's throttle is capped at one window, as Kafka does."""
        if kind not in self.kinds:
            return 0
        found = self.limit_for(kind, user, client_id or "")
        if found is None:
            return 0
        limit, group = found
        rate = self._rates.get((kind, group))
        if rate is None:
            self._forget_idle(now_ms)
            rate = self._rates[(kind, group)] = Rate(self.window_num, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= limit:
            return 0
        throttle = throttle_time_ms(observed, limit, rate.window_size_ms(now_ms))
        if kind == QuotaType.REQUEST:
            throttle = min(throttle, self.window_ms)
        return max(throttle, 0)

    def unrecord(
        self, kind: QuotaType, user: str, client_id: str | None, value: float, now_ms: int
    ) -> None:
        """Takes back a recorded value (a throttled fetch is answered empty)."""
        found = self.limit_for(kind, user, client_id or "")
        if found is not None and (rate := self._rates.get((kind, found[1]))) is not None:
            rate.record(-value, now_ms)

    def rate(self, kind: QuotaType, user: str, client_id: str, now_ms: int) -> float | None:
        found = self.limit_for(kind, user, client_id)
        rate = self._rates.get((kind, found[1])) if found is not None else None
        return None if rate is None else rate.measure(now_ms)

    def _forget_idle(self, now_ms: int) -> None:
        if len(self._rates) < 1024:
            return
        for key, rate in list(self._rates.items()):
            if now_ms - rate.last_record_ms >= IDLE_GROUP_MS:
                del self._rates[key]

    # -- muting (KIP-219): the answer goes out at once, then the connection is not read --------

    def mute(self, connection: int, throttle_ms: int) -> None:
        if throttle_ms <= 0:
            return
        until = time.monotonic() + throttle_ms / SECOND_MS
        self.mutes[connection] = max(until, self.mutes.get(connection, 0.0))

    def mute_remaining(self, connection: int) -> float:
        """Seconds the connection stays muted (0: it may be read); ends a mute that is over."""
        until = self.mutes.get(connection)
        if until is None:
            return 0.0
        remaining = until - time.monotonic()
        if remaining <= 0:
            del self.mutes[connection]
            return 0.0
        return remaining


class Measured:
    """Awaits a handler coroutine and adds up the time spent running its steps, not the time
    it waits (for a flush, a rebalance, a long poll): Kafka charges request handler thread
    time, and here the handler's own steps on the event loop are that time."""

    def __init__(
        self, coroutine: Awaitable[Any], clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._coroutine: Any = coroutine
        self._clock = clock
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._coroutine
        send: Any = None
        error: BaseException | None = None
        while True:
            started = self._clock()
            try:
                yielded = coroutine.send(send) if error is None else coroutine.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.busy_s += self._clock() - started
            try:
                send, error = (yield yielded), None
            except BaseException as exc:  # cancellation too: passed on to the handler
                send, error = None, exc


async def measured(
    quotas: ClientQuotas,
    handler: Callable[..., Awaitable[Any]],
    context: Any,
    request: Any,
) -> Any:
    """Runs a handler under request_percentage: charges its time, puts the throttle time in
    its answer (when the version has the field) and mutes the connection for it."""
    run = Measured(handler(context, request))
    result = await run
    session = context.session
    throttle = quotas.record(
        QuotaType.REQUEST,
        session.user,
        context.client_id,
        run.busy_s * 100.0,  # percent of one second of one thread
        int(time.time() * SECOND_MS),
    )
    if throttle > 0:
        quotas.mute(context.connection, throttle)
        if isinstance(result, Mapping) and "throttle_time" in result:
            given = result["throttle_time"]
            given = given if isinstance(given, int) else 0
            result = {**result, "throttle_time": max(given, throttle)}
    return result


def charge(quotas: ClientQuotas, context: Any, kind: QuotaType, size: int, busy_s: float) -> int:
    """Produce and Fetch, as Kafka charges them: the bytes to their byte-rate quota and the
    handler's time to request_percentage; the connection is muted for the larger throttle,
    which is returned for the response. A throttled fetch is answered empty, so its bytes
    are taken back."""
    user, client_id = context.session.user, context.client_id
    now_ms = int(time.time() * SECOND_MS)
    bandwidth = quotas.record(kind, user, client_id, size, now_ms)
    requests = quotas.record(QuotaType.REQUEST, user, client_id, busy_s * 100.0, now_ms)
    throttle = max(bandwidth, requests)
    if throttle > 0:
        quotas.mute(context.connection, throttle)
        if kind == QuotaType.FETCH:
            quotas.unrecord(kind, user, client_id, size, now_ms)
    return throttle
