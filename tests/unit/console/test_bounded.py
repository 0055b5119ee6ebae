"""console/bounded.py: every broker asked at once, a silent or failing one costing only its
own rows (with why), never the whole answer."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any

import pytest

from lockgate.client.admin_log_dirs import LogDirDescription
from lockgate.client.admin_records import ListedOffset
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
)
from lockgate.console import bounded

SILENT, FAILING = 2, 3


class StubAdmin:
    """Broker 2 never answers; broker 3 answers with an error; the others at once."""

    async def _as(self, broker: int) -> None:
        if broker == SILENT:
            await asyncio.Event().wait()
        if broker == FAILING:
            raise NotLeaderOrFollowerError(f"broker {broker}")

    async def describe_log_dirs(
        self, brokers: Collection[int], topics: Mapping[str, Any] | None = None
    ) -> dict[int, list[LogDirDescription]]:
        (broker,) = brokers
        await self._as(broker)
        return {broker: [LogDirDescription(f"/data{broker}", ErrorCode.none, {}, None, None)]}

    async def list_offsets(
        self, timestamps: Mapping[TopicPartition, int], *, isolation_level: int = 0
    ) -> dict[TopicPartition, ListedOffset | KafkaError]:
        leaders = {tp.partition for tp in timestamps}  # (partition p is led by broker p)
        (leader,) = leaders
        await self._as(leader)
        return {tp: ListedOffset(100 + tp.partition, -1, 0) for tp in timestamps}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "BROKER_ANSWER_S", 0.05)


async def test_log_dirs_of_the_brokers_that_answer_and_why_the_others_did_not() -> None:
    found, failed = await bounded.log_dirs(StubAdmin(), [1, SILENT, FAILING])  # type: ignore[arg-type]
    assert list(found) == [1] and found[1][0].path == "/data1"
    assert isinstance(failed[SILENT], KafkaTimeoutError)
    assert "broker 2 did not answer within 0.05 s" in str(failed[SILENT])
    assert failed[FAILING].code == ErrorCode.not_leader_or_follower


async def test_offsets_of_a_silent_leader_get_its_error_and_the_others_their_offsets() -> None:
    leaders = {TopicPartition("t", p): p for p in (0, 1, SILENT, FAILING)}
    answers = await bounded.offsets(StubAdmin(), leaders, -1)  # type: ignore[arg-type]
    assert answers[TopicPartition("t", 0)] == ListedOffset(100, -1, 0)
    assert answers[TopicPartition("t", 1)] == ListedOffset(101, -1, 0)
    assert isinstance(answers[TopicPartition("t", SILENT)], KafkaTimeoutError)
    assert isinstance(answers[TopicPartition("t", FAILING)], NotLeaderOrFollowerError)
