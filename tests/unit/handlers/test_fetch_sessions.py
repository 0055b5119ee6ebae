"""Incremental fetch session cache (KIP-227): ids, epochs, LRU eviction."""

from __future__ import annotations

import itertools

import pytest

from lockgate.handlers.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    SessionPartition,
    next_epoch,
)


def test_epoch_constants() -> None:
    assert (INITIAL_EPOCH, FINAL_EPOCH) == (0, -1)


def test_new_sessions_have_distinct_positive_ids_and_epoch_1() -> None:
    cache = FetchSessionCache(10)
    sessions = [cache.create() for _ in range(5)]
    ids = [s.session_id for s in sessions if s is not None]
    assert len(set(ids)) == 5
    assert all(0 < i < 2**31 for i in ids)
    assert all(s is not None and s.epoch == 1 and s.partitions == {} for s in sessions)


def test_get_and_remove() -> None:
    cache = FetchSessionCache(10)
    session = cache.create()
    assert session is not None
    session.partitions[("t", 0)] = SessionPartition(fetch_offset=5, max_bytes=100)
    found = cache.get(session.session_id)
    assert found is session
    assert found.partitions[("t", 0)].sent_high_watermark == -1
    assert cache.get(session.session_id + 1000) is None
    cache.remove(session.session_id)
    assert cache.get(session.session_id) is None
    cache.remove(session.session_id)  # removing twice is harmless


def test_no_slots_means_no_sessions() -> None:
    assert FetchSessionCache(0).create() is None
    assert FetchSessionCache(-1).create() is None


def test_least_recently_used_session_is_evicted() -> None:
    cache = FetchSessionCache(3)
    first, second, third = (cache.create() for _ in range(3))
    assert first is not None and second is not None and third is not None
    assert cache.get(first.session_id) is first  # first is now the most recently used
    fourth = cache.create()
    assert fourth is not None
    assert cache.get(second.session_id) is None  # the least recently used went
    assert all(cache.get(s.session_id) is s for s in (first, third, fourth))
    assert len(cache.sessions) == 3


def test_slot_count_can_shrink() -> None:
    cache = FetchSessionCache(5)
    for _ in range(5):
        cache.create()
    cache.slots = 2
    cache.create()
    assert len(cache.sessions) == 2


@pytest.mark.parametrize(
    ("epoch", "following"), [(0, 1), (1, 2), (41, 42), (2**31 - 2, 2**31 - 1), (2**31 - 1, 1)]
)
def test_next_epoch_wraps_to_1(epoch: int, following: int) -> None:
    assert next_epoch(epoch) == following


def test_session_ids_stay_int32_after_the_counter_wraps() -> None:
    cache = FetchSessionCache(10)
    cache._ids = itertools.count(2**31 - 2)
    ids = []
    for _ in range(4):
        session = cache.create()
        assert session is not None
        ids.append(session.session_id)
    assert all(0 < i < 2**31 for i in ids), ids
    assert len(set(ids)) == len(ids)
