"""Stalls: how long the broker's event loop is held by one operation at scale, as a client sees
it. A broker is one event loop, so anything that holds it delays every request on every
connection by as much (issue 34's goal: no stall over 50 ms).

`python -m bench.stalls` starts a lockgate broker (page-cache durability, metrics endpoint on),
creates `--partitions` partitions (100-partition topics), then runs each operation below while
a pinger on its own connection sends ApiVersions every 2 ms. For each operation it prints the
pinger's worst round trip during it, next to its worst while the broker is idle (the machine's
own noise), and the broker's count of event-loop stalls (lockgate_event_loop_stalls: a timer
50 ms or more late) during it:

- **metadata**: Metadata for every topic (v12), `--repeat` times;
- **scrape**: the metrics endpoint scraped, `--repeat` times (per-partition series);
- **create 100 / create 1000**: CreateTopics of one topic of 100, then 1,000 partitions;
- **delete 1000**: DeleteTopics of that topic;
- **recompress gzip→zstd 1 MiB**: Produce of a 1 MiB gzip batch of 1 KiB records to a topic
  with compression.type=zstd (the broker recompresses it), `--repeat` times;
- **restart**: the broker stopped (SIGTERM) and started on its data: the pinger's worst from
  the moment it listens until every partition's log is open (it answers Produce at once and
  opens the logs behind it).

    python -m bench.stalls [--partitions 10000] [--repeat 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lockgate
from bench.scale import (
    CREATE_VERSION,
    PRODUCE_VERSION,
    Wire,
    answer_schema,
    create_topics,
    metadata_frame,
    wait_for_partitions,
)
from bench.throughput import broker_command
from bench.transactions import wait_for_port
from lockgate.client.connection import encode_request_header
from lockgate.protocol.api import ApiKey, decode_body
from lockgate.protocol.records import build_batch, encode_record
from lockgate.tools.devcluster import free_port

PING_EVERY_S = 0.002
GZIP = 1
_SIZE = struct.Struct(">i")


class Pinger:
    """ApiVersions v0 on its own connection, one at a time, every PING_EVERY_S: the worst round
    trip in the current window."""

    def __init__(self, port: int) -> None:
        self.port = port
        header = encode_request_header(ApiKey.API_VERSIONS, 0, 1, "bench-stalls", False)
        self.frame = _SIZE.pack(len(header)) + header
        self.worst = 0.0
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sock: socket.socket | None = None
        while self.running:
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
                started = time.perf_counter()
                sock.sendall(self.frame)
                (size,) = _SIZE.unpack(_recv(sock, 4))
                _recv(sock, size)
                took = time.perf_counter() - started
                with self.lock:
                    self.worst = max(self.worst, took)
            except OSError:  # the broker restarts: connect again
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            time.sleep(PING_EVERY_S)
        if sock is not None:
            sock.close()

    def window(self) -> float:
        """The worst round trip since the last call, and a new window."""
        with self.lock:
            worst, self.worst = self.worst, 0.0
        return worst

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)


def _recv(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def probe_figures(metrics_port: int) -> tuple[int, dict[float, float]]:
    """The broker's stall count, and its event-loop hold histogram (bucket bound: count)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=60) as r:
        text = r.read().decode()
    found = re.search(r"^lockgate_event_loop_stalls(?:_total)? (\S+)$", text, re.M)
    buckets = {
        float(bound): float(count)
        for bound, count in re.findall(
            r'^lockgate_event_loop_hold_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M
        )
    }
    return (int(float(found.group(1))) if found else -1), buckets


def worst_hold(before: dict[float, float], after: dict[float, float]) -> float:
    """The smallest bucket bound that holds every hold observed between the two readings."""
    total = after[float("inf")] - before[float("inf")]
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0.0) >= total:
            return bound
    return float("inf")


def create_topic(wire: Wire, name: str, partitions: int, configs: dict[str, str]) -> None:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }
    answer = wire.exchange(
        wire.frame(
            ApiKey.CREATE_TOPICS,
            CREATE_VERSION,
            {"topics": [topic], "timeout_ms": 60_000, "validate_only": False},
            True,
        )
    )
    decoded = decode_body(answer_schema(ApiKey.CREATE_TOPICS, CREATE_VERSION), answer, 5)
    assert all(t.error_code == 0 for t in decoded.topics), decoded


def delete_topic(wire: Wire, name: str) -> None:
    answer = wire.exchange(
        wire.frame(ApiKey.DELETE_TOPICS, 4, {"topic_names": [name], "timeout": 60_000}, True)
    )
    decoded = decode_body(answer_schema(ApiKey.DELETE_TOPICS, 4), answer, 5)
    assert all(t.error_code == 0 for t in decoded.responses), decoded


def gzip_batch() -> bytes:
    """1 MiB of 1 KiB records (half random, half repeated: compressible as real data is)."""
    import os

    values = [os.urandom(512) + b"lockgate" * 64 for _ in range(1024)]
    body = b"".join(encode_record(i, 0, None, value) for i, value in enumerate(values))
    return build_batch([], encoded=gzip.compress(body), record_count=len(values), attributes=GZIP)


def produce(wire: Wire, topic: str, batch: bytes) -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    answer = wire.exchange(wire.frame(ApiKey.PRODUCE, PRODUCE_VERSION, body, True))
    decoded = decode_body(answer_schema(ApiKey.PRODUCE, PRODUCE_VERSION), answer, 5)
    errors = [p.error_code for t in decoded.responses for p in t.partition_responses]
    assert errors == [0], errors


def measure(
    name: str, run: Callable[[], None], pinger: Pinger, metrics_port: int, results: dict[str, Any]
) -> None:
    stalls_before, holds_before = probe_figures(metrics_port)
    pinger.window()
    started = time.perf_counter()
    run()
    took = time.perf_counter() - started
    time.sleep(0.05)  # a ping sent at the end comes back
    worst = pinger.window()
    stalls_after, holds_after = probe_figures(metrics_port)
    hold = worst_hold(holds_before, holds_after)
    results[name] = {
        "worst_ping_ms": worst * 1000,
        "hold_at_most_ms": hold * 1000,
        "took_s": took,
        "stalls": stalls_after - stalls_before,
    }
    print(
        f"{name:<28} worst ping {worst * 1000:8.1f} ms   loop held <= {hold * 1000:6.0f} ms   "
        f"stalls {stalls_after - stalls_before:4d}   took {took:7.2f} s",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    # the restart is timed with lockgate's modules compiled, as an installed package has them
    compileall.compile_dir(str(Path(lockgate.__file__).parent), quiet=1)
    port, metrics_port = free_port(), free_port()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-stalls-") as tmp:
        command = broker_command("lockgate-page-cache", port, Path(tmp) / "data")
        command += ["--set", f"lockgate.metrics.port={metrics_port}", "--log-level", "INFO"]
        log = open(Path(tmp) / "broker.log", "ab")  # noqa: SIM115 (the broker's, across restarts)
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        pinger: Pinger | None = None
        try:
            wait_for_port(port, process, timeout=120)
            wire = Wire(port)
            create_topics(wire, args.partitions)
            wait_for_partitions(wire, args.partitions)
            create_topic(wire, "recompressed", 1, {"compression.type": "zstd"})
            batch = gzip_batch()
            pinger = Pinger(port)
            time.sleep(0.5)
            measure("idle 2 s", lambda: time.sleep(2), pinger, metrics_port, results)

            def repeat(action: Callable[[], Any]) -> Callable[[], None]:
                def run() -> None:
                    for _ in range(args.repeat):
                        action()

                return run

            frame = metadata_frame(wire)
            measure(
                f"metadata ({args.partitions})",
                repeat(lambda: wire.exchange(frame)),
                pinger,
                metrics_port,
                results,
            )
            measure(
                "scrape",
                repeat(lambda: probe_figures(metrics_port)),
                pinger,
                metrics_port,
                results,
            )
            measure(
                "create 100",
                lambda: create_topic(wire, "c100", 100, {}),
                pinger,
                metrics_port,
                results,
            )
            measure(
                "create 1000",
                lambda: create_topic(wire, "c1000", 1000, {}),
                pinger,
                metrics_port,
                results,
            )
            measure(
                "delete 1000", lambda: delete_topic(wire, "c1000"), pinger, metrics_port, results
            )
            measure(
                "recompress gzip->zstd 1 MiB",
                repeat(lambda: produce(wire, "recompressed", batch)),
                pinger,
                metrics_port,
                results,
            )
            wire.close()
            process.send_signal(signal.SIGTERM)
            process.wait(120)
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            wait_for_port(port, process, timeout=120)

            def opened() -> None:
                # the broker opens its logs behind its answers and says when all are open
                deadline = time.monotonic() + 300
                while b"partition logs opened" not in (Path(tmp) / "broker.log").read_bytes():
                    if time.monotonic() > deadline:
                        raise TimeoutError("the logs were not all opened")
                    time.sleep(0.01)

            measure("restart: opening the logs", opened, pinger, metrics_port, results)
        finally:
            if pinger is not None:
                pinger.stop()
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(120)
            log.close()
    idle = results["idle 2 s"]["worst_ping_ms"]
    print(f"(the idle broker's worst ping is the machine's own noise: {idle:.1f} ms)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
