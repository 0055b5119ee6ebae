"""The etcd store's own view of its lease: the registration is lost (listeners told, leading
stops) the moment the lease may have run out, even when the deadline's timer runs early."""

from __future__ import annotations

from lockgate.cluster.etcd import EtcdMetadataStore


async def test_a_deadline_timer_that_runs_early_waits_again() -> None:
    """asyncio runs a timer up to its clock resolution before its time; the lease is still
    live then, and without a new timer the broker would go on leading after it ran out (a
    coordinator cut from etcd kept its transactional ids: issue 22, pain 7)."""
    now = [100.0]
    store = EtcdMetadataStore(["127.0.0.1:1"], session_timeout_ms=3_000, clock=lambda: now[0])
    heard: list[bool] = []
    store.lease_listeners.append(heard.append)
    store._set_live(True)
    store._extend(100.0)  # the lease holds until 103
    first = store._deadline_timer
    now[0] = 102.9999
    store._check_deadline()  # run early
    assert heard == [True] and store.live
    assert store._deadline_timer is not None and store._deadline_timer is not first
    now[0] = 103.0
    store._check_deadline()
    assert heard == [True, False] and not store.live
    assert store._deadline_timer is not None
    store._deadline_timer.cancel()
