"""The leader's replication state for one partition: follower log end offsets from their
fetches, Kafka's caught-up rule, the high watermark as the ISR's minimum (never back), the
followers to drop after replica.lag.time.max.ms and to add back, and the acks=all answers
with min.insync.replicas."""

from __future__ import annotations

from lockgate.protocol.errors import ErrorCode
from lockgate.replication.leader import LeaderReplication, acks_all_answer, check_before_append

LAG = 30_000


def leader(high_watermark: int = 0, epoch_start: int = 0) -> LeaderReplication:
    return LeaderReplication(1, (1, 2, 3), (1, 2, 3), epoch_start, high_watermark, now_ms=0)


def test_high_watermark_is_the_isr_minimum_and_waits_for_every_member() -> None:
    state = leader()
    assert not state.update_high_watermark(leader_end=10)  # nobody has fetched yet
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    assert not state.update_high_watermark(leader_end=10)  # 3 is still unknown
    state.on_fetch(3, 6, leader_end=10, now_ms=1)
    assert state.update_high_watermark(leader_end=10) and state.high_watermark == 6
    state.on_fetch(3, 10, leader_end=12, now_ms=2)
    assert state.update_high_watermark(leader_end=12) and state.high_watermark == 10


def test_high_watermark_never_moves_back() -> None:
    state = leader(high_watermark=8)
    state.on_fetch(2, 5, leader_end=10, now_ms=1)
    state.on_fetch(3, 5, leader_end=10, now_ms=1)
    assert not state.update_high_watermark(leader_end=10)
    assert state.high_watermark == 8


def test_a_shrunk_isr_no_longer_holds_the_high_watermark() -> None:
    state = leader()
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    state.set_isr((1, 2))
    assert state.update_high_watermark(leader_end=10) and state.high_watermark == 10


def test_caught_up_by_reaching_the_end_or_the_previous_fetchs_end() -> None:
    state = leader()
    state.on_fetch(2, 10, leader_end=10, now_ms=1_000)  # at the end: caught up now
    assert state.followers[2].last_caught_up_ms == 1_000
    state.on_fetch(2, 10, leader_end=50, now_ms=20_000)  # behind the new end...
    assert state.followers[2].last_caught_up_ms == 1_000
    state.on_fetch(2, 50, leader_end=90, now_ms=40_000)  # ...but reached it: caught up at 20 s
    assert state.followers[2].last_caught_up_ms == 20_000


def test_followers_behind_too_long_leave_and_come_back_when_caught_up() -> None:
    state = leader(epoch_start=5)
    state.on_fetch(2, 10, leader_end=10, now_ms=LAG)
    assert state.lagging(now_ms=LAG, lag_time_max_ms=LAG) == set()  # at the start of the term
    assert state.lagging(now_ms=LAG + 1, lag_time_max_ms=LAG) == {3}  # never fetched
    state.set_isr((1, 2))
    state.update_high_watermark(leader_end=10)
    state.on_fetch(3, 4, leader_end=10, now_ms=LAG + 2)
    assert state.caught_up(alive=(1, 2, 3)) == set()  # below the epoch's start
    state.on_fetch(3, 10, leader_end=10, now_ms=LAG + 3)
    assert state.caught_up(alive=(1, 2, 3)) == {3}
    assert state.caught_up(alive=(1, 2)) == set()  # not registered: not added


def test_fetches_of_strangers_are_ignored() -> None:
    state = leader()
    state.on_fetch(9, 100, leader_end=100, now_ms=1)
    assert 9 not in state.followers


def test_min_insync_replicas_before_and_after_the_append() -> None:
    assert (
        check_before_append(-1, isr_size=1, min_insync_replicas=2) == ErrorCode.not_enough_replicas
    )
    assert check_before_append(1, isr_size=1, min_insync_replicas=2) == ErrorCode.none
    assert check_before_append(-1, isr_size=2, min_insync_replicas=2) == ErrorCode.none
    assert acks_all_answer(11, high_watermark=10, isr_size=3, min_insync_replicas=2) is None
    assert acks_all_answer(11, high_watermark=11, isr_size=3, min_insync_replicas=2) == 0
    assert (
        acks_all_answer(11, high_watermark=11, isr_size=1, min_insync_replicas=2)
        == ErrorCode.not_enough_replicas_after_append
    )


def test_consumers_may_be_sent_to_in_sync_followers_holding_the_offset() -> None:
    """KIP-392: the followers a consumer reading at an offset may be sent to are those in the
    ISR whose log holds it (log start at or below it, log end at or past it)."""
    state = LeaderReplication(1, (1, 2, 3, 4), (1, 2, 3), 0, 0, now_ms=0)
    assert state.may_serve(0) == []  # no follower has fetched yet
    state.on_fetch(2, 10, leader_end=10, now_ms=1, log_start_offset=0)
    state.on_fetch(3, 6, leader_end=10, now_ms=1, log_start_offset=4)
    state.on_fetch(4, 10, leader_end=10, now_ms=1, log_start_offset=0)  # not in the ISR
    assert state.may_serve(0) == [2]  # 3's log starts at 4
    assert state.may_serve(4) == state.may_serve(6) == [2, 3]
    assert state.may_serve(7) == [2]  # past 3's log end
    assert state.may_serve(11) == []
    state.set_isr((1, 2, 3, 4))
    assert state.may_serve(8) == [2, 4]
    state.on_fetch(2, 10, leader_end=10, now_ms=2)  # an older follower tells no log start
    assert state.may_serve(0) == [2, 4]
