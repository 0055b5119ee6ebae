"""Where a follower cuts its log after a leader change (KIP-101, KIP-279), with the leader's
OffsetForLeaderEpoch answer and the follower's own epoch history."""

from __future__ import annotations

from lockgate.replication.follower import AskAgain, Truncate, after_leader_answer

# the follower's history: epoch 1 from 0, epoch 2 from 10, epoch 4 from 20; its log ends at 30
EPOCHS = [(1, 0), (2, 10), (4, 20)]


def own_end(epoch: int) -> tuple[int, int]:
    below = [(e, s) for e, s in EPOCHS if e <= epoch]
    if not below:
        return -1, -1
    e = below[-1][0]
    later = [s for e2, s in EPOCHS if e2 > e]
    return e, later[0] if later else 30


def answer(leader_epoch: int, leader_end: int, asked: int = 4) -> Truncate | AskAgain:
    return after_leader_answer(asked, leader_epoch, leader_end, 30, own_end, high_watermark=8)


def test_the_leader_has_our_epoch_cut_where_it_ended_there() -> None:
    assert answer(4, 25) == Truncate(25)  # the leader kept less of epoch 4
    assert answer(4, 40) == Truncate(30)  # the leader has more: nothing to cut


def test_an_older_epoch_we_share_cut_at_the_earlier_end() -> None:
    # the leader never had epoch 4; its epoch 2 ended at 18, ours at 20
    assert answer(2, 18) == Truncate(18)
    assert answer(2, 22) == Truncate(20)


def test_an_epoch_we_never_had_ask_again_about_our_older_one() -> None:
    # the leader's answer is epoch 3 (ending at 15), which this follower never saw
    assert answer(3, 15) == AskAgain(2, 20)
    # ... and the second round settles it
    assert answer(2, 15, asked=2) == Truncate(15)


def test_no_epoch_that_old_here_the_leaders_end_bounds_it() -> None:
    assert answer(0, 5) == Truncate(5)


def test_the_leader_knows_no_epoch_that_old_keep_the_high_watermark() -> None:
    assert answer(-1, -1) == Truncate(8)
