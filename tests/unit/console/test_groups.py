"""console/groups.py against an in-process broker: the paginated list (classic, consumer
protocol, simple and share groups), a group's members and lag, the reset's dry run and its refusal
while members remain, applying a reset, and deleting a group."""

from __future__ import annotations

import time

import pytest

from lockgate.client.admin import Admin, ResourceType
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.errors import KafkaError
from lockgate.client.share_consumer import ShareConsumer
from lockgate.console import groups
from lockgate.tools.group_resets import GroupNotInactiveError, ResetKind, ResetTarget
from tests.unit.console.in_process_broker import bootstrap, consume_all, produce, running_broker

TOPIC = "console-groups"


async def test_list_describe_reset_and_delete() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        await admin.create_topic(TOPIC, 2)
        await produce(broker, TOPIC, 10, 2)
        tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
        classic = Consumer(
            bootstrap(broker),
            group_id="classic-group",
            client_id="classic-client",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=200,
        )
        modern = Consumer(
            bootstrap(broker),
            group_id="modern-group",
            client_id="modern-client",
            group_protocol="consumer",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=200,
        )
        try:
            classic.subscribe([TOPIC])
            modern.subscribe([TOPIC])
            await consume_all(classic, 10)
            await consume_all(modern, 10)
            await produce(broker, TOPIC, 6, 2)  # both groups now lag by 3 per partition

            page = await groups.list_groups(admin)
            rows = {row.group_id: row for row in page.rows}
            assert (page.total, page.pages, page.matching) == (2, 1, 2)
            assert (rows["classic-group"].group_type, rows["classic-group"].state) == (
                "classic",
                "Stable",
            )
            assert rows["classic-group"].members == 1 and rows["classic-group"].assignor
            assert rows["modern-group"].group_type == "consumer"
            assert rows["modern-group"].members == 1

            detail = await groups.describe_group(admin, "classic-group")
            (member,) = detail.members
            assert member.client_id == "classic-client" and member.assignment == (tp0, tp1)
            assert [(p.committed, p.end_offset, p.lag) for p in detail.partitions] == [
                (5, 8, 3),
                (5, 8, 3),
            ]
            assert detail.total_lag == 6 and await groups.total_lag(admin, "modern-group") == 6
            assert {p.member_id for p in detail.partitions} == {member.member_id}

            with pytest.raises(GroupNotInactiveError) as refused:
                await groups.plan_reset(admin, "classic-group", ResetTarget(ResetKind.EARLIEST))
            assert str(refused.value) == (
                "Assignments can only be reset if the group 'classic-group' is inactive, but "
                "the current state is Stable."
            )
        finally:
            await classic.close()
            await modern.close()

        plan = await groups.plan_reset(admin, "classic-group", ResetTarget(ResetKind.EARLIEST))
        assert plan.state == "Empty"
        assert [(p.topic_partition, p.current, p.new) for p in plan.offsets] == [
            (tp0, 5, 0),
            (tp1, 5, 0),
        ]
        assert await admin.list_group_offsets("classic-group") == {tp0: 5, tp1: 5}  # a dry run

        shifted = await groups.plan_reset(
            admin, "classic-group", ResetTarget(ResetKind.SHIFT, -100), f"{TOPIC}:1"
        )
        assert [(p.topic_partition, p.new) for p in shifted.offsets] == [(tp1, 0)]
        assert shifted.warnings == (
            f"new offset -95 is lower than the earliest offset of {tp1}; using 0",
        )

        await groups.apply_reset(admin, "classic-group", plan.as_offsets())
        assert await admin.list_group_offsets("classic-group") == {tp0: 0, tp1: 0}
        assert (await groups.describe_group(admin, "classic-group")).total_lag == 16

        await groups.delete_group(admin, "classic-group")
        with pytest.raises(KafkaError) as gone:
            await groups.describe_group(admin, "classic-group")
        assert gone.value.code.name == "group_id_not_found"


async def test_pages_and_filter_of_many_groups() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        await admin.create_topic(TOPIC, 1)
        await produce(broker, TOPIC, 1, 1)
        for i in range(250):
            await admin.alter_group_offsets(f"batch-{i:03d}", {TopicPartition(TOPIC, 0): 1})
        await admin.alter_group_offsets("other", {TopicPartition(TOPIC, 0): 0})

        first = await groups.list_groups(admin)
        assert (first.total, first.pages, len(first.rows)) == (251, 3, 100)
        assert first.rows[0].group_id == "batch-000"
        assert first.rows[0].state == "Empty" and first.rows[0].members == 0

        last = await groups.list_groups(admin, page=99)  # past the end: the last page
        assert last.page == 3 and len(last.rows) == 51 and last.rows[-1].group_id == "other"

        filtered = await groups.list_groups(admin, name_filter="BATCH-1")
        assert filtered.matching == 100 and filtered.pages == 1
        assert {row.group_id[:7] for row in filtered.rows} == {"batch-1"}


def test_parse_target() -> None:
    assert groups.parse_target("earliest", "ignored") == ResetTarget(ResetKind.EARLIEST)
    assert groups.parse_target("shift", " -3 ") == ResetTarget(ResetKind.SHIFT, -3)
    assert groups.parse_target("timestamp", "1700000000000") == ResetTarget(
        ResetKind.TIMESTAMP, 1_700_000_000_000
    )
    assert groups.parse_target("timestamp", "2023-11-14T22:13:20Z") == ResetTarget(
        ResetKind.TIMESTAMP, 1_700_000_000_000
    )
    for kind, value, message in [
        ("sideways", "", "unknown reset target"),
        ("offset", "-1", "cannot be negative"),
        ("offset", "ten", "needs an integer"),
        ("timestamp", "yesterday", "milliseconds since the epoch"),
    ]:
        with pytest.raises(ValueError, match=message):
            groups.parse_target(kind, value)


async def test_share_group_listed_and_described() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        await admin.create_topic(TOPIC, 1)
        await produce(broker, TOPIC, 6, 1)
        await admin.alter_configs(
            "queue",
            set_configs={"share.auto.offset.reset": "earliest"},
            resource_type=ResourceType.GROUP,
        )
        async with ShareConsumer(
            bootstrap(broker), group_id="queue", client_id="share-client"
        ) as consumer:
            consumer.subscribe([TOPIC])
            got, deadline = 0, time.monotonic() + 20
            while got < 4 and time.monotonic() < deadline:
                got += len(await consumer.poll(200))
            assert got >= 4
            await consumer.commit()

            (row,) = (await groups.list_groups(admin)).rows
            assert (row.group_id, row.group_type, row.state, row.members) == (
                "queue",
                "share",
                "Stable",
                1,
            )
            detail = await groups.describe_group(admin, "queue")
            assert detail.group_type == "share" and detail.assignor
            (member,) = detail.members
            assert member.client_id == "share-client"
            assert member.assignment == (TopicPartition(TOPIC, 0),)
            (partition,) = detail.partitions
            assert partition.topic_partition == TopicPartition(TOPIC, 0)
            assert partition.member_id == member.member_id
            assert partition.committed is not None and partition.lag is not None
            assert partition.end_offset == 6 and partition.lag == 6 - partition.committed
