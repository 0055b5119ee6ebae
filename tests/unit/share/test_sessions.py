"""Share sessions (share/sessions.py): keyed by (group, member), epochs, the cache limit."""

from __future__ import annotations

import uuid

from lockgate.share.sessions import ShareSessionCache, next_epoch

TOPIC = uuid.uuid4()


def test_open_replaces_the_keys_session_and_expects_epoch_1() -> None:
    cache = ShareSessionCache(1)
    first = cache.open("g", "m", 1, [(TOPIC, 0)])
    assert first is not None and first.epoch == 1
    again = cache.open("g", "m", 2, [(TOPIC, 1)])  # the same key: not a new slot
    assert again is not None and again is not first
    assert cache.get("g", "m") is again and list(again.partitions) == [(TOPIC, 1)]
    # another member of the same group is another key: the cache is full
    assert cache.open("g", "other", 3, []) is None
    assert cache.open("h", "m", 3, []) is None


def test_remove_only_the_current_session() -> None:
    cache = ShareSessionCache(2)
    old = cache.open("g", "m", 1, [])
    new = cache.open("g", "m", 1, [])
    assert old is not None and new is not None
    cache.remove(old)  # replaced already: nothing happens
    assert cache.get("g", "m") is new
    cache.remove(new)
    assert cache.get("g", "m") is None


def test_sessions_of_a_connection() -> None:
    cache = ShareSessionCache(3)
    a = cache.open("g", "a", 5, [])
    cache.open("g", "b", 6, [])
    assert cache.of_connection(5) == [a]


def test_epochs_wrap_to_1() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(2**31 - 1) == 1
