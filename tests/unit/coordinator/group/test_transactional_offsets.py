"""Transactional offsets (TxnOffsetCommit, KIP-447) on the group coordinator of an in-process
broker: invisible until the transaction's commit marker reaches the offsets partition, dropped
on abort, UNSTABLE_OFFSET_COMMIT for RequireStable fetches meanwhile, generation / member /
instance fencing, real EndTxn through the transaction coordinator, and all of it across a
restart (open transactions replayed as pending)."""

from __future__ import annotations

import time

from lockgate.coordinator.group.records import CommittedOffset, offset_value
from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.unit.coordinator.group.support import (
    OTHER_TOPIC,
    TOPIC,
    bounded,
    join,
    offsets,
    stable_group,
    start_broker,
    sync,
    visible,
    wait_until,
)

GROUP = "txn-offsets"
PRODUCER, EPOCH = 4000, 0


def held(committed: dict[tuple[str, int], CommittedOffset]) -> dict[tuple[str, int], bytes]:
    """Offsets as the coordinator holds them: their record values."""
    return {tp: offset_value(each) for tp, each in committed.items()}


def offsets_partition(broker: Broker, group_id: str = GROUP) -> Partition:
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, broker.groups.offsets_partition(group_id))
    assert partition is not None
    return partition


def marker(
    broker: Broker, commit: bool, producer_id: int = PRODUCER, group_id: str = GROUP
) -> None:
    """The transaction coordinator's marker for the producer, on the group's offsets
    partition."""
    offsets_partition(broker, group_id).write_marker(
        producer_id, EPOCH, commit, 0, int(time.time() * 1000), False
    )


def stable_answers(broker: Broker, *partitions: tuple[str, int]) -> dict[tuple[str, int], int]:
    """Error code of each partition in a RequireStable OffsetFetch."""
    error, answers = broker.groups.fetch(GROUP, list(partitions), True)
    assert error == ErrorCode.none
    return {tp: code for tp, (_committed, code) in answers.items()}


async def txn_commit(
    broker: Broker,
    *entries: tuple[str, int, int],
    producer_id: int = PRODUCER,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    return await broker.groups.txn_commit(
        GROUP, producer_id, EPOCH, generation, member_id, instance, offsets(*entries)
    )


# -- visibility --------------------------------------------------------------------------------


async def test_invisible_until_the_commit_marker(broker: Broker) -> None:
    await broker.groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 1), (TOPIC, 2, 1)))
    assert await txn_commit(broker, (TOPIC, 0, 10), (TOPIC, 1, 10)) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.none,
    }
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 1, (TOPIC, 2): 1}
    assert stable_answers(broker, (TOPIC, 0), (TOPIC, 1), (TOPIC, 2)) == {
        (TOPIC, 0): ErrorCode.unstable_offset_commit,
        (TOPIC, 1): ErrorCode.unstable_offset_commit,
        (TOPIC, 2): ErrorCode.none,
    }
    marker(broker, commit=True)
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 10, (TOPIC, 2): 1}
    assert set(stable_answers(broker, (TOPIC, 0), (TOPIC, 1), (TOPIC, 2)).values()) == {0}
    assert broker.groups.offsets.pending == {}


async def test_dropped_on_abort(broker: Broker) -> None:
    await broker.groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 1)))
    await txn_commit(broker, (TOPIC, 0, 10), (TOPIC, 1, 10))
    marker(broker, commit=False)
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 1}
    assert set(stable_answers(broker, (TOPIC, 0), (TOPIC, 1)).values()) == {0}
    assert broker.groups.offsets.pending == {}


async def test_markers_end_only_their_own_producers_offsets(broker: Broker) -> None:
    await txn_commit(broker, (TOPIC, 0, 10), producer_id=PRODUCER)
    await txn_commit(broker, (TOPIC, 1, 20), producer_id=PRODUCER + 1)
    marker(broker, commit=True, producer_id=PRODUCER + 1)
    assert visible(broker.groups, GROUP) == {(TOPIC, 1): 20}
    assert stable_answers(broker, (TOPIC, 0), (TOPIC, 1)) == {
        (TOPIC, 0): ErrorCode.unstable_offset_commit,
        (TOPIC, 1): ErrorCode.none,
    }
    marker(broker, commit=True, producer_id=PRODUCER)
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 20}


async def test_a_marker_on_another_offsets_partition_does_not_apply(broker: Broker) -> None:
    other_group = next(
        g
        for g in (f"other-{i}" for i in range(100))
        if broker.groups.offsets_partition(g) != broker.groups.offsets_partition(GROUP)
    )
    await txn_commit(broker, (TOPIC, 0, 10))
    marker(broker, commit=True, group_id=other_group)
    assert visible(broker.groups, GROUP) == {}
    marker(broker, commit=True)
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 10}


async def test_unknown_partitions_are_refused_one_by_one(broker: Broker) -> None:
    results = await txn_commit(broker, (TOPIC, 0, 10), ("no-such-topic", 0, 1))
    assert results == {
        (TOPIC, 0): ErrorCode.none,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    marker(broker, commit=True)
    assert visible(broker.groups, GROUP) == {(TOPIC, 0): 10}


# -- KIP-447 fencing ---------------------------------------------------------------------------


async def test_membership_is_checked_when_the_request_names_it(broker: Broker) -> None:
    groups = broker.groups
    generation, (member,) = await stable_group(groups, GROUP, 1)
    assert await txn_commit(broker, (TOPIC, 0, 1), generation=generation, member_id=member) == {
        (TOPIC, 0): ErrorCode.none
    }
    stale = await txn_commit(broker, (TOPIC, 0, 2), generation=generation - 1, member_id=member)
    assert stale == {(TOPIC, 0): ErrorCode.illegal_generation}
    unknown = await txn_commit(broker, (TOPIC, 0, 2), generation=generation, member_id="zombie")
    assert unknown == {(TOPIC, 0): ErrorCode.unknown_member_id}
    only_member = await txn_commit(broker, (TOPIC, 0, 2), member_id="zombie")
    assert only_member == {(TOPIC, 0): ErrorCode.unknown_member_id}
    # a member named with generation -1 is checked against the generation too
    no_generation = await txn_commit(broker, (TOPIC, 0, 2), member_id=member)
    assert no_generation == {(TOPIC, 0): ErrorCode.illegal_generation}
    # a producer that does not name its consumer (before KIP-447) is not checked
    assert await txn_commit(broker, (TOPIC, 0, 3)) == {(TOPIC, 0): ErrorCode.none}
    marker(broker, commit=True)
    assert visible(groups, GROUP) == {(TOPIC, 0): 3}


async def test_a_group_that_does_not_exist_or_is_empty(broker: Broker) -> None:
    """As Kafka 4.4: a generation into a group that does not exist is ILLEGAL_GENERATION
    (TxnOffsetCommit before v6); generation -1 creates the group and is accepted, as into any
    empty group, whatever member or instance it names; in the empty group a generation
    names a member it does not have."""
    groups = broker.groups

    async def commit(generation: int, member: str, instance: str | None = None) -> ErrorCode:
        [code] = (
            await groups.txn_commit(
                "absent", PRODUCER, EPOCH, generation, member, instance, offsets((TOPIC, 0, 1))
            )
        ).values()
        return code

    assert await commit(3, "m") == ErrorCode.illegal_generation
    assert await commit(0, "") == ErrorCode.illegal_generation
    assert "absent" not in groups.groups
    assert await commit(-1, "m", "i") == ErrorCode.none
    assert groups.groups["absent"].state == GroupState.EMPTY
    assert await commit(3, "m") == ErrorCode.unknown_member_id
    assert await commit(-1, "other") == ErrorCode.none
    assert groups.offsets.pending == {PRODUCER: {"absent": held(offsets((TOPIC, 0, 1)))}}


async def test_a_stale_generation_is_fenced(broker: Broker) -> None:
    """The KIP-447 zombie: a member that took its offsets (and generation) before a
    rebalance it has since gone through commits with the old generation."""
    groups = broker.groups
    generation, (first, second) = await stable_group(groups, GROUP, 2)
    groups.leave(GROUP, [(second, None)])
    rejoined = await bounded(join(groups, GROUP, first))
    assert rejoined["generation_id"] == generation + 1
    await bounded(sync(groups, GROUP, generation + 1, first, {first: b"all"}))
    stale = await txn_commit(broker, (TOPIC, 0, 5), generation=generation, member_id=first)
    assert stale == {(TOPIC, 0): ErrorCode.illegal_generation}
    removed = await txn_commit(broker, (TOPIC, 0, 5), generation=generation, member_id=second)
    assert removed == {(TOPIC, 0): ErrorCode.unknown_member_id}
    current = await txn_commit(broker, (TOPIC, 0, 6), generation=generation + 1, member_id=first)
    assert current == {(TOPIC, 0): ErrorCode.none}
    assert groups.offsets.pending == {PRODUCER: {GROUP: held(offsets((TOPIC, 0, 6)))}}
    marker(broker, commit=True)
    assert visible(groups, GROUP) == {(TOPIC, 0): 6}


async def test_a_replaced_static_instance_is_fenced(broker: Broker) -> None:
    groups = broker.groups
    old = await bounded(join(groups, GROUP, instance="instance-1"))
    new = await bounded(join(groups, GROUP, instance="instance-1"))
    results = await txn_commit(
        broker,
        (TOPIC, 0, 5),
        generation=old["generation_id"],
        member_id=old["member_id"],
        instance="instance-1",
    )
    assert results == {(TOPIC, 0): ErrorCode.fenced_instance_id}
    results = await txn_commit(
        broker,
        (TOPIC, 0, 5),
        generation=new["generation_id"],
        member_id=new["member_id"],
        instance="instance-1",
    )
    assert results == {(TOPIC, 0): ErrorCode.none}


# -- through the transaction coordinator -------------------------------------------------------


async def begin(broker: Broker, transactional_id: str) -> tuple[int, int]:
    """InitProducerId and AddOffsetsToTxn for GROUP, as their handlers do them."""
    coordinator = broker.transactions
    now = int(time.time() * 1000)
    init = rules.init_producer_id(
        coordinator.txns.get(transactional_id),
        transactional_id,
        60_000,
        -1,
        -1,
        now,
        coordinator.max_timeout_ms,
        broker.producer_ids.allocate,
    )
    assert await coordinator.apply(transactional_id, init) == ErrorCode.none
    partition = (CONSUMER_OFFSETS_TOPIC, broker.groups.offsets_partition(GROUP))
    add = rules.add_partitions(
        coordinator.txns.get(transactional_id),
        init.producer_id,
        init.producer_epoch,
        [partition],
        now,
    )
    assert await coordinator.apply(transactional_id, add) == ErrorCode.none
    return init.producer_id, init.producer_epoch


async def end(
    broker: Broker, transactional_id: str, producer: tuple[int, int], commit: bool
) -> None:
    coordinator = broker.transactions
    outcome = rules.end_txn(
        coordinator.txns.get(transactional_id),
        *producer,
        commit,
        int(time.time() * 1000),
        0,
        broker.producer_ids.allocate,
    )
    assert await coordinator.apply(transactional_id, outcome) == ErrorCode.none
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    await wait_until(lambda: coordinator.txns[transactional_id].state is done)


async def test_end_txn_commits_and_aborts_the_offsets(broker: Broker) -> None:
    groups = broker.groups
    generation, (member,) = await stable_group(groups, GROUP, 1)
    producer = await begin(broker, "pipeline-1")
    results = await groups.txn_commit(
        GROUP, *producer, generation, member, None, offsets((TOPIC, 0, 100))
    )
    assert results == {(TOPIC, 0): ErrorCode.none}
    assert stable_answers(broker, (TOPIC, 0)) == {(TOPIC, 0): ErrorCode.unstable_offset_commit}
    await end(broker, "pipeline-1", producer, commit=True)
    assert visible(groups, GROUP) == {(TOPIC, 0): 100}
    assert stable_answers(broker, (TOPIC, 0)) == {(TOPIC, 0): ErrorCode.none}

    producer = await begin(broker, "pipeline-1")
    await groups.txn_commit(GROUP, *producer, generation, member, None, offsets((TOPIC, 0, 200)))
    await end(broker, "pipeline-1", producer, commit=False)
    assert visible(groups, GROUP) == {(TOPIC, 0): 100}
    assert stable_answers(broker, (TOPIC, 0)) == {(TOPIC, 0): ErrorCode.none}


async def test_a_new_instance_aborts_the_old_ones_offsets(broker: Broker) -> None:
    """A crashed pipeline instance is replaced by one with the same transactional id: its
    InitProducerId aborts the open transaction and the pending offsets with it."""
    groups = broker.groups
    producer = await begin(broker, "pipeline-2")
    await groups.txn_commit(GROUP, *producer, -1, "", None, offsets((TOPIC, 1, 50)))
    coordinator = broker.transactions
    replacement = rules.init_producer_id(
        coordinator.txns.get("pipeline-2"),
        "pipeline-2",
        60_000,
        -1,
        -1,
        int(time.time() * 1000),
        coordinator.max_timeout_ms,
        broker.producer_ids.allocate,
    )
    # Ongoing: the epoch is bumped, the transaction aborted, and the client told to retry
    assert await coordinator.apply("pipeline-2", replacement) == ErrorCode.concurrent_transactions
    await wait_until(lambda: coordinator.txns["pipeline-2"].state is TxnState.COMPLETE_ABORT)
    assert groups.offsets.pending == {}
    assert visible(groups, GROUP) == {}
    assert set(stable_answers(broker, (TOPIC, 1)).values()) == {ErrorCode.none}


# -- restarts ----------------------------------------------------------------------------------


async def test_pending_offsets_survive_a_restart(broker: Broker, engine: MemoryEngine) -> None:
    await broker.groups.commit(GROUP, -1, "", None, offsets((OTHER_TOPIC, 0, 1)))
    await txn_commit(broker, (TOPIC, 0, 10), producer_id=PRODUCER)  # committed below
    await txn_commit(broker, (TOPIC, 1, 20), producer_id=PRODUCER + 1)  # aborted below
    await txn_commit(broker, (TOPIC, 2, 30), producer_id=PRODUCER + 2)  # open at the restart
    marker(broker, commit=True, producer_id=PRODUCER)
    marker(broker, commit=False, producer_id=PRODUCER + 1)
    await broker.stop()
    broker = await start_broker(engine)
    try:
        assert visible(broker.groups, GROUP) == {(OTHER_TOPIC, 0): 1, (TOPIC, 0): 10}
        assert stable_answers(broker, (TOPIC, 0), (TOPIC, 1), (TOPIC, 2)) == {
            (TOPIC, 0): ErrorCode.none,
            (TOPIC, 1): ErrorCode.none,
            (TOPIC, 2): ErrorCode.unstable_offset_commit,
        }
        marker(broker, commit=True, producer_id=PRODUCER + 2)
        assert visible(broker.groups, GROUP) == {
            (OTHER_TOPIC, 0): 1,
            (TOPIC, 0): 10,
            (TOPIC, 2): 30,
        }
    finally:
        await broker.stop()
