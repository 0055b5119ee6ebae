"""The pure parts of lockgate's share consumer (KIP-932) without sockets: acknowledgements
become ascending AcknowledgementBatches (one per contiguous run, one type or one per offset)
and back; the share session's epochs (0 opens, N → N+1, wrap to 1, -1 closes) and which
partitions a ShareFetch lists or forgets, checked against a model of the broker's session;
records cut to the acquired ranges with their delivery counts, and gaps for control batches."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.client.errors import CorruptRecordError
from lockgate.client.share_records import AcquiredRange, decode_acquired
from lockgate.client.share_session import (
    FINAL_EPOCH,
    MAX_EPOCH,
    AckBatch,
    AcknowledgeType,
    ShareSession,
    TopicIdPartition,
    ack_batches,
    acknowledge_wire,
    batches_offsets,
    next_epoch,
)
from lockgate.protocol.records import assign_offset, build_batch, build_control_batch

ACCEPT, RELEASE, REJECT, GAP = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.GAP,
)
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
P0, P1, Q0 = TopicIdPartition(T1, 0), TopicIdPartition(T1, 1), TopicIdPartition(T2, 0)

# ---------------------------------------------------------------------------------------------
# Acknowledgement batches


def test_a_contiguous_run_of_one_type_is_one_batch_with_one_type() -> None:
    assert ack_batches({5: ACCEPT, 6: ACCEPT, 7: ACCEPT}) == [AckBatch(5, 7, (ACCEPT,))]


def test_a_run_of_mixed_types_carries_one_type_per_offset() -> None:
    assert ack_batches({5: ACCEPT, 6: RELEASE, 7: ACCEPT}) == [
        AckBatch(5, 7, (ACCEPT, RELEASE, ACCEPT))
    ]


def test_a_hole_in_the_offsets_starts_a_new_batch() -> None:
    assert ack_batches({9: REJECT, 1: ACCEPT, 2: ACCEPT, 4: GAP}) == [
        AckBatch(1, 2, (ACCEPT,)),
        AckBatch(4, 4, (GAP,)),
        AckBatch(9, 9, (REJECT,)),
    ]


def test_nothing_to_acknowledge_is_no_batch() -> None:
    assert ack_batches({}) == []


def test_the_wire_shape_groups_partitions_by_topic_id() -> None:
    wire = acknowledge_wire({Q0: [AckBatch(3, 3, (REJECT,))], P1: [AckBatch(0, 1, (ACCEPT,))]})
    assert wire == [
        {
            "topic_id": T1,
            "partitions": [
                {
                    "partition_index": 1,
                    "acknowledgement_batches": [
                        {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}
                    ],
                }
            ],
        },
        {
            "topic_id": T2,
            "partitions": [
                {
                    "partition_index": 0,
                    "acknowledgement_batches": [
                        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [3]}
                    ],
                }
            ],
        },
    ]


acks_strategy = st.dictionaries(
    st.integers(min_value=0, max_value=60),
    st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, AcknowledgeType.RENEW]),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(acks_strategy)
def test_batches_say_exactly_the_acknowledgements_and_follow_the_brokers_rules(
    acks: dict[int, AcknowledgeType],
) -> None:
    batches = ack_batches(acks)
    assert batches_offsets(batches) == acks
    previous_last = -1
    for batch in batches:
        count = batch.last_offset - batch.first_offset + 1
        # the checks Kafka's ShareFetch/ShareAcknowledge make on every batch
        assert batch.first_offset <= batch.last_offset
        assert batch.first_offset > previous_last  # ascending, not overlapping
        assert batch.types
        assert len(batch.types) in (1, count)
        if len(batch.types) > 1:
            assert len(set(batch.types)) > 1  # a uniform run says its type once
        assert batch.first_offset > previous_last + 1 or previous_last < 0  # runs are maximal
        previous_last = batch.last_offset


# ---------------------------------------------------------------------------------------------
# Session epochs


def test_epochs_go_zero_one_two_and_wrap_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(1) == 2
    assert next_epoch(MAX_EPOCH) == 1


def test_the_first_fetch_opens_a_session_with_every_wanted_partition_and_no_acks() -> None:
    session = ShareSession()
    plan = session.plan_fetch({P0, P1}, {P0: [AckBatch(0, 0, (ACCEPT,))]})
    assert plan.epoch == 0
    assert dict(plan.topics) == {P0: (), P1: ()}
    assert plan.forgotten == frozenset() and plan.acknowledged == frozenset()
    assert session.plan_acknowledge() is None  # ShareAcknowledge cannot open a session
    session.fetched(plan)
    assert session.epoch == 1 and session.partitions == {P0, P1}


def test_an_incremental_fetch_lists_new_partitions_and_acks_and_forgets_dropped_ones() -> None:
    session = ShareSession(epoch=4, partitions=frozenset({P0, P1}))
    ack = (AckBatch(7, 8, (ACCEPT,)),)
    plan = session.plan_fetch({P0, Q0}, {P0: ack})
    assert plan.epoch == 4
    assert dict(plan.topics) == {P0: ack, Q0: ()}
    assert plan.forgotten == {P1}
    topics, forgotten = plan.wire()
    assert forgotten == [{"topic_id": T1, "partitions": [1]}]
    assert [t["topic_id"] for t in topics] == [T1, T2]
    session.fetched(plan)
    assert session.epoch == 5 and session.partitions == {P0, Q0}


def test_a_partition_listed_only_for_its_acks_is_forgotten_at_once() -> None:
    session = ShareSession(epoch=2, partitions=frozenset({P0}))
    ack = (AckBatch(3, 3, (REJECT,)),)
    plan = session.plan_fetch({P0}, {Q0: ack})
    assert dict(plan.topics) == {Q0: ack}
    assert plan.forgotten == {Q0}
    session.fetched(plan)
    assert session.partitions == {P0}


def test_acknowledge_draws_from_the_same_epochs_and_final_closes() -> None:
    session = ShareSession(epoch=3, partitions=frozenset({P0}))
    assert session.plan_acknowledge() == 3
    session.acknowledged(3)
    assert session.epoch == 4 and session.partitions == {P0}
    session.acknowledged(FINAL_EPOCH)
    assert session.epoch == 0 and not session.partitions


def test_a_reset_opens_the_next_session_from_scratch() -> None:
    session = ShareSession(epoch=9, partitions=frozenset({P0}))
    session.reset()
    plan = session.plan_fetch({P1}, {P0: [AckBatch(1, 1, (ACCEPT,))]})
    assert plan.epoch == 0 and dict(plan.topics) == {P1: ()}


class BrokerSession:
    """Kafka's side (SharePartitionManager.newContext, acknowledgeSessionUpdate), as the
    research notes state it: epoch 0 replaces the session, N must equal the expected epoch,
    Topics are added, forgotten ones removed, acks at epoch 0 are refused."""

    def __init__(self) -> None:
        self.expected: int | None = None
        self.partitions: set[TopicIdPartition] = set()

    def fetch(self, epoch: int, topics: dict[TopicIdPartition, tuple[AckBatch, ...]],
              forgotten: frozenset[TopicIdPartition]) -> str:  # fmt: skip
        if epoch == 0:
            if any(topics.values()):
                return "INVALID_REQUEST"
            self.partitions = set(topics)
            self.expected = 1
            return "NONE"
        if self.expected is None:
            return "SHARE_SESSION_NOT_FOUND"
        if epoch != self.expected:
            return "INVALID_SHARE_SESSION_EPOCH"
        self.partitions |= set(topics)
        self.partitions -= forgotten
        self.expected = next_epoch(epoch)
        return "NONE"

    def acknowledge(self, epoch: int) -> str:
        if epoch == 0:
            return "INVALID_SHARE_SESSION_EPOCH"
        if self.expected is None:
            return "SHARE_SESSION_NOT_FOUND"
        if epoch != self.expected:
            return "INVALID_SHARE_SESSION_EPOCH"
        self.expected = next_epoch(epoch)
        return "NONE"


partition_sets = st.frozensets(st.sampled_from([P0, P1, Q0]))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("fetch"), partition_sets, partition_sets),
        st.tuples(st.just("ack"), partition_sets, partition_sets),
        st.tuples(st.just("broker_lost_session"), partition_sets, partition_sets),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_client_session_stays_in_step_with_the_brokers(
    steps: list[tuple[str, frozenset[TopicIdPartition], frozenset[TopicIdPartition]]],
) -> None:
    client, broker = ShareSession(), BrokerSession()
    for kind, wanted, acked in steps:
        acks = {p: (AckBatch(0, 0, (ACCEPT,)),) for p in acked}
        if kind == "broker_lost_session":
            broker.expected = None  # e.g. the broker restarted or evicted it
            continue
        if kind == "fetch":
            plan = client.plan_fetch(wanted, acks)
            answer = broker.fetch(plan.epoch, dict(plan.topics), plan.forgotten)
            assert answer != "INVALID_REQUEST"  # never acks on an opening request
            if answer == "NONE":
                client.fetched(plan)
                # the broker's session now fetches exactly what the client wants
                assert broker.partitions == set(wanted) == set(client.partitions)
            else:
                assert answer == "SHARE_SESSION_NOT_FOUND"  # only after the broker lost it
                client.reset()
        else:
            epoch = client.plan_acknowledge()
            if epoch is None:
                continue
            answer = broker.acknowledge(epoch)
            if answer == "NONE":
                client.acknowledged(epoch)
            else:
                assert answer == "SHARE_SESSION_NOT_FOUND"
                client.reset()
        assert client.epoch in (0, broker.expected)


# ---------------------------------------------------------------------------------------------
# Records against acquired ranges


def _batch(base: int, count: int) -> bytes:
    return build_batch(
        [(None, f"v{base + i}".encode()) for i in range(count)], base_offset=base, timestamp_ms=7
    )


def test_only_acquired_offsets_are_returned_with_their_delivery_counts() -> None:
    data = _batch(0, 5) + _batch(5, 5)
    got = decode_acquired(
        "t", 0, data, [AcquiredRange(2, 3, 1), AcquiredRange(6, 8, 3)], check_crcs=True
    )
    assert [(r.offset, r.delivery_count, r.value) for r in got.records] == [
        (2, 1, b"v2"),
        (3, 1, b"v3"),
        (6, 3, b"v6"),
        (7, 3, b"v7"),
        (8, 3, b"v8"),
    ]
    assert got.gaps == []


def test_acquired_offsets_of_a_control_batch_are_gaps() -> None:
    marker = bytearray(build_control_batch(5, 0, True, 0, 9))
    assign_offset(marker, 3, 0)
    data = _batch(0, 3) + bytes(marker) + _batch(4, 2)
    got = decode_acquired("t", 1, data, [AcquiredRange(0, 5, 1)])
    assert [r.offset for r in got.records] == [0, 1, 2, 4, 5]
    assert got.gaps == [3]


def test_acquired_offsets_past_the_data_are_neither_records_nor_gaps() -> None:
    data = _batch(0, 2)
    cut = _batch(2, 2)[:-3]  # a trailing partial batch
    got = decode_acquired("t", 0, data + cut, [AcquiredRange(0, 3, 1)])
    assert [r.offset for r in got.records] == [0, 1]
    assert got.gaps == []


def test_a_corrupt_batch_is_refused() -> None:
    data = bytearray(_batch(0, 2))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_acquired("t", 0, bytes(data), [AcquiredRange(0, 1, 1)])
