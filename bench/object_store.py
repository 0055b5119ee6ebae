"""The object store client of tiered storage: obstore (lockgate's S3ObjectStore) against
aiobotocore, both async, on one S3Proxy server (tests/support/object_store.py, filesystem
backend) on 127.0.0.1, so that the broker's choice of client rests on a measurement.

Operations, each with 1 and with 8 requests in flight: PUT of 1 MiB and of 16 MiB objects,
ranged GETs of 64 KiB and of 1 MiB at random offsets of a 64 MiB object. Reported per client
and operation: MB/s (bytes moved ÷ wall time), p50 and p99 latency of one request, and the
event loop's lag while the transfers run: a task asking to wake every 1 ms records how late it
wakes (p99 and worst). A client that does CPU work on the loop (signing, hashing, copying)
shows as lag; obstore does its work on its own threads.

How each client writes: obstore's put of more than 5 MiB is a multipart upload of 5 MiB parts
sent concurrently (S3ObjectStore.put, as the broker will use it); aiobotocore's put_object is
one PUT (botocore signs the payload's SHA-256 on plain http, and since botocore 1.36 adds a
CRC32 checksum: both computed on the loop). A third row, "obstore 1-PUT", is obstore sending
every object in one PUT too, which tells the multipart upload's cost on this server from the
client's.

aiobotocore is not a dependency of lockgate: install it for this bench only with
`.venv/bin/pip install 'aiobotocore==3.10.0'`. S3Proxy comes from `make reference-deps`.

    python -m bench.object_store [--rounds 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import obstore
from obstore.store import S3Store

from lockgate.storage.object_store import S3ObjectStore, S3Settings
from tests.support.object_store import ObjectStoreEndpoint, S3ProxyServer

KIB = 1024
MIB = 1024 * KIB
SOURCE_SIZE = 64 * MIB
# (name, kind, size, requests at concurrency 1, requests at concurrency 8)
OPERATIONS = [
    ("PUT 1 MiB", "put", 1 * MIB, 40, 80),
    ("PUT 16 MiB", "put", 16 * MIB, 6, 16),
    ("GET range 64 KiB", "range", 64 * KIB, 300, 600),
    ("GET range 1 MiB", "range", 1 * MIB, 60, 160),
]
CONCURRENCY = (1, 8)


class Client:
    name = ""

    async def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class Obstore(Client):
    name = "obstore"

    def __init__(self, endpoint: ObjectStoreEndpoint) -> None:
        self.store = S3ObjectStore(
            S3Settings(
                bucket=endpoint.bucket,
                endpoint=endpoint.endpoint,
                region=endpoint.region,
                access_key_id=endpoint.access_key,
                secret_access_key=endpoint.secret_key,
                allow_http=True,
                request_timeout_s=120.0,
            )
        )

    async def put(self, key: str, data: bytes) -> None:
        await self.store.put(key, data)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self.store.get_range(key, start, end)


class ObstoreOnePut(Obstore):
    """obstore with every PUT in one request, as aiobotocore's put_object: to tell the
    multipart upload's cost on this server from the client's."""

    name = "obstore 1-PUT"

    def __init__(self, endpoint: ObjectStoreEndpoint) -> None:
        super().__init__(endpoint)
        self.raw = S3Store(
            endpoint.bucket,
            endpoint=endpoint.endpoint,
            region=endpoint.region,
            access_key_id=endpoint.access_key,
            secret_access_key=endpoint.secret_key,
            client_options={"allow_http": True, "timeout": "120s"},
        )

    async def put(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.raw, key, data, use_multipart=False)


class Aiobotocore(Client):
    name = "aiobotocore"

    def __init__(self, endpoint: ObjectStoreEndpoint) -> None:
        self.endpoint = endpoint
        self.client: Any = None
        self._context: Any = None

    async def open(self) -> Aiobotocore:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

        config = AioConfig(
            max_pool_connections=16,
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
        )
        self._context = get_session().create_client(
            "s3",
            endpoint_url=self.endpoint.endpoint,
            region_name=self.endpoint.region,
            aws_access_key_id=self.endpoint.access_key,
            aws_secret_access_key=self.endpoint.secret_key,
            config=config,
        )
        self.client = await self._context.__aenter__()
        return self

    async def put(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=self.endpoint.bucket, Key=key, Body=data)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        answer = await self.client.get_object(
            Bucket=self.endpoint.bucket, Key=key, Range=f"bytes={start}-{end - 1}"
        )
        async with answer["Body"] as body:
            data: bytes = await body.read()
        return data

    async def close(self) -> None:
        await self._context.__aexit__(None, None, None)


class LoopLag:
    """How late a task asking to wake every millisecond wakes, while it runs."""

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            self.late_ms.append((time.perf_counter() - asked - 0.001) * 1000)

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run_operation(
    client: Client, kind: str, size: int, requests: int, concurrency: int, payload: bytes
) -> dict[str, float]:
    randomness = random.Random(size * 31 + concurrency)
    body = payload[:size]
    latencies: list[float] = []
    queue = list(range(requests))

    async def one(index: int) -> None:
        began = time.perf_counter()
        if kind == "put":
            await client.put(f"bench/{client.name}/{size}/{index % 8}", body)
        else:
            start = randomness.randrange(0, SOURCE_SIZE - size)
            data = await client.get_range("bench/source", start, start + size)
            assert len(data) == size
        latencies.append(time.perf_counter() - began)

    async def worker() -> None:
        while queue:
            await one(queue.pop())

    with LoopLag() as lag:
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return {
        "mb_per_s": requests * size / elapsed / 1e6,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "lag_p99_ms": percentile(lag.late_ms, 0.99) if lag.late_ms else 0.0,
        "lag_max_ms": max(lag.late_ms, default=0.0),
    }


async def measure(endpoint: ObjectStoreEndpoint, rounds: int) -> list[dict[str, Any]]:
    payload = os.urandom(SOURCE_SIZE)
    obstore_client = Obstore(endpoint)
    await obstore_client.put("bench/source", payload)  # the object the ranged reads read
    botocore_client = await Aiobotocore(endpoint).open()
    clients: list[Client] = [obstore_client, ObstoreOnePut(endpoint), botocore_client]
    # warm both: connection pools, credentials, first-call imports
    for client in clients:
        await client.put(f"bench/{client.name}/warm", payload[:KIB])
        await client.get_range("bench/source", 0, KIB)
    results: list[dict[str, Any]] = []
    try:
        for name, kind, size, requests_one, requests_many in OPERATIONS:
            for concurrency in CONCURRENCY:
                requests = requests_one if concurrency == 1 else requests_many
                for client in clients:
                    # rounds alternate the clients so both see the same machine; the median
                    runs = [
                        await run_operation(client, kind, size, requests, concurrency, payload)
                        for _ in range(rounds)
                    ]
                    row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                    results.append(
                        {"operation": name, "concurrency": concurrency, "client": client.name} | row
                    )
                    print(format_row(results[-1]), flush=True)
    finally:
        await botocore_client.close()
    return results


def format_row(row: dict[str, Any]) -> str:
    return (
        f"{row['operation']:<17} x{row['concurrency']:<2} {row['client']:<14}"
        f"{row['mb_per_s']:9.1f} MB/s  p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms"
        f"  loop lag p99 {row['lag_p99_ms']:6.2f} ms, worst {row['lag_max_ms']:6.1f} ms"
    )


def ratios(results: list[dict[str, Any]]) -> None:
    print("\nobstore ÷ aiobotocore (MB/s), and the loop's lag: aiobotocore's vs obstore's")
    for name, _kind, _size, _one, _many in OPERATIONS:
        for concurrency in CONCURRENCY:
            pair = {
                row["client"]: row
                for row in results
                if row["operation"] == name and row["concurrency"] == concurrency
            }
            fast, one, slow = pair["obstore"], pair["obstore 1-PUT"], pair["aiobotocore"]
            print(
                f"  {name:<17} x{concurrency:<2} throughput "
                f"{fast['mb_per_s'] / slow['mb_per_s']:5.2f}x "
                f"(1-PUT {one['mb_per_s'] / slow['mb_per_s']:5.2f}x)   loop lag p99 "
                f"{slow['lag_p99_ms']:5.1f} ms vs {fast['lag_p99_ms']:5.1f} ms, worst "
                f"{slow['lag_max_ms']:6.1f} ms vs {fast['lag_max_ms']:5.1f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    try:
        import aiobotocore  # noqa: F401
    except ImportError:
        print(
            "aiobotocore is not installed (it is not a lockgate dependency): "
            "`.venv/bin/pip install 'aiobotocore==3.10.0'`",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-s3-") as directory:
        server = S3ProxyServer(Path(directory)).start()
        print(f"S3Proxy answered {server.started_in_s:.1f} s after its start")
        try:
            results = asyncio.run(measure(server.endpoint, arguments.rounds))
        finally:
            server.stop()
    ratios(results)
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))
    # obstore's runtime threads hand results to the loop; on Python before 3.14 one caught
    # taking the GIL while the interpreter finalizes aborts the process: let them finish first
    time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
