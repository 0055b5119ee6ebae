"""Scale: many partitions on one broker. How long a Metadata answer for all of them takes, and
how long a restart takes until the first acknowledged write.

`python -m bench.scale` starts each target broker (lockgate page-cache, Apache Kafka 4.4)
fresh, creates `--partitions` partitions (topics of `--per-topic` partitions, 100 by default,
replication factor 1, ten topics a CreateTopics) and times that until Metadata lists every one
with a leader, then:

- **Metadata**: `--rounds` requests for every topic (topics=null, Metadata v12), each timed from
  its first byte sent to the answer's last byte read (the client only counts bytes: no decoding
  is timed); the median and the answer's size.
- **Restart** (lockgate only): the broker stopped (SIGTERM: a clean stop; then kill -9: a crash)
  and started again on its data: seconds from the start of the process to the first Produce
  (acks=all, one record, asked again every 10 ms) that is acknowledged.

    python -m bench.scale [--partitions 10000] [--per-topic 100]
                          [--targets lockgate-page-cache,kafka] [--rounds 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import lockgate
from bench.throughput import broker_command
from bench.transactions import wait_for_port
from lockgate.client.connection import encode_request_header
from lockgate.protocol.api import ApiKey, build, decode_body, encode, request_class, response_class
from lockgate.protocol.records import build_batch
from lockgate.tools.devcluster import free_port

PER_TOPIC = 100
METADATA_VERSION = 12
CREATE_VERSION = 7
PRODUCE_VERSION = 9
_SIZE = struct.Struct(">i")


class Wire:
    """A blocking connection that sends kio-encoded requests and reads raw answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.correlation = 0

    def frame(self, api_key: int, version: int, body: dict[str, Any], flexible: bool) -> bytes:
        schema = request_class(api_key, version)
        assert schema is not None
        self.correlation += 1
        header = encode_request_header(api_key, version, self.correlation, "bench-scale", flexible)
        payload = header + encode(build(schema, body))
        return _SIZE.pack(len(payload)) + payload

    def exchange(self, frame: bytes) -> bytes:
        """Sends one request; its answer's bytes after the size (correlation id first)."""
        self.sock.sendall(frame)
        (size,) = _SIZE.unpack(self._read(4))
        return self._read(size)

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def answer_schema(api_key: int, version: int) -> type[Any]:
    schema = response_class(api_key, version)
    assert schema is not None
    return schema


def create_topics(wire: Wire, partitions: int, per_topic: int = PER_TOPIC) -> None:
    for first in range(0, partitions, per_topic * 10):  # ten topics a request
        topics = [{"name": f"scale-{t}", "num_partitions": per_topic, "replication_factor": 1,
                   "assignments": [], "configs": []}
                  for t in range(first // per_topic, min(partitions, first + per_topic * 10)
                                 // per_topic)]  # fmt: skip
        answer = wire.exchange(wire.frame(ApiKey.CREATE_TOPICS, CREATE_VERSION,
                                          {"topics": topics, "timeout_ms": 60_000,
                                           "validate_only": False}, True))  # fmt: skip
        decoded = decode_body(answer_schema(ApiKey.CREATE_TOPICS, CREATE_VERSION), answer, 5)
        errors = {t.error_code for t in decoded.topics} - {0}
        assert not errors, f"CreateTopics: {errors}"


def metadata_frame(wire: Wire) -> bytes:
    return wire.frame(ApiKey.METADATA, METADATA_VERSION,
                      {"topics": None, "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": False}, True)  # fmt: skip


def wait_for_partitions(wire: Wire, partitions: int, timeout: float = 300.0) -> None:
    """Until Metadata lists every partition with a leader (Kafka's controller creates them
    after CreateTopics has answered)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = wire.exchange(metadata_frame(wire))
        decoded = decode_body(answer_schema(ApiKey.METADATA, METADATA_VERSION), answer, 5)
        led = sum(p.leader_id >= 0 for t in decoded.topics for p in t.partitions)
        if led >= partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{led} of {partitions} partitions led after {timeout} s")
        time.sleep(1)


def metadata_times(wire: Wire, rounds: int) -> tuple[list[float], int]:
    frame = metadata_frame(wire)
    times, size = [], 0
    for _ in range(rounds + 2):
        started = time.perf_counter()
        size = len(wire.exchange(frame))
        times.append(time.perf_counter() - started)
    return times[2:], size  # the first two warm caches up


def produce_once(port: int) -> bool:
    """One Produce (acks=all) of one record to scale-0/0; True if acknowledged."""
    try:
        wire = Wire(port)
    except OSError:
        return False
    try:
        body = {"transactional_id": None, "acks": -1, "timeout": 5_000,
                "topic_data": [{"name": "scale-0", "partition_data": [
                    {"index": 0, "records": build_batch([(None, b"x")])}]}]}  # fmt: skip
        answer = wire.exchange(wire.frame(ApiKey.PRODUCE, PRODUCE_VERSION, body, True))
        decoded = decode_body(answer_schema(ApiKey.PRODUCE, PRODUCE_VERSION), answer, 5)
        return all(p.error_code == 0 for t in decoded.responses for p in t.partition_responses)
    except (OSError, ConnectionError):
        return False
    finally:
        wire.close()


def time_to_first_write(command: list[str], port: int, log: Path) -> tuple[float, Any]:
    started = time.monotonic()
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)  # fmt: skip
    deadline = started + 300
    while not produce_once(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no acknowledged write after the restart (see {log})")
        time.sleep(0.01)
    return time.monotonic() - started, process


def stop(process: subprocess.Popen[bytes], how: int) -> None:
    os.kill(process.pid, how)
    process.wait(120)


def bench_target(
    target: str, partitions: int, per_topic: int, rounds: int, scratch: Path
) -> dict[str, Any]:
    port = free_port()
    data = scratch / f"{target}-data"
    command = broker_command(target, port, data)
    log = scratch / f"{target}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)  # fmt: skip
    figures: dict[str, Any] = {}
    try:
        wait_for_port(port, process, timeout=120)
        wire = Wire(port)
        start = time.monotonic()
        create_topics(wire, partitions, per_topic)
        wait_for_partitions(wire, partitions)
        figures["create_s"] = time.monotonic() - start
        times, size = metadata_times(wire, rounds)
        wire.close()
        figures["metadata_ms"] = statistics.median(times) * 1000
        figures["metadata_bytes"] = size
        if target.startswith("lockgate"):
            for name, how in (("restart_sigterm_s", signal.SIGTERM),
                              ("restart_kill9_s", signal.SIGKILL)):  # fmt: skip
                stop(process, how)
                figures[name], process = time_to_first_write(command, port, log)
    finally:
        if process.poll() is None:
            stop(process, signal.SIGTERM)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--per-topic", type=int, default=PER_TOPIC, help="partitions a topic")
    parser.add_argument("--targets", default="lockgate-page-cache,kafka")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    # a restart is timed from the process's start: with its modules compiled, as an installed
    # package (or `make setup`) has them, not compiled again on every start
    compileall.compile_dir(str(Path(lockgate.__file__).parent), quiet=1)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-scale-") as tmp:
        for target in args.targets.split(","):
            results[target] = bench_target(
                target, args.partitions, args.per_topic, args.rounds, Path(tmp)
            )
            print(target, json.dumps(results[target]), flush=True)
    if "kafka" in results and "lockgate-page-cache" in results:
        results["lockgate/kafka metadata time"] = (
            results["lockgate-page-cache"]["metadata_ms"] / results["kafka"]["metadata_ms"]
        )
    print(json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
