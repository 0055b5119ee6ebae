# The object store contract (lockgate.storage.object_store), run alike on the in-memory twin
# and on the S3 client against a real S3-compatible server (S3Proxy, tests/support), so that
# code tested on the twin behaves the same on S3. Each test has its own key prefix on the
# module's server.
from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lockgate.storage.object_store import (
    MemoryObjectStore,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    S3Settings,
)
from tests.support.broker import free_port
from tests.support.object_store import S3ProxyServer

MIB = 1024 * 1024


def s3_settings(server: S3ProxyServer, **overrides: object) -> S3Settings:
    endpoint = server.endpoint
    values: dict[str, object] = {
        "bucket": endpoint.bucket,
        "endpoint": endpoint.endpoint,
        "prefix": f"test-{uuid.uuid4().hex}",
        "region": endpoint.region,
        "access_key_id": endpoint.access_key,
        "secret_access_key": endpoint.secret_key,
        "allow_http": True,
        "request_timeout_s": 10.0,
    }
    values.update(overrides)
    return S3Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "s3"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ObjectStore]:
    if request.param == "memory":
        yield MemoryObjectStore()
        return
    server: S3ProxyServer = request.getfixturevalue("s3proxy")
    yield S3ObjectStore(s3_settings(server))


async def test_put_then_get_returns_the_bytes_and_a_put_replaces(store: ObjectStore) -> None:
    await store.put("topic-0/00000000000000000000.log", b"first")
    assert await store.get("topic-0/00000000000000000000.log") == b"first"
    await store.put("topic-0/00000000000000000000.log", b"second, longer")
    assert await store.get("topic-0/00000000000000000000.log") == b"second, longer"
    assert await store.head("topic-0/00000000000000000000.log") == ObjectInfo(
        "topic-0/00000000000000000000.log", 14
    )


async def test_get_range_reads_start_to_end_exclusive_cut_at_the_object_end(
    store: ObjectStore,
) -> None:
    data = bytes(range(256)) * 4
    await store.put("ranged", data)
    assert await store.get_range("ranged", 0, 1) == data[:1]
    assert await store.get_range("ranged", 100, 612) == data[100:612]
    assert await store.get_range("ranged", 1000, 5000) == data[1000:]  # past the end: cut


async def test_get_range_starting_past_the_end_or_empty_is_a_permanent_error(
    store: ObjectStore,
) -> None:
    await store.put("short", b"0123456789")
    for start, end in ((10, 20), (50, 60), (5, 5), (6, 2), (-1, 4)):
        with pytest.raises(ObjectStoreError) as raised:
            await store.get_range("short", start, end)
        assert not raised.value.retriable, (start, end)


async def test_a_large_file_goes_up_whole_and_reads_back_across_parts(
    store: ObjectStore, tmp_path: Path
) -> None:
    data = os.urandom(20 * MIB + 12345)  # several multipart parts and a short last one
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    await store.put_file("topic-0/00000000000000001000.log", path)
    assert await store.head("topic-0/00000000000000001000.log") == ObjectInfo(
        "topic-0/00000000000000001000.log", len(data)
    )
    boundary = 5 * MIB  # obstore's part size: a range across two parts
    across = await store.get_range(
        "topic-0/00000000000000001000.log", boundary - 100, boundary + 100
    )
    assert across == data[boundary - 100 : boundary + 100]
    assert await store.get("topic-0/00000000000000001000.log") == data


async def test_list_matches_keys_by_string_prefix_in_key_order(store: ObjectStore) -> None:
    for key in ("seg/b/1", "seg/a/2", "seg/ab/1", "seg/a/1", "other/1"):
        await store.put(key, key.encode())
    assert await store.list("seg/a/") == [ObjectInfo("seg/a/1", 7), ObjectInfo("seg/a/2", 7)]
    assert [info.key for info in await store.list("seg/a")] == ["seg/a/1", "seg/a/2", "seg/ab/1"]
    assert [info.key for info in await store.list("seg/")] == [
        "seg/a/1",
        "seg/a/2",
        "seg/ab/1",
        "seg/b/1",
    ]
    assert len(await store.list("")) == 5
    assert await store.list("nothing/") == []


async def test_delete_is_idempotent_and_ignores_missing_keys(store: ObjectStore) -> None:
    await store.put("d/1", b"1")
    await store.put("d/2", b"2")
    await store.put("d/3", b"3")
    await store.delete(["d/1", "d/2", "d/never-written"])
    assert await store.list("d/") == [ObjectInfo("d/3", 1)]
    await store.delete(["d/1", "d/2"])  # again
    await store.delete(["d/missing"])
    await store.delete([])
    assert await store.list("d/") == [ObjectInfo("d/3", 1)]
    assert await store.head("d/1") is None


async def test_a_missing_object_is_not_found_and_not_retriable(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as raised:
        await store.get("missing/object")
    assert raised.value.key == "missing/object"
    assert not raised.value.retriable
    with pytest.raises(ObjectNotFound):
        await store.get_range("missing/object", 0, 10)
    assert await store.head("missing/object") is None


async def test_invalid_keys_are_refused_before_any_request(store: ObjectStore) -> None:
    for key in ("", "a//b", "/a", "a/", "a/../b", "./a"):
        with pytest.raises(ObjectStoreError) as raised:
            await store.put(key, b"x")
        assert not raised.value.retriable, key


# --- failures of the S3 client on the real server ------------------------------------------


async def test_wrong_credentials_are_a_permanent_error_that_does_not_show_the_secret(
    s3proxy: S3ProxyServer,
) -> None:
    secret = "wrong-secret-" + uuid.uuid4().hex
    store = S3ObjectStore(s3_settings(s3proxy, secret_access_key=secret))
    for attempt in (store.get("any"), store.put("any", b"x"), store.list("")):
        with pytest.raises(ObjectStoreError) as raised:
            await asyncio.wait_for(attempt, timeout=30)
        error = raised.value
        assert not error.retriable
        assert not isinstance(error, ObjectNotFound)
        assert "403" in str(error)
        assert secret not in str(error) and secret not in repr(error)
        assert error.__cause__ is None and error.__suppress_context__
    assert secret not in repr(store) and secret not in repr(store.settings)


async def test_a_stopped_server_is_a_retriable_error_after_bounded_retries(
    s3proxy_own: S3ProxyServer,
) -> None:
    store = S3ObjectStore(s3_settings(s3proxy_own, max_retries=2, request_timeout_s=2.0))
    await store.put("kept", b"data")
    s3proxy_own.stop()
    for attempt in (store.get("kept"), store.put("kept", b"new"), store.delete(["kept"])):
        with pytest.raises(ObjectStoreError) as raised:
            await asyncio.wait_for(attempt, timeout=30)  # the retries end well before
        assert raised.value.retriable
        assert s3proxy_own.secret_key not in str(raised.value)


async def test_a_closed_port_is_a_retriable_error() -> None:
    settings = S3Settings(
        bucket="lockgate",
        endpoint=f"http://127.0.0.1:{free_port()}",
        access_key_id="key",
        secret_access_key="secret-value",
        allow_http=True,
        max_retries=1,
        request_timeout_s=2.0,
    )
    with pytest.raises(ObjectStoreError) as raised:
        await asyncio.wait_for(S3ObjectStore(settings).head("any"), timeout=30)
    assert raised.value.retriable


# --- settings and the twin's fault injection -----------------------------------------------


def test_settings_repr_never_shows_the_secret() -> None:
    settings = S3Settings(bucket="b", access_key_id="AKID", secret_access_key="s3cr3t-value")
    assert "s3cr3t-value" not in repr(settings) and "s3cr3t-value" not in str(settings)
    assert "AKID" in repr(settings)


def test_settings_take_properties_first_then_the_aws_environment() -> None:
    environ = {
        "AWS_ACCESS_KEY_ID": "env-key",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_DEFAULT_REGION": "eu-west-3",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    }
    from_env = S3Settings.from_properties({"s3.bucket": "tiered"}, environ)
    assert (from_env.access_key_id, from_env.secret_access_key) == ("env-key", "env-secret")
    assert from_env.region == "eu-west-3"
    assert from_env.endpoint == "http://127.0.0.1:9000" and from_env.allow_http
    given = S3Settings.from_properties(
        {
            "s3.bucket": "tiered",
            "s3.prefix": "/cluster-1/",
            "s3.region": "us-west-2",
            "s3.access.key.id": "prop-key",
            "s3.secret.access.key": "prop-secret",
            "s3.endpoint": "https://s3.example.test",
            "s3.request.timeout.ms": "1500",
            "s3.max.retries": "5",
        },
        {**environ, "AWS_REGION": "ap-south-1"},
    )
    assert (given.access_key_id, given.secret_access_key) == ("prop-key", "prop-secret")
    assert (given.region, given.prefix, given.endpoint) == (
        "us-west-2",
        "cluster-1",
        "https://s3.example.test",
    )
    assert not given.allow_http
    assert (given.request_timeout_s, given.max_retries) == (1.5, 5)
    with pytest.raises(ValueError, match=r"s3\.bucket"):
        S3Settings.from_properties({}, environ)


async def test_the_memory_twin_fails_every_call_while_unavailable() -> None:
    store = MemoryObjectStore()
    await store.put("k", b"v")
    store.unavailable = ObjectStoreError("store down", retriable=True)
    with pytest.raises(ObjectStoreError, match="store down"):
        await store.get("k")
    with pytest.raises(ObjectStoreError, match="store down"):
        await store.delete(["k"])
    store.unavailable = None
    assert await store.get("k") == b"v"
