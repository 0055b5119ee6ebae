# The HTTP fault proxy (tests/support/http_fault_proxy.py) in front of the tests' S3 server,
# with lockgate's S3 client through it: what passes unchanged (SigV4 signatures included,
# multipart uploads and batch deletes), and what each fault does to the client.
from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.storage.object_store import ObjectStoreError, S3ObjectStore, S3Settings
from tests.support.http_fault_proxy import Action, HttpFaultProxy, Rule
from tests.support.object_store import S3ProxyServer

MIB = 1024 * 1024


@pytest.fixture
def proxy(s3proxy: S3ProxyServer) -> Iterator[HttpFaultProxy]:
    with HttpFaultProxy(s3proxy.port) as proxy:
        yield proxy


def through(proxy: HttpFaultProxy, server: S3ProxyServer, max_retries: int = 1) -> S3ObjectStore:
    endpoint = server.endpoint
    return S3ObjectStore(
        S3Settings(
            bucket=endpoint.bucket,
            endpoint=proxy.endpoint,
            prefix=f"proxy-{uuid.uuid4().hex}",
            region=endpoint.region,
            access_key_id=endpoint.access_key,
            secret_access_key=endpoint.secret_key,
            allow_http=True,
            request_timeout_s=10.0,
            max_retries=max_retries,
        )
    )


async def test_requests_pass_through_unchanged(
    proxy: HttpFaultProxy, s3proxy: S3ProxyServer, tmp_path: Path
) -> None:
    store = through(proxy, s3proxy)
    await store.put("a/small", b"data")
    big = tmp_path / "big"
    big.write_bytes(bytes(range(256)) * (6 * MIB // 256))  # above one part: multipart
    await store.put_file("a/big", big)
    assert await store.get("a/small") == b"data"
    assert await store.get_range("a/big", MIB, MIB + 4) == bytes(range(4))
    assert [o.key for o in await store.list("a/")] == ["a/big", "a/small"]
    await store.delete(["a/small", "a/big"])
    assert await store.list("a/") == []
    methods = {e.method for e in proxy.history()}
    assert {"PUT", "GET", "POST"} <= methods  # POST: multipart create/complete, DeleteObjects
    assert all(e.status < 300 for e in proxy.history())
    assert proxy.counters["requests"] == proxy.counters["forwarded"] > 0
    assert proxy.in_flight == 0


async def test_a_fail_rule_answers_500_internal_error(
    proxy: HttpFaultProxy, s3proxy: S3ProxyServer
) -> None:
    store = through(proxy, s3proxy, max_retries=1)
    await store.put("kept", b"old")
    rule = proxy.fail("GET", r"/kept$")
    with pytest.raises(ObjectStoreError) as raised:
        await asyncio.wait_for(store.get("kept"), 30)
    assert raised.value.retriable and "500" in str(raised.value)
    assert rule.applied == 2  # the client's one retry failed too
    proxy.remove_rule(rule)
    assert await store.get("kept") == b"old"
    # forwarded first: the store does the PUT, the client hears it failed
    proxy.fail("PUT", r"/kept$", forward=True, limit=2)
    with pytest.raises(ObjectStoreError):
        await asyncio.wait_for(store.put("kept", b"new"), 30)
    assert await store.get("kept") == b"new"
    assert [e.status for e in proxy.history() if e.failed] == [500] * 4


async def test_every_and_percent_pick_which_requests_fail(
    proxy: HttpFaultProxy, s3proxy: S3ProxyServer
) -> None:
    every = proxy.add_rule(Rule(Action.FAIL, "HEAD", every=3, limit=2))
    share = proxy.fail("GET", percent=50.0, seed=7)
    store = through(proxy, s3proxy, max_retries=0)
    outcomes = []
    for _ in range(9):
        try:
            await store.head("nothing")
            outcomes.append(True)
        except ObjectStoreError:
            outcomes.append(False)
    assert outcomes == [False, True, True, False, True, True, True, True, True]
    assert every.matched == 9 and every.applied == 2
    for _ in range(40):
        with contextlib.suppress(ObjectStoreError):
            await store.get_range("nothing", 0, 1)
    assert share.matched == 40 and 5 < share.applied < 35


async def test_a_delay_holds_the_response_back(
    proxy: HttpFaultProxy, s3proxy: S3ProxyServer
) -> None:
    store = through(proxy, s3proxy)
    await store.put("slow", b"x")
    proxy.delay(0.5, "GET")
    began = time.monotonic()
    assert await store.get("slow") == b"x"
    assert time.monotonic() - began >= 0.5
    assert proxy.counters["delayed"] == 1


async def test_down_refuses_connections_until_up(
    proxy: HttpFaultProxy, s3proxy: S3ProxyServer
) -> None:
    store = through(proxy, s3proxy, max_retries=1)
    await store.put("kept", b"x")
    proxy.down()
    with pytest.raises(ObjectStoreError) as raised:
        await asyncio.wait_for(store.get("kept"), 30)
    assert raised.value.retriable
    proxy.up()
    assert await store.get("kept") == b"x"
