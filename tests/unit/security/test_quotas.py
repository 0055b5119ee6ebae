"""Client quotas at the model level: Kafka's eight-level precedence and the groups a default
quota measures separately, the windowed rate and the throttle time it gives (fake clock),
validation as Kafka's controller does it, describe filters, the store across a restart on
the disk engine, and the two handlers against an in-process broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    OpData,
)
from kio.schema.alter_client_quotas.v1.request import (
    EntityData as AlterEntity,
)
from kio.schema.alter_client_quotas.v1.request import (
    EntryData as AlterEntry,
)
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.static.primitive import f64, i8

from lockgate.handlers import k48_describe_client_quotas, k49_alter_client_quotas
from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.quota_store import EtcdQuotaStore, LocalQuotaStore
from lockgate.security.quotas import (
    CLIENT_ID,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    USER,
    Alteration,
    ClientQuotas,
    FilterComponent,
    Measured,
    QuotaEntity,
    QuotaTable,
    QuotaType,
    Rate,
    describe,
    resolve,
    throttle_time_ms,
    validate_entity,
    validate_value,
)
from lockgate.server.broker import Broker
from lockgate.storage.disk import DiskEngine
from tests.support.etcd import EtcdCluster

RATE = "producer_byte_rate"


def entity(**parts: str | None) -> QuotaEntity:
    return QuotaEntity.of({k.replace("_", "-"): v for k, v in parts.items()})


# (entity, the group it measures for user alice / client app), from the highest precedence
LEVELS: list[tuple[QuotaEntity, tuple[str, str]]] = [
    (entity(user="alice", client_id="app"), ("alice", "app")),
    (entity(user="alice", client_id=None), ("alice", "app")),
    (entity(user="alice"), ("alice", "")),
    (entity(user=None, client_id="app"), ("alice", "app")),
    (entity(user=None, client_id=None), ("alice", "app")),
    (entity(user=None), ("alice", "")),
    (entity(client_id="app"), ("", "app")),
    (entity(client_id=None), ("", "app")),
]


def test_precedence_takes_the_most_specific_level_present() -> None:
    table: QuotaTable = {e: {RATE: float(100 + n)} for n, (e, _) in enumerate(LEVELS)}
    for n, (level, group) in enumerate(LEVELS):
        assert resolve(table, RATE, "alice", "app") == (float(100 + n), group), level
        del table[level]
    assert resolve(table, RATE, "alice", "app") is None


def test_a_level_counts_only_for_the_key_it_sets() -> None:
    table: QuotaTable = {
        entity(user="alice"): {"consumer_byte_rate": 5.0},
        entity(client_id="app"): {RATE: 7.0},
    }
    assert resolve(table, RATE, "alice", "app") == (7.0, ("", "app"))
    assert resolve(table, "consumer_byte_rate", "alice", "app") == (5.0, ("alice", ""))


def test_other_names_do_not_match() -> None:
    table: QuotaTable = {entity(user="bob", client_id="app"): {RATE: 1.0}}
    assert resolve(table, RATE, "alice", "app") is None
    assert resolve(table, RATE, "bob", "other") is None


def test_window_is_padded_for_a_new_rate_and_trimmed_to_the_kept_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(1000, 0)
    # as if ten empty windows came before: 1000 bytes over 10 s
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    for second in range(1, 30):
        rate.record(1000, second * 1000)
    # the windows that began 18 s ago or earlier are over; eleven remain, the oldest 10 s old
    assert rate.window_size_ms(29_000) == 10_000
    assert rate.measure(29_000) == pytest.approx(11_000 / 10)


def test_an_idle_rate_forgets_its_old_windows() -> None:
    rate = Rate(samples=2, window_ms=1000)
    rate.record(10_000, 0)
    assert rate.measure(500) == pytest.approx(10_000 / 1.5)  # one empty window before
    assert rate.measure(5_000) == 0.0


def test_throttle_time_brings_the_rate_back_to_the_limit() -> None:
    # O·W/(W+X) = T: 200/s over 10 s, limit 100/s → 10 s more
    assert throttle_time_ms(200.0, 100.0, 10_000) == 10_000
    assert throttle_time_ms(100.5, 100.0, 1_000) == 5
    assert throttle_time_ms(100.0, 100.0, 1_000) == 0


def quotas_with(table: QuotaTable, windows: int = 11) -> ClientQuotas:
    quotas = ClientQuotas(windows, 1)
    quotas.replace(table)
    return quotas


def test_record_throttles_past_the_limit_only() -> None:
    quotas = quotas_with({entity(client_id="app"): {RATE: 100.0}})
    assert quotas.record(QuotaType.PRODUCE, "ANONYMOUS", "app", 1000, 0) == 0  # 100/s
    assert quotas.record(QuotaType.PRODUCE, "ANONYMOUS", "app", 1000, 0) == 10_000  # 200/s
    assert quotas.record(QuotaType.PRODUCE, "ANONYMOUS", "other", 10**9, 0) == 0
    assert quotas.record(QuotaType.FETCH, "ANONYMOUS", "app", 10**9, 0) == 0


def test_default_quota_measures_each_client_on_its_own() -> None:
    quotas = quotas_with({entity(client_id=None): {RATE: 100.0}})
    assert quotas.record(QuotaType.PRODUCE, "u", "a", 1000, 0) == 0
    assert quotas.record(QuotaType.PRODUCE, "u", "b", 1000, 0) == 0
    assert quotas.record(QuotaType.PRODUCE, "u", "a", 1000, 0) > 0


def test_user_quota_is_shared_by_the_users_clients() -> None:
    quotas = quotas_with({entity(user="alice"): {RATE: 100.0}})
    assert quotas.record(QuotaType.PRODUCE, "alice", "a", 1000, 0) == 0
    assert quotas.record(QuotaType.PRODUCE, "alice", "b", 1000, 0) > 0


def test_request_throttle_is_capped_at_one_window() -> None:
    quotas = quotas_with({entity(client_id="app"): {"request_percentage": 1.0}})
    assert quotas.record(QuotaType.REQUEST, "u", "app", 5000.0, 0) == 1000


def test_unrecord_takes_a_value_back() -> None:
    quotas = quotas_with({entity(client_id="app"): {"consumer_byte_rate": 100.0}})
    assert quotas.record(QuotaType.FETCH, "u", "app", 2000, 0) > 0
    quotas.unrecord(QuotaType.FETCH, "u", "app", 2000, 0)
    assert quotas.record(QuotaType.FETCH, "u", "app", 900, 0) == 0


def test_a_new_table_applies_to_the_next_request() -> None:
    quotas = quotas_with({})
    assert not quotas.kinds
    quotas.replace({entity(client_id="app"): {RATE: 100.0}})
    assert quotas.kinds == {QuotaType.PRODUCE}
    assert quotas.record(QuotaType.PRODUCE, "u", "app", 5000, 0) > 0
    quotas.replace({entity(client_id="app"): {RATE: 10_000.0}})
    assert quotas.record(QuotaType.PRODUCE, "u", "app", 5000, 0) == 0
    quotas.replace({})
    assert not quotas.kinds


def test_mutes_end() -> None:
    quotas = quotas_with({})
    quotas.mute(7, 60_000)
    assert quotas.mute_remaining(7) > 0
    assert quotas.mute_remaining(8) == 0
    quotas.mutes[7] = 0.0  # long past
    assert quotas.mute_remaining(7) == 0 and 7 not in quotas.mutes


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_measured_counts_the_handlers_steps_not_its_waits() -> None:
    clock = FakeClock()
    woken = asyncio.Event()

    async def handler() -> str:
        clock.now += 0.3  # working
        await woken.wait()
        clock.now += 0.2
        return "done"

    run = Measured(handler(), clock)
    task = asyncio.ensure_future(run)
    await asyncio.sleep(0)
    clock.now += 5.0  # someone else's time
    woken.set()
    assert await task == "done"
    assert run.busy_s == pytest.approx(0.5)


def error_of(call: Any, *args: Any) -> tuple[ErrorCode, str]:
    with pytest.raises(KafkaProtocolError) as caught:
        call(*args)
    return caught.value.code, caught.value.message


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
        ([("group", "a")], "Unhandled client quota entity type: group"),
        ([("user", "")], "Empty user not supported"),
        ([("ip", "1.2.3.4")], "ip quotas"),
        ([("ip", None), ("user", "a")], "IP entity should not be combined"),
    ],
)
def test_bad_entities_are_invalid_requests(
    parts: list[tuple[str, str | None]], message: str
) -> None:
    code, text = error_of(validate_entity, parts)
    assert code == ErrorCode.invalid_request and message in text


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("producer_byte_rte", 10.0, "Invalid configuration key producer_byte_rte"),
        (RATE, 0.0, "must be greater than 0"),
        ("request_percentage", -1.0, "must be greater than 0"),
        (RATE, 10.5, "cannot be a fractional value"),
        ("controller_mutation_rate", 10.0, "not enforced by lockgate"),
    ],
)
def test_bad_values_are_invalid_requests(key: str, value: float, message: str) -> None:
    code, text = error_of(validate_value, key, value)
    assert code == ErrorCode.invalid_request and message in text


def test_good_values_pass() -> None:
    validate_value(RATE, 1024.0)
    validate_value("consumer_byte_rate", 1.0)
    validate_value("request_percentage", 12.5)
    assert validate_entity([("user", None), ("client-id", "x")]) == entity(user=None, client_id="x")


TABLE: QuotaTable = {
    entity(user="alice"): {RATE: 1.0},
    entity(user=None): {RATE: 2.0},
    entity(user="alice", client_id="app"): {RATE: 3.0},
    entity(client_id="app"): {RATE: 4.0},
    entity(client_id=None): {RATE: 5.0},
}


@pytest.mark.parametrize(
    ("components", "strict", "expected"),
    [
        ([], False, [1.0, 2.0, 3.0, 4.0, 5.0]),
        ([], True, []),
        ([(USER, MATCH_EXACT, "alice")], False, [1.0, 3.0]),
        ([(USER, MATCH_EXACT, "alice")], True, [1.0]),
        ([(USER, MATCH_DEFAULT, None)], False, [2.0]),
        ([(USER, MATCH_ANY, None)], True, [1.0, 2.0]),
        ([(CLIENT_ID, MATCH_ANY, None)], False, [3.0, 4.0, 5.0]),
        ([(CLIENT_ID, MATCH_DEFAULT, None)], True, [5.0]),
        ([(USER, MATCH_ANY, None), (CLIENT_ID, MATCH_EXACT, "app")], True, [3.0]),
    ],
)
def test_describe_filters(
    components: list[tuple[str, int, str | None]], strict: bool, expected: list[float]
) -> None:
    found = describe(TABLE, [FilterComponent(*c) for c in components], strict)
    assert sorted(values[RATE] for _, values in found) == expected


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([("", MATCH_ANY, None)], ErrorCode.invalid_request),
        ([(USER, MATCH_ANY, None), (USER, MATCH_EXACT, "a")], ErrorCode.invalid_request),
        ([("group", MATCH_ANY, None)], ErrorCode.unsupported_version),
        ([(USER, 7, None)], ErrorCode.invalid_request),
        ([(USER, MATCH_EXACT, None)], ErrorCode.invalid_request),
        ([("ip", MATCH_ANY, None), (USER, MATCH_ANY, None)], ErrorCode.invalid_request),
    ],
)
def test_bad_filters(components: list[tuple[str, int, str | None]], code: ErrorCode) -> None:
    found, _ = error_of(describe, TABLE, [FilterComponent(*c) for c in components], False)
    assert found == code


async def test_store_survives_a_restart_on_disk(tmp_path: Path) -> None:
    store = LocalQuotaStore(DiskEngine(str(tmp_path)))
    seen: list[QuotaTable] = []
    store.listeners.append(seen.append)
    await store.alter(
        [
            Alteration(entity(client_id="app"), {RATE: 1024.0, "request_percentage": 50.0}),
            Alteration(entity(user=None), {"consumer_byte_rate": 2048.0}),
        ]
    )
    await store.alter([Alteration(entity(client_id="app"), {"request_percentage": None})])
    assert len(seen) == 2
    reopened = LocalQuotaStore(DiskEngine(str(tmp_path)))
    assert reopened.table == {
        entity(client_id="app"): {RATE: 1024.0},
        entity(user=None): {"consumer_byte_rate": 2048.0},
    }
    await reopened.alter([Alteration(entity(client_id="app"), {RATE: None})])
    assert LocalQuotaStore(DiskEngine(str(tmp_path))).table == {
        entity(user=None): {"consumer_byte_rate": 2048.0}
    }


def context(broker: Broker, api_key: int) -> RequestContext:
    return RequestContext(broker.services, api_key, 1, 1, "test", "127.0.0.1:1")


def alter_entry(parts: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> Any:
    return AlterEntry(
        entity=tuple(AlterEntity(entity_type=t, entity_name=n) for t, n in parts),
        ops=tuple(OpData(key=k, value=f64(v), remove=r) for k, v, r in ops),
    )


async def alter(broker: Broker, entries: list[Any], validate_only: bool = False) -> list[Any]:
    request = AlterClientQuotasRequest(entries=tuple(entries), validate_only=validate_only)
    answer: Any = await k49_alter_client_quotas.handle(context(broker, 49), request)
    return [(e["error_code"], e["error_message"]) for e in answer["entries"]]


async def test_alter_handler_applies_valid_entries_and_refuses_others(
    memory_broker: Broker,
) -> None:
    results = await alter(
        memory_broker,
        [
            alter_entry([("client-id", "app")], [(RATE, 1000.0, False)]),
            alter_entry([("client-id", "bad")], [(RATE, 10.5, False)]),
            alter_entry([("client-id", "app")], [(RATE, 5.0, False)]),
            alter_entry([("user", None)], [(RATE, 1.0, False), (RATE, 2.0, False)]),
            alter_entry([("nobody", "x")], [(RATE, 1.0, False)]),
        ],
    )
    assert [code for code, _ in results] == [0] + [ErrorCode.invalid_request] * 4
    assert "Ignoring duplicate entity" in results[2][1]
    assert "Duplicate quota key" in results[3][1]
    assert memory_broker.quota_store.table == {entity(client_id="app"): {RATE: 1000.0}}
    assert memory_broker.quotas.kinds == {QuotaType.PRODUCE}


async def test_validate_only_changes_nothing(memory_broker: Broker) -> None:
    results = await alter(
        memory_broker, [alter_entry([("user", "a")], [(RATE, 10.0, False)])], validate_only=True
    )
    assert results == [(0, None)]
    assert memory_broker.quota_store.table == {}
    assert not memory_broker.quotas.kinds


async def test_describe_handler_answers_matches_or_the_filters_error(
    memory_broker: Broker,
) -> None:
    await alter(
        memory_broker,
        [
            alter_entry([("user", "alice"), ("client-id", None)], [(RATE, 10.0, False)]),
            alter_entry([("user", "bob")], [("request_percentage", 25.0, False)]),
        ],
    )

    async def run(components: list[tuple[str, int, str | None]], strict: bool) -> Any:
        request = DescribeClientQuotasRequest(
            components=tuple(
                ComponentData(entity_type=t, match_type=i8(m), match=n) for t, m, n in components
            ),
            strict=strict,
        )
        return await k48_describe_client_quotas.handle(context(memory_broker, 48), request)

    answer = await run([(USER, MATCH_EXACT, "alice")], False)
    assert answer["error_code"] == 0
    assert answer["entries"] == [
        {
            "entity": [
                {"entity_type": "user", "entity_name": "alice"},
                {"entity_type": "client-id", "entity_name": None},
            ],
            "values": [{"key": RATE, "value": 10.0}],
        }
    ]
    assert len((await run([(USER, MATCH_ANY, None)], True))["entries"]) == 1
    failed = await run([("group", MATCH_ANY, None)], False)
    assert failed["error_code"] == ErrorCode.unsupported_version and failed["entries"] is None


async def test_etcd_store_changes_reach_every_broker(one_etcd: EtcdCluster) -> None:
    first = EtcdQuotaStore.from_url(one_etcd.url + "/quotatest")
    second = EtcdQuotaStore.from_url(one_etcd.url + "/quotatest")
    enforced = ClientQuotas()
    second.listeners.append(enforced.replace)
    await first.start()
    await second.start()
    try:
        await first.alter([Alteration(entity(client_id="app"), {RATE: 100.0})])
        assert first.table == {entity(client_id="app"): {RATE: 100.0}}  # read its own write
        for _ in range(200):  # the other broker's watch delivers it
            if enforced.kinds:
                break
            await asyncio.sleep(0.05)
        assert enforced.record(QuotaType.PRODUCE, "u", "app", 5000, 0) > 0
        await second.alter([Alteration(entity(client_id="app"), {RATE: None})])
        for _ in range(200):
            if not first.table:
                break
            await asyncio.sleep(0.05)
        assert first.table == {}
        await second.alter([Alteration(entity(user=None), {"consumer_byte_rate": 50.0})])
    finally:
        await first.close()
        await second.close()
    restarted = EtcdQuotaStore.from_url(one_etcd.url + "/quotatest")
    await restarted.start()
    try:
        assert restarted.table == {entity(user=None): {"consumer_byte_rate": 50.0}}
    finally:
        await restarted.close()
