"""lockgate's share consumer (KIP-932) end to end against a broker serving share groups: a
group of one acknowledging explicitly (RELEASE → delivered again with delivery count 2,
REJECT → never again, RENEW keeps a record, ShareAcknowledge by commit and acknowledgements
piggy-backed on ShareFetch), two members sharing one partition through the blocking facade in
implicit mode (every record delivered once between them), and a member closing with records
unacknowledged (the broker gives them to the other member, delivery count 2). The same tests
run against Apache Kafka 4.4 and, once it serves share groups, against lockgate."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from lockgate.client.admin import Admin, NewTopic, ResourceType
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer
from lockgate.client.share_consumer import ShareConsumer
from lockgate.client.share_records import ShareRecord
from lockgate.client.share_session import AcknowledgeType
from lockgate.client.sync_share_consumer import ShareConsumer as BlockingShareConsumer

pytestmark = pytest.mark.compat

BROKERS = ["kafka", "lockgate"]
ACCEPT, RELEASE, REJECT, RENEW = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.RENEW,
)
DEADLINE_S = 25.0


async def prepare(bootstrap: str, records: int, *, one_batch_each: bool = False) -> tuple[str, str]:
    """A new topic of one partition holding `records` records v0..v{n-1}, and a new group id
    whose share.auto.offset.reset is earliest (set before producing, as Kafka's quick-start
    does: the default, latest, would skip them)."""
    suffix = uuid.uuid4().hex[:10]
    topic, group = f"share-{suffix}", f"share-group-{suffix}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.alter_configs(
            group,
            set_configs={"share.auto.offset.reset": "earliest"},
            resource_type=ResourceType.GROUP,
        )
    async with Producer(bootstrap) as producer:
        for i in range(records):
            sent = await producer.send(topic, f"v{i}".encode(), partition=0)
            if one_batch_each:
                await sent
        await producer.flush()
    return topic, group


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_release_redelivers_reject_never_renew_keeps(share_broker: str) -> None:
    async def run() -> None:
        topic, group = await prepare(share_broker, 10)
        reported: list[tuple[TopicPartition, frozenset[int], KafkaError | None]] = []
        consumer = ShareConsumer(
            share_broker,
            group_id=group,
            acknowledgement_mode="explicit",
            acknowledgement_callback=lambda tp, offsets, error: reported.append(
                (tp, offsets, error)
            ),
        )
        async with consumer:
            consumer.subscribe([topic])
            deliveries: list[tuple[int, int]] = []
            settled: dict[int, AcknowledgeType] = {}
            renewed: ShareRecord | None = None
            rounds = 0
            deadline = time.monotonic() + DEADLINE_S
            while len(settled) < 10 and time.monotonic() < deadline:
                records = await consumer.poll(1000)
                if renewed is not None:
                    assert records == []  # a poll after RENEW only sends it
                    consumer.acknowledge(renewed, ACCEPT)
                    settled[renewed.offset] = ACCEPT
                    renewed = None
                    continue
                for record in records:
                    deliveries.append((record.offset, record.delivery_count))
                    assert record.value == f"v{record.offset}".encode()
                    if record.offset == 0 and record.delivery_count == 1:
                        consumer.acknowledge(record, RENEW)
                        renewed = record
                        continue
                    kind = (
                        RELEASE
                        if record.offset == 3 and record.delivery_count == 1
                        else REJECT
                        if record.offset == 5
                        else ACCEPT
                    )
                    consumer.acknowledge(record, kind)
                    if kind is not RELEASE:
                        settled[record.offset] = kind
                rounds += 1
                if rounds % 2 == 0:  # every other round by ShareAcknowledge, else piggy-backed
                    outcome = await consumer.commit()
                    assert all(error is None for error in outcome.values()), outcome
            assert len(settled) == 10, deliveries
            outcome = await consumer.commit()  # maybe nothing left: the last round committed
            assert set(outcome) <= {TopicPartition(topic, 0)}
            assert all(error is None for error in outcome.values()), outcome
            # rejected and accepted records never come back
            assert await consumer.poll(1500) == []
        by_offset: dict[int, list[int]] = {}
        for offset, count in deliveries:
            by_offset.setdefault(offset, []).append(count)
        assert by_offset == {o: ([1, 2] if o == 3 else [1]) for o in range(10)}
        assert settled[5] is REJECT
        assert {o for o, kind in settled.items() if kind is ACCEPT} == set(range(10)) - {5}
        assert reported and all(error is None for _tp, _offsets, error in reported), reported
        assert consumer.acquisition_lock_timeout_ms == 30_000  # Kafka's default lock

    asyncio.run(run())


def _wait_for_assignment(*consumers: BlockingShareConsumer) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not all(c.assignment() for c in consumers):
        assert time.monotonic() < deadline, "no assignment"
        time.sleep(0.05)


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_two_members_share_one_partition_and_each_record_is_delivered_once(
    share_broker: str,
) -> None:
    topic, group = asyncio.run(prepare(share_broker, 20, one_batch_each=True))
    config = {
        "bootstrap.servers": share_broker,
        "group.id": group,
        "max.poll.records": "3",
    }
    with BlockingShareConsumer(config) as first, BlockingShareConsumer(config) as second:
        first.subscribe([topic])
        second.subscribe([topic])
        _wait_for_assignment(first, second)
        # the simple assignor shares a lone partition between every member
        assert first.assignment() == second.assignment() == [TopicPartition(topic, 0)]
        assert first.member_id != second.member_id
        got: dict[str, list[ShareRecord]] = {"first": [], "second": []}
        deadline = time.monotonic() + DEADLINE_S
        while len(got["first"]) + len(got["second"]) < 20 and time.monotonic() < deadline:
            got["first"] += first.poll(0.5)
            got["second"] += second.poll(0.5)
        # implicit mode: the next poll accepted each record, so nobody gets it again
        assert first.poll(0.5) == [] and second.poll(0.5) == []
        outcome = first.commit_sync()
        assert all(error is None for error in outcome.values()), outcome
    offsets = sorted(r.offset for r in got["first"] + got["second"])
    assert offsets == list(range(20))
    assert {r.delivery_count for r in got["first"] + got["second"]} == {1}
    assert got["first"] and got["second"], "both members should have been served"


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_a_member_closing_with_records_unacknowledged_hands_them_to_another(
    share_broker: str,
) -> None:
    async def run() -> None:
        topic, group = await prepare(share_broker, 5)
        leaving = ShareConsumer(share_broker, group_id=group, acknowledgement_mode="explicit")
        staying = ShareConsumer(share_broker, group_id=group, acknowledgement_mode="explicit")
        async with staying:
            await leaving.start()
            try:
                leaving.subscribe([topic])
                held: list[ShareRecord] = []
                deadline = time.monotonic() + DEADLINE_S
                while len(held) < 5 and time.monotonic() < deadline:
                    held += await leaving.poll(1000)
                assert [(r.offset, r.delivery_count) for r in held] == [(o, 1) for o in range(5)]
                staying.subscribe([topic])
                while not staying.assignment():
                    assert time.monotonic() < deadline, "no assignment"
                    await asyncio.sleep(0.05)
            finally:
                await leaving.close()  # nothing acknowledged: the broker releases all five
            again: list[ShareRecord] = []
            while len(again) < 5 and time.monotonic() < deadline:
                for record in await staying.poll(1000):
                    again.append(record)
                    staying.acknowledge(record, ACCEPT)
            assert [(r.offset, r.delivery_count) for r in again] == [(o, 2) for o in range(5)]
            assert await staying.commit() == {TopicPartition(topic, 0): None}

    asyncio.run(run())
