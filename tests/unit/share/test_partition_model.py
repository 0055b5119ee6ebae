"""The share partition (share/partition.py, in-flight state per log batch) against the
per-offset reference model (tests/support/share_model.py, the implementation it replaced):
random sequences of loads, acquisitions (batch_optimized and record_limit, batch sizes,
compacted and aborted batches), acknowledgements (whole and partial, mixed types, RENEW,
batches sharing an offset), commits, rollbacks, lock expiries, member releases and log-start
moves, fed to both; everything either shows must be equal after every step: acquired ranges,
writes, errors, start and end offsets, the state of every cached offset, the next deadline,
the counts, and how many log batches acquisition pulled from the lazy read."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.share.records import StateBatch
from lockgate.share import partition as new
from tests.support import share_model as old

MEMBERS = ("a", "b", "c")
TYPES = (new.GAP, new.ACCEPT, new.RELEASE, new.REJECT, new.RENEW)


def _log(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, int, int, bool, bool]], list[tuple[int, int, int]]]:
    """Log batches (first, last, producer id, transactional, control) from offset 0, with
    holes (compacted away), and aborted ranges (producer id, first, last)."""
    batches: list[tuple[int, int, int, bool, bool]] = []
    aborted: list[tuple[int, int, int]] = []
    offset = 0
    for _ in range(draw(st.integers(1, 8))):
        offset += draw(st.sampled_from((0, 0, 0, 1, 2)))
        size = draw(st.sampled_from((1, 1, 2, 3, 5, 8)))
        transactional = draw(st.integers(0, 5)) == 0
        batches.append(
            (offset, offset + size - 1, 7 if transactional else -1, transactional, False)
        )
        if transactional and draw(st.booleans()):
            aborted.append((7, offset, offset + size))  # up to its abort marker
            batches.append((offset + size, offset + size, 7, True, True))
            offset += 1
        offset += size
    return batches, aborted


def _log_batches(module: Any, spec: list[tuple[int, int, int, bool, bool]]) -> list[Any]:
    return [module.LogBatch(f, last, pid, txn, control) for f, last, pid, txn, control in spec]


def _state(record: Any) -> tuple[int, int, str, int, bool] | None:
    if record is None:
        return None
    return (
        int(record.state),
        record.delivery_count,
        record.member,
        record.deadline_ms,
        record.pending,
    )


def _write(write: Any) -> tuple[int, int, tuple[StateBatch, ...]] | None:
    if write is None:
        return None
    return (write.start_offset, write.delivery_complete_count, write.batches)


def _same(mine: new.SharePartition, model: old.SharePartition, limits: tuple[Any, Any]) -> None:
    assert mine.start_offset == model.start_offset
    assert mine.end_offset == model.end_offset
    assert mine.last_cached == model.last_cached
    assert mine.in_flight_count() == model.in_flight_count()
    assert mine.delivery_complete_count() == model.delivery_complete_count()
    assert mine.next_deadline() == model.next_deadline()
    assert mine.next_fetch_offset() == model.next_fetch_offset()
    assert mine.can_acquire(limits[0]) == model.can_acquire(limits[1])
    assert [(b.first_offset, b.last_offset) for b in mine.batches] == [
        (b.first_offset, b.last_offset) for b in model.batches
    ]
    low = model.batches[0].first_offset if model.batches else model.start_offset
    for offset in range(low - 1, model.last_cached + 2):
        assert _state(mine.state_of(offset)) == _state(model.state_of(offset)), offset
    assert [(o, _state(r)) for o, r in mine.offsets()] == [
        (o, _state(r)) for o, r in model.offsets()
    ]


def _error(call: Any, *args: Any) -> tuple[Any, Any]:
    try:
        return call(*args), None
    except (new.AcknowledgeError, old.AcknowledgeError) as exc:
        return None, (exc.code, exc.message)


def _counted(items: list[Any], pulled: list[int]) -> Iterator[Any]:
    """The log batches as the manager hands them: lazily, counting what acquisition pulls."""
    for item in items:
        pulled[0] += 1
        yield item


@settings(max_examples=80)
@given(st.data())
def test_against_the_per_offset_model(data: st.DataObject) -> None:
    draw = data.draw
    limit = draw(st.sampled_from((2, 2, 3, 4, 6)), "delivery limit")
    locks = draw(st.sampled_from((4, 12, 100)), "max record locks")
    renew = draw(st.booleans(), "renew enabled")
    limits = (
        new.Limits(limit, 1000, locks, renew),
        old.Limits(limit, 1000, locks, renew),
    )
    spec, aborted_spec = draw(st.composite(lambda d: _log(d))(), "log")
    if draw(st.booleans(), "loaded"):
        persisted: list[StateBatch] = []
        cursor = 0
        for _ in range(draw(st.integers(0, 4))):
            first = cursor + draw(st.integers(0, 3))
            last = first + draw(st.integers(0, 5))
            state = draw(st.sampled_from((0, 2, 3, 4)))
            persisted.append(StateBatch(first, last, state, draw(st.integers(0, limit))))
            cursor = last + 1
        start = draw(st.integers(0, 4))
        mine = new.SharePartition.loaded(start, 1, persisted)
        model = old.SharePartition.loaded(start, 1, persisted)
    else:
        mine, model = new.SharePartition(0), old.SharePartition(0)
    _same(mine, model, limits)
    now = 0
    pending: list[tuple[new.Transition, old.Transition]] = []
    acquired: list[tuple[str, int, int]] = []  # (member, first, last) handed out
    for _ in range(draw(st.integers(1, 25), "steps")):
        kind = draw(
            st.sampled_from(
                ("acquire", "acquire", "ack", "ack", "ack", "commit", "rollback", "expire",
                 "release", "move")
            )
        )  # fmt: skip
        if kind == "acquire":
            member = draw(st.sampled_from(MEMBERS))
            max_records = draw(st.integers(1, 12))
            mode = draw(st.sampled_from((new.BATCH_OPTIMIZED, new.RECORD_LIMIT)))
            batch_size = draw(st.sampled_from((0, 0, 1, 2, 3, 6)))
            read_from = draw(st.sampled_from((None, model.next_fetch_offset())))
            committed = draw(st.booleans())
            gone = draw(st.sets(st.integers(0, len(spec) - 1), max_size=2))  # compacted
            begin = model.next_fetch_offset() if read_from is None else read_from
            begin -= draw(st.sampled_from((0, 0, 0, 3)))  # a read from below: skipped
            items = [b for i, b in enumerate(spec) if i not in gone and b[1] >= begin]
            pulls = [[0], [0]]
            got = mine.acquire(
                member, _counted(_log_batches(new, items), pulls[0]), max_records, now,
                limits[0], mode=mode, batch_size=batch_size, read_from=read_from,
                aborted=[new.AbortedRange(*a) for a in aborted_spec] if committed else [],
            )  # fmt: skip
            expected = model.acquire(
                member, _counted(_log_batches(old, items), pulls[1]), max_records, now,
                limits[1], mode=mode, batch_size=batch_size, read_from=read_from,
                aborted=[old.AbortedRange(*a) for a in aborted_spec] if committed else [],
            )  # fmt: skip
            assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got.ranges] == [
                (r.first_offset, r.last_offset, r.delivery_count) for r in expected.ranges
            ]
            assert _write(got.write) == _write(expected.write)
            assert pulls[0] == pulls[1]
            acquired.extend((member, r.first_offset, r.last_offset) for r in got.ranges)
        elif kind == "ack":
            member = draw(st.sampled_from(MEMBERS))
            if acquired and draw(st.integers(0, 3)) > 0:  # mostly what was handed out
                member, first, last = draw(st.sampled_from(acquired))
                if draw(st.booleans()):  # part of it
                    first = draw(st.integers(first, last))
                    last = draw(st.integers(first, last))
            else:
                first = draw(st.integers(0, max(0, model.last_cached + 2)))
                last = first + draw(st.integers(0, 6))
            batches = []
            cursor = first
            while cursor <= last:
                end = draw(st.integers(cursor, last))
                if draw(st.booleans()):
                    types: tuple[int, ...] = (draw(st.sampled_from(TYPES)),)
                else:
                    types = tuple(draw(st.sampled_from(TYPES)) for _ in range(end - cursor + 1))
                batches.append((cursor, end, types))
                cursor = end + draw(st.sampled_from((0, 1, 1, 2)))  # 0: sharing an offset
                if cursor == end and len(batches) > 3:
                    cursor += 1
            if new.validate_ack_batches([new.AckBatch(*b) for b in batches], 2, True) is not None:
                continue
            now += draw(st.sampled_from((0, 0, 300)))
            mine_t, mine_error = _error(
                mine.acknowledge, member, [new.AckBatch(*b) for b in batches], now, limits[0]
            )
            model_t, model_error = _error(
                model.acknowledge, member, [old.AckBatch(*b) for b in batches], now, limits[1]
            )
            assert mine_error == model_error
            if mine_t is not None:
                assert _write(mine_t.write) == _write(model_t.write)
                assert mine_t.done == model_t.done
                if not mine_t.done:
                    pending.append((mine_t, model_t))
        elif kind in ("commit", "rollback"):
            if not pending:
                continue
            index = draw(st.integers(0, len(pending) - 1))
            mine_t, model_t = pending[index]
            if draw(st.integers(0, 3)) > 0:  # else left there: ended twice
                del pending[index]
            if kind == "commit":
                mine.commit(mine_t)
                model.commit(model_t)
            else:
                now += draw(st.sampled_from((0, 500, 1000, 2000)))
                mine.rollback(mine_t, now, limits[0])
                model.rollback(model_t, now, limits[1])
        elif kind == "expire":
            now += draw(st.sampled_from((0, 400, 1000, 5000)))
            assert _write(mine.expire(now, limits[0])) == _write(model.expire(now, limits[1]))
        elif kind == "release":
            member = draw(st.sampled_from(MEMBERS))
            assert _write(mine.release_member(member, limits[0])) == _write(
                model.release_member(member, limits[1])
            )
        else:
            log_start = model.start_offset + draw(st.integers(-1, 6))
            assert _write(mine.move_to_log_start(log_start)) == _write(
                model.move_to_log_start(log_start)
            )
        _same(mine, model, limits)


def test_a_whole_batch_stays_one_state() -> None:
    # the common case, one log batch acquired then acknowledged whole: no per-offset state
    limits = new.Limits()
    share = new.SharePartition(0)
    got = share.acquire("a", [new.LogBatch(0, 499), new.LogBatch(500, 999)], 1000, 0, limits)
    assert got.ranges == (new.AcquiredRange(0, 999, 1),)
    assert all(batch.records is None for batch in share.batches)
    transition = share.acknowledge("a", [new.AckBatch(0, 499, (new.ACCEPT,))], 0, limits)
    assert all(batch.records is None for batch in share.batches)
    share.commit(transition)
    assert share.start_offset == 500 and [b.first_offset for b in share.batches] == [500]
    # part of a batch splits it; once its offsets agree again it is whole again
    share.commit(share.acknowledge("a", [new.AckBatch(500, 509, (new.RELEASE,))], 0, limits))
    assert share.batches[0].records is not None
    got = share.acquire("a", [new.LogBatch(500, 999)], 500, 0, limits, read_from=500)
    assert got.ranges == (new.AcquiredRange(500, 509, 2),)
    share.commit(share.acknowledge("a", [new.AckBatch(500, 999, (new.ACCEPT,))], 0, limits))
    assert share.start_offset == 1000 and share.batches == []


def _both() -> tuple[new.SharePartition, old.SharePartition]:
    return new.SharePartition(0), old.SharePartition(0)


def test_edge_cases_against_the_model() -> None:
    limits = (new.Limits(3, 1000, 100, True), old.Limits(3, 1000, 100, True))
    # batches sharing an offset: the later type applies unless it is RENEW; a RENEW of either
    # restarts the lock
    for first_type, second_type in itertools.product(TYPES[1:], repeat=2):
        mine, model = _both()
        mine.acquire("a", [new.LogBatch(0, 4)], 10, 0, limits[0])
        model.acquire("a", [old.LogBatch(0, 4)], 10, 0, limits[1])
        acks = [(0, 2, (first_type,)), (2, 4, (second_type,))]
        got = mine.acknowledge("a", [new.AckBatch(*a) for a in acks], 300, limits[0])
        expected = model.acknowledge("a", [old.AckBatch(*a) for a in acks], 300, limits[1])
        assert _write(got.write) == _write(expected.write)
        _same(mine, model, limits)
        mine.rollback(got, 1000, limits[0])  # at the old deadline exactly: released
        model.rollback(expected, 1000, limits[1])
        _same(mine, model, limits)
    # a range cut at a log batch's end exactly when it holds batch_size records
    for sizes in ((1, 1, 1), (2, 1, 3), (3, 3)):
        for batch_size in (1, 2, 3):
            mine, model = _both()
            spec, offset = [], 0
            for size in sizes:
                spec.append((offset, offset + size - 1, -1, False, False))
                offset += size
            acquired = mine.acquire(
                "a", _log_batches(new, spec), 10, 0, limits[0], batch_size=batch_size
            )
            acquired_model = model.acquire(
                "a", _log_batches(old, spec), 10, 0, limits[1], batch_size=batch_size
            )
            assert [(r.first_offset, r.last_offset) for r in acquired.ranges] == [
                (r.first_offset, r.last_offset) for r in acquired_model.ranges
            ]
