"""KIP-1251 through the group coordinator of an in-process broker: OffsetCommit and
TxnOffsetCommit accept a member epoch older than the member's for partitions it already had at
that epoch (one refused partition refuses the whole request, as in Kafka), partitions the
coordinator does not write (unknown topic, metadata too large) are not looked at, OffsetFetch
stays exact, and the epochs survive a restart (replayed from __consumer_offsets)."""

from __future__ import annotations

import pytest

from lockgate.coordinator.group.consumer_group import HeartbeatRequest, HeartbeatResponse
from lockgate.coordinator.group.records import CommittedOffset
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import TOPIC, start_broker

GROUP = "kip1251"
ALL = frozenset({0, 1, 2})
Offsets = dict[tuple[str, int], CommittedOffset]


async def beat(
    broker: Broker, member: str, epoch: int, owned: frozenset[int] | None
) -> HeartbeatResponse:
    joining = epoch == 0
    answer = await broker.groups.consumer.heartbeat(
        HeartbeatRequest(
            GROUP, member, epoch, rebalance_timeout_ms=5000 if joining else -1,
            subscribed_topic_names=(TOPIC,) if joining else None,
            owned=None if owned is None else {TOPIC: owned},
        )
    )  # fmt: skip
    assert answer.error == ErrorCode.none, answer
    return answer


async def three_epochs(broker: Broker) -> tuple[frozenset[int], frozenset[int]]:
    """m1 holds every partition since epoch 2, hands some to m2 at epoch 3 and gets them back
    at epoch 4 when m2 leaves: (the partitions m1 kept since epoch 2, those it got back)."""
    await beat(broker, "m1", 0, None)
    await beat(broker, "m2", 0, None)
    revoking = await beat(broker, "m1", 2, ALL)
    assert revoking.assignment is not None
    kept = revoking.assignment[TOPIC]
    await beat(broker, "m1", 2, kept)  # revoked: epoch 3
    await beat(broker, "m2", 3, frozenset())
    await beat(broker, "m2", -1, None)
    back = await beat(broker, "m1", 3, kept)
    assert back.member_epoch == 4 and back.assignment == {TOPIC: ALL}
    return kept, ALL - kept


def offsets(partitions: frozenset[int], metadata: str = "") -> Offsets:
    return {(TOPIC, p): CommittedOffset(10, -1, metadata, 0) for p in sorted(partitions)}


async def commit(broker: Broker, epoch: int, offsets: Offsets) -> dict[tuple[str, int], ErrorCode]:
    return await broker.groups.commit(GROUP, epoch, "m1", None, offsets, 10)


async def committed(broker: Broker, epoch: int, partitions: frozenset[int]) -> set[ErrorCode]:
    """The answers of an OffsetCommit of `partitions` at `epoch`."""
    return set((await commit(broker, epoch, offsets(partitions))).values())


async def txn_committed(broker: Broker, epoch: int, partitions: frozenset[int]) -> set[ErrorCode]:
    results = await broker.groups.txn_commit(GROUP, 9, 0, epoch, "m1", None, offsets(partitions))
    return set(results.values())


async def test_an_older_epoch_commits_only_partitions_held_since(broker: Broker) -> None:
    kept, returned = await three_epochs(broker)
    assert await committed(broker, 3, kept) == {ErrorCode.none}
    assert await committed(broker, 2, kept) == {ErrorCode.none}
    assert await committed(broker, 1, kept) == {ErrorCode.stale_member_epoch}
    # a partition given to m1 at epoch 4 fails the whole request
    refused = await commit(broker, 3, offsets(kept | returned))
    assert refused == dict.fromkeys(offsets(ALL), ErrorCode.stale_member_epoch)
    assert await committed(broker, 5, kept) == {ErrorCode.stale_member_epoch}
    assert await committed(broker, 4, ALL) == {ErrorCode.none}


async def test_partitions_it_does_not_write_are_not_checked(broker: Broker) -> None:
    """As Kafka: an unknown topic never reaches the group coordinator, and a partition whose
    metadata is too large is answered before the epoch check."""
    kept, returned = await three_epochs(broker)
    request = {
        **offsets(kept),
        **offsets(returned, "x" * 5000),
        ("no-such-topic", 0): CommittedOffset(1, -1, "", 0),
    }
    results = await commit(broker, 3, request)
    assert results == {
        **dict.fromkeys(offsets(kept), ErrorCode.none),
        **dict.fromkeys(offsets(returned), ErrorCode.offset_metadata_too_large),
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    error, found = broker.groups.fetch(GROUP, None, False)
    assert error == ErrorCode.none and {tp for tp, (o, _e) in found.items() if o} == set(
        offsets(kept)
    )


async def test_transactional_commits_and_fetches(broker: Broker) -> None:
    kept, returned = await three_epochs(broker)
    assert await txn_committed(broker, 3, kept) == {ErrorCode.none}
    # TxnOffsetCommit before v6 has no STALE_MEMBER_EPOCH
    assert await txn_committed(broker, 3, returned) == {ErrorCode.illegal_generation}
    assert await txn_committed(broker, 5, kept) == {ErrorCode.illegal_generation}
    fetch = broker.groups.fetch
    assert fetch(GROUP, None, False, "m1", 4)[0] == ErrorCode.none
    assert fetch(GROUP, None, False, "m1", 3)[0] == ErrorCode.stale_member_epoch


@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshot", "full-replay"])
async def test_the_epochs_survive_a_restart(engine: MemoryEngine, snapshots: bool) -> None:
    """Loaded from a coordinator snapshot (taken at the clean stop) or from the log."""
    settings = {"lockgate.coordinator.snapshot.interval.ms": "3600000" if snapshots else "-1"}
    broker = await start_broker(engine, **settings)
    try:
        kept, returned = await three_epochs(broker)
        before = broker.groups.groups[GROUP].consumer
        assert before is not None
    finally:
        await broker.stop()
    assert any(path.endswith(".coordinator") for path in engine.files) == snapshots
    broker = await start_broker(engine, **settings)
    try:
        after = broker.groups.groups[GROUP].consumer
        assert after is not None
        assert after.members["m1"].assignment_epochs == before.members["m1"].assignment_epochs
        assert await committed(broker, 3, kept) == {ErrorCode.none}
        assert await committed(broker, 3, returned) == {ErrorCode.stale_member_epoch}
    finally:
        await broker.stop()
