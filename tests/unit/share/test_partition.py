"""The share partition's state machine (share/partition.py), one rule per test, and a
hypothesis run against a per-offset model of acquire / acknowledge / expire / release and the
start offset."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.share.records import StateBatch
from lockgate.protocol.errors import ErrorCode
from lockgate.share.partition import (
    ACCEPT,
    GAP,
    RECORD_LIMIT,
    REJECT,
    RELEASE,
    RENEW,
    AbortedRange,
    AckBatch,
    AcknowledgeError,
    AcquiredRange,
    Limits,
    LogBatch,
    RecordState,
    SharePartition,
    validate_ack_batches,
)

LIMITS = Limits(delivery_count_limit=3, record_lock_duration_ms=1000, max_record_locks=100)
LATER = 10**9  # past every lock acquired at time 0


def log(*sizes: int, start: int = 0) -> list[LogBatch]:
    batches = []
    for size in sizes:
        batches.append(LogBatch(start, start + size - 1))
        start += size
    return batches


def ack(share: SharePartition, member: str, first: int, last: int, *types: int) -> None:
    transition = share.acknowledge(member, [AckBatch(first, last, types)], 0, LIMITS)
    share.commit(transition)


def test_whole_batches_may_pass_max_records() -> None:
    share = SharePartition(0)
    got = share.acquire("a", log(3, 3, 3), 4, 0, LIMITS)
    assert got.ranges == (AcquiredRange(0, 5, 1),)
    assert share.end_offset == 5 and share.next_fetch_offset() == 6


def test_record_limit_never_passes_max_records() -> None:
    share = SharePartition(0)
    got = share.acquire("a", log(3, 3), 4, 0, LIMITS, mode=RECORD_LIMIT)
    assert got.ranges == (AcquiredRange(0, 3, 1),)
    # the whole log batch is cached; the rest is available to the next fetch
    assert share.end_offset == 5 and share.next_fetch_offset() == 4
    assert share.state_of(4) is not None and share.state_of(4).state == RecordState.AVAILABLE  # type: ignore[union-attr]


def test_batch_size_cuts_ranges_at_batch_boundaries() -> None:
    share = SharePartition(0)
    got = share.acquire("a", log(2, 2, 2), 100, 0, LIMITS, batch_size=3)
    assert got.ranges == (AcquiredRange(0, 3, 1), AcquiredRange(4, 5, 1))


def test_ranges_and_writes_are_runs_of_one_delivery_count_and_state() -> None:
    # the acquired ranges and the persisted ranges are maximal runs: broken only by a gap,
    # another delivery count, another state, or (ranges) a batch-size cut at a log batch's end
    share = SharePartition(0)
    assert share.acquire("a", log(4000), 500, 0, LIMITS).ranges == (AcquiredRange(0, 3999, 1),)
    ack(share, "a", 10, 19, RELEASE)
    got = share.acquire("b", log(4000), 500, 0, LIMITS, read_from=10, batch_size=4)
    assert got.ranges == (AcquiredRange(10, 19, 2),)  # one log batch: never cut inside it
    types = (ACCEPT,) * 5 + (REJECT,) * 3 + (RELEASE,) * 2
    transition = share.acknowledge("b", [AckBatch(10, 19, types)], 0, LIMITS)
    assert transition.write is not None
    assert transition.write.batches == (
        StateBatch(10, 14, RecordState.ACKNOWLEDGED, 2),
        StateBatch(15, 17, RecordState.ARCHIVED, 2),
        StateBatch(18, 19, RecordState.AVAILABLE, 2),
    )
    share.commit(transition)
    transition = share.acknowledge(
        "a", [AckBatch(0, 9, (ACCEPT,)), AckBatch(20, 29, (ACCEPT,))], 0, LIMITS
    )
    assert transition.write is not None  # offsets 10-19 between: two runs, not one
    assert transition.write.batches == (
        StateBatch(0, 9, RecordState.ACKNOWLEDGED, 1),
        StateBatch(20, 29, RecordState.ACKNOWLEDGED, 1),
    )
    share.commit(transition)
    # the start offset moved inside the log batch: the walk starts there, not at the batch
    assert share.start_offset == 18
    assert [offset for offset, _ in share.offsets()][:3] == [18, 19, 20]
    assert share.next_fetch_offset() == 18
    assert share.next_deadline() == LIMITS.record_lock_duration_ms


def test_in_flight_limit_stops_new_records_only() -> None:
    limits = Limits(max_record_locks=4)
    share = SharePartition(0)
    assert share.acquire("a", log(3, 3, 3), 100, 0, limits).ranges == (AcquiredRange(0, 5, 1),)
    assert not share.can_acquire(limits)
    assert share.acquire("b", log(3, start=6), 100, 0, limits).ranges == ()
    ack(share, "a", 0, 0, RELEASE)
    assert share.can_acquire(limits)
    got = share.acquire("b", log(3, 3, 3), 100, 0, limits, read_from=0)
    assert got.ranges == (AcquiredRange(0, 0, 2),)


def test_acknowledge_types_and_start_offset() -> None:
    share = SharePartition(0)
    share.acquire("a", log(4), 10, 0, LIMITS)
    transition = share.acknowledge("a", [AckBatch(0, 3, (ACCEPT, REJECT, RELEASE, GAP))], 0, LIMITS)
    assert transition.write is not None
    # written before it applies: the start offset it will have, the changed ranges
    assert transition.write.start_offset == 2
    assert transition.write.batches == (
        StateBatch(0, 0, 2, 1),
        StateBatch(1, 1, 4, 1),
        StateBatch(2, 2, 0, 1),
        StateBatch(3, 3, 4, 1),
    )
    assert transition.write.delivery_complete_count == 1
    assert share.start_offset == 0  # pending until the write commits
    share.commit(transition)
    assert share.start_offset == 2
    assert share.next_fetch_offset() == 2


def test_pending_records_are_neither_acquired_nor_acknowledged() -> None:
    share = SharePartition(0)
    share.acquire("a", log(2), 10, 0, LIMITS)
    transition = share.acknowledge("a", [AckBatch(0, 1, (RELEASE,))], 0, LIMITS)
    try:
        share.acknowledge("a", [AckBatch(0, 0, (ACCEPT,))], 0, LIMITS)
        raise AssertionError("acknowledged twice")
    except AcknowledgeError as exc:
        assert exc.code == ErrorCode.invalid_record_state
    assert share.acquire("b", log(2), 10, 0, LIMITS, read_from=0).ranges == ()
    share.rollback(transition, 10, LIMITS)  # the write failed, locks still valid: ACQUIRED
    assert share.state_of(0).state == RecordState.ACQUIRED  # type: ignore[union-attr]


def test_rollback_after_lock_expiry_releases() -> None:
    share = SharePartition(0)
    share.acquire("a", log(1), 10, 0, LIMITS)
    transition = share.acknowledge("a", [AckBatch(0, 0, (ACCEPT,))], 0, LIMITS)
    assert share.expire(5000, LIMITS) is None  # under an acknowledgement: left alone
    share.rollback(transition, 5000, LIMITS)
    assert share.state_of(0).state == RecordState.AVAILABLE  # type: ignore[union-attr]


def test_acknowledge_refusals() -> None:
    share = SharePartition(0)
    try:
        share.acknowledge("a", [AckBatch(0, 0, (ACCEPT,))], 0, LIMITS)
        raise AssertionError("empty cache")
    except AcknowledgeError as exc:
        assert exc.code == ErrorCode.invalid_record_state
    share.acquire("a", log(2), 10, 0, LIMITS)
    for member, batch, code in (
        ("b", AckBatch(0, 1, (ACCEPT,)), ErrorCode.invalid_record_state),
        ("a", AckBatch(0, 2, (ACCEPT,)), ErrorCode.invalid_request),
        ("a", AckBatch(5, 6, (ACCEPT,)), ErrorCode.invalid_request),
    ):
        try:
            share.acknowledge(member, [batch], 0, LIMITS)
            raise AssertionError(batch)
        except AcknowledgeError as exc:
            assert exc.code == code
    no_renew = Limits(renew_enabled=False)
    try:
        share.acknowledge("a", [AckBatch(0, 0, (RENEW,))], 0, no_renew)
        raise AssertionError("renew disabled")
    except AcknowledgeError as exc:
        assert exc.code == ErrorCode.invalid_record_state
    # nothing of a refused acknowledgement applied
    assert share.state_of(0).state == RecordState.ACQUIRED  # type: ignore[union-attr]
    assert not share.state_of(0).pending  # type: ignore[union-attr]


def test_validation_order() -> None:
    assert validate_ack_batches([AckBatch(2, 1, (1,))], 2, False) is not None
    assert validate_ack_batches([AckBatch(3, 4, (1,)), AckBatch(0, 1, (1,))], 2, False)
    assert validate_ack_batches([AckBatch(0, 1, ())], 2, False)
    assert validate_ack_batches([AckBatch(0, 1, (1, 1, 1))], 2, False)
    assert validate_ack_batches([AckBatch(0, 1, (4,))], 1, True)
    assert validate_ack_batches([AckBatch(0, 1, (4,))], 2, False)
    assert validate_ack_batches([AckBatch(0, 1, (4,))], 2, True) is None
    assert validate_ack_batches([AckBatch(0, 1, (1, 2)), AckBatch(2, 2, (3,))], 1, False) is None


def test_renew_restarts_the_lock_and_writes_nothing() -> None:
    share = SharePartition(0)
    share.acquire("a", log(1), 10, 0, LIMITS)
    transition = share.acknowledge("a", [AckBatch(0, 0, (RENEW,))], 900, LIMITS)
    assert transition.write is None and transition.done
    assert share.expire(1500, LIMITS) is None
    assert share.next_deadline() == 1900


def test_lock_expiry_and_delivery_limit() -> None:
    share = SharePartition(0)
    for attempt in (1, 2, 3):
        got = share.acquire("a", log(1), 10, attempt * 10_000, LIMITS, read_from=0)
        assert got.ranges == (AcquiredRange(0, 0, attempt),)
        write = share.expire(attempt * 10_000 + 1000, LIMITS)
        assert write is not None
    # the third delivery was the last: archived, the start offset moves past it
    assert write is not None and write.batches == (StateBatch(0, 0, 4, 3),)
    assert share.start_offset == 1


def test_records_near_the_delivery_limit_go_in_fewer_numbers() -> None:
    limits = Limits(delivery_count_limit=6, record_lock_duration_ms=1000)
    share = SharePartition(0)
    share.acquire("a", log(8), 8, 0, limits)
    for delivered in (1, 2):  # below half the limit: the whole batch again
        assert share.expire(LATER, limits) is not None
        got = share.acquire("a", log(8), 8, 0, limits, read_from=0)
        assert got.ranges == (AcquiredRange(0, 7, delivered + 1),)
    # delivered 3 times (half the limit): half as many, then a quarter
    share.expire(LATER, limits)
    assert share.acquire("a", log(8), 8, 0, limits, read_from=0).ranges == (AcquiredRange(0, 3, 4),)
    share.acquire("b", log(8), 8, 0, limits, read_from=0)  # 4-7 once more
    share.expire(LATER, limits)
    assert share.acquire("a", log(8), 8, 0, limits, read_from=0).ranges == (AcquiredRange(0, 1, 5),)
    # on its last delivery a record goes alone
    share.expire(LATER, limits)
    assert share.acquire("a", log(8), 8, 0, limits, read_from=0).ranges == (AcquiredRange(0, 0, 6),)


def test_release_member_counts_the_delivery() -> None:
    share = SharePartition(0)
    share.acquire("a", log(2), 10, 0, LIMITS)
    share.acquire("b", log(1, start=2), 10, 0, LIMITS)
    write = share.release_member("a", LIMITS)
    assert write is not None and write.batches == (StateBatch(0, 1, 0, 1),)
    assert share.state_of(2).member == "b"  # type: ignore[union-attr]
    assert share.acquire("c", log(2, 1), 10, 0, LIMITS, read_from=0).ranges == (
        AcquiredRange(0, 1, 2),
    )
    # at the delivery limit: archived, as after a lock expiry
    limits = Limits(delivery_count_limit=2)
    share = SharePartition(0)
    share.acquire("a", log(1), 10, 0, limits)
    share.expire(limits.record_lock_duration_ms, limits)
    assert share.acquire("a", log(1), 10, 0, limits, read_from=0).ranges == (
        AcquiredRange(0, 0, 2),
    )
    write = share.release_member("a", limits)
    assert write is not None and write.batches == (StateBatch(0, 0, 4, 2),)
    assert share.start_offset == 1  # (archived: done, gone from the window)


def test_load_keeps_states_and_redelivers_gaps() -> None:
    share = SharePartition.loaded(
        5, 3, [StateBatch(3, 6, 2, 1), StateBatch(9, 9, 0, 2), StateBatch(10, 10, 4, 5)]
    )
    # 5-6 acknowledged: the start offset moves past them
    assert share.start_offset == 7 and share.state_epoch == 3
    got = share.acquire("a", log(4, 2, start=7), 100, 0, Limits(), read_from=7)
    # 7-8 never written (acquired by a previous leader), 9 with its written count, 11-12 new
    assert got.ranges == (AcquiredRange(7, 8, 1), AcquiredRange(9, 9, 3), AcquiredRange(11, 12, 1))


def test_read_committed_archives_aborted_and_keeps_markers() -> None:
    share = SharePartition(0)
    batches = [
        LogBatch(0, 1, producer_id=7, transactional=True),
        LogBatch(2, 2, producer_id=7, transactional=True, control=True),  # abort marker
        LogBatch(3, 4),
    ]
    got = share.acquire("a", batches, 100, 0, LIMITS, aborted=[AbortedRange(7, 0, 2)])
    assert got.ranges == (AcquiredRange(2, 4, 1),)
    assert got.write is not None and got.write.batches == (StateBatch(0, 1, 4, 0),)
    assert share.start_offset == 2


def test_records_gone_from_the_log_are_archived() -> None:
    share = SharePartition(0)
    share.acquire("a", log(3), 10, 0, LIMITS)
    share.expire(LATER, LIMITS)
    # compaction removed 0-1: the read from 0 returns the batch at 2 only
    got = share.acquire("b", [LogBatch(2, 2)], 10, 0, LIMITS, read_from=0)
    assert got.ranges == (AcquiredRange(2, 2, 2),)
    assert share.start_offset == 2


def test_log_start_moving_past_the_start_offset() -> None:
    share = SharePartition(0)
    share.acquire("a", log(3), 10, 0, LIMITS)
    write = share.move_to_log_start(2)
    assert write is not None and write.start_offset == 2
    assert share.start_offset == 2


def test_a_rolled_back_acknowledgement_below_a_moved_log_start_is_archived() -> None:
    share = SharePartition(0)
    share.acquire("a", log(5), 10, 0, LIMITS)
    transition = share.acknowledge("a", [AckBatch(0, 4, (ACCEPT,))], 0, LIMITS)
    share.move_to_log_start(3)  # (retention or DeleteRecords while the write is under way)
    share.rollback(transition, 10, LIMITS)  # the write failed, locks still valid
    # 3-4 are ACQUIRED again; 0-2 are gone from the log: archived, not left holding a lock
    # that no expiry below the start offset would ever release (the timer would spin on it)
    states = {o: share.state_of(o) for o in range(5)}
    assert [states[o].state for o in (3, 4)] == [RecordState.ACQUIRED] * 2  # type: ignore[union-attr]
    below = [states[o] for o in (0, 1, 2)]
    assert all(r is None or r.state == RecordState.ARCHIVED for r in below)
    assert share.next_deadline() == LIMITS.record_lock_duration_ms
    share.commit(share.acknowledge("a", [AckBatch(3, 4, (ACCEPT,))], 20, LIMITS))
    assert share.next_deadline() is None


# -- a per-offset model ------------------------------------------------------------------


@dataclass
class Model:
    state: dict[int, tuple[RecordState, int, str, int]]

    def get(self, offset: int) -> tuple[RecordState, int, str, int]:
        return self.state.get(offset, (RecordState.AVAILABLE, 0, "", 0))

    def start(self) -> int:
        offset = 0
        while self.get(offset)[0] in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            offset += 1
        return offset

    def release(self, offset: int) -> None:
        _state, count, _member, _deadline = self.get(offset)
        target = (
            RecordState.ARCHIVED if count >= LIMITS.delivery_count_limit else RecordState.AVAILABLE
        )
        self.state[offset] = (target, count, "", 0)


LOG = log(2, 3, 1, 4, 2)  # offsets 0-11
LAST = 11
MEMBERS = ("a", "b")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 6)),
        st.tuples(
            st.just("ack"),
            st.sampled_from(MEMBERS),
            st.integers(0, LAST),
            st.integers(0, 3),
            st.sampled_from([ACCEPT, RELEASE, REJECT, GAP]),
        ),
        st.tuples(st.just("expire"), st.integers(0, 2000)),
        st.tuples(st.just("release"), st.sampled_from(MEMBERS)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_against_a_per_offset_model(ops: list[tuple[object, ...]]) -> None:
    share = SharePartition(0)
    model = Model({})
    now = 0
    for op in ops:
        kind = op[0]
        if kind == "acquire":
            member, max_records = str(op[1]), int(op[2])  # type: ignore[call-overload]
            read_from = share.next_fetch_offset()
            expected: list[tuple[int, int]] = []
            cap, exact = max_records, False
            for batch in LOG:
                if batch.last_offset < read_from:
                    continue
                if len(expected) >= cap:
                    break
                for offset in range(max(batch.first_offset, model.start()), batch.last_offset + 1):
                    state, count, _m, _d = model.get(offset)
                    if state == RecordState.AVAILABLE:
                        if count >= LIMITS.delivery_count_limit - 1:  # its last delivery: alone
                            cap, exact = 1, True
                        if exact and len(expected) >= cap:
                            break
                        deadline = now + LIMITS.record_lock_duration_ms
                        model.state[offset] = (RecordState.ACQUIRED, count + 1, member, deadline)
                        expected.append((offset, count + 1))
            batches = [b for b in LOG if b.last_offset >= read_from]
            got = share.acquire(member, batches, max_records, now, LIMITS, read_from=read_from)
            flat = [
                (offset, r.delivery_count)
                for r in got.ranges
                for offset in range(r.first_offset, r.last_offset + 1)
            ]
            assert flat == expected
        elif kind == "ack":
            member, first, span, ack_type = str(op[1]), int(op[2]), int(op[3]), int(op[4])  # type: ignore[call-overload]
            last = min(first + span, LAST)
            start = model.start()
            cached_last = share.last_cached
            allowed = last < start or (
                share.batches != []
                and first <= cached_last
                and last <= cached_last
                and all(
                    model.get(o)[0] == RecordState.ACQUIRED and model.get(o)[2] == member
                    for o in range(max(first, start), last + 1)
                )
            )
            try:
                ack(share, member, first, last, ack_type)
                assert allowed
            except AcknowledgeError:
                assert not allowed
                continue
            for offset in range(max(first, start), last + 1):
                _s, count, _m, _d = model.get(offset)
                if ack_type == ACCEPT:
                    model.state[offset] = (RecordState.ACKNOWLEDGED, count, "", 0)
                elif ack_type == RELEASE:
                    model.release(offset)
                else:
                    model.state[offset] = (RecordState.ARCHIVED, count, "", 0)
        elif kind == "expire":
            now += int(op[1])  # type: ignore[call-overload]
            share.expire(now, LIMITS)
            for offset, (state, _c, _m, deadline) in list(model.state.items()):
                if state == RecordState.ACQUIRED and deadline <= now:
                    model.release(offset)
        else:
            member = str(op[1])
            share.release_member(member, LIMITS)
            for offset, (state, _c, holder, _d) in list(model.state.items()):
                if state == RecordState.ACQUIRED and holder == member:
                    model.release(offset)
        assert share.start_offset == model.start()
        done = sum(
            1
            for offset, (state, *_rest) in model.state.items()
            if offset >= model.start() and state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        )
        assert share.delivery_complete_count() == done
        for offset, record in share.offsets():
            assert (record.state, record.delivery_count, record.member) == model.get(offset)[:3]
            assert record.delivery_count <= LIMITS.delivery_count_limit
