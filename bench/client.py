"""Producer throughput of lockgate's own client against confluent-kafka (librdkafka), both
writing to the same lockgate broker (page-cache durability, started fresh on a loopback port),
alternating in one run so that both see the same machine.

Both producers are idempotent, acks=all, linger 5 ms, batch size 1,000,000 bytes (both
clients' default, set explicitly), write N values of each size to a 3-partition topic with keys
spread over the partitions, and count until every delivery is acknowledged. Reported:
messages/s per client and size, and lockgate ÷ confluent-kafka.

Each size runs twice: one call per record (send / produce), then calls of 1,000 records
(send_batch / produce_batch). lockgate's producer runs with the implementation it would pick
(the compiled fast path when built); --pure adds a run of its pure-Python twin
(LOCKGATE_PURE_PYTHON=1) to each round. Python's garbage collector keeps its defaults.

--busy loads the machine as a busy application server would: one more process spinning on a
core (a Python `while True: pass`), started before each measurement and stopped after it, so
that every client runs under the same load. --baseline SRC adds a run of lockgate's producer
from another source tree (SRC holds its `lockgate` package, built) to each round, for before /
after figures side by side. lockgate's producer always runs in a child process of its own
(PYTHONPATH naming the tree it comes from), confluent-kafka in this one.

    python -m bench.client [--messages N] [--sizes 100,1024] [--rounds R] [--pure] [--busy]
                           [--baseline SRC] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import lockgate
from bench.transactions import wait_for_port
from lockgate.client.fastpath import PURE_PYTHON_VARIABLE
from lockgate.client.producer import Producer
from lockgate.tools.devcluster import free_port

PARTITIONS = 3
BATCH_SIZE = 1_000_000
CALL_SIZE = 1_000  # records per produce_batch() / send_batch() call
# The source tree this lockgate comes from (the directory holding the `lockgate` package).
OWN_SOURCE = Path(lockgate.__file__).resolve().parents[1]
# A core's worth of CPU taken away from the clients and the broker: --busy.
SPINNER = [sys.executable, "-c", "while True: pass"]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir)]
    command += ["--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"]
    command += ["--set", "lockgate.durability=page-cache"]
    process = subprocess.Popen(command)
    wait_for_port(port, process)
    return process, f"127.0.0.1:{port}"


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)


def run_confluent(bootstrap: str, topic: str, count: int, size: int, batched: bool) -> float:
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": BATCH_SIZE,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * size
    keys = [str(i).encode() for i in range(1024)]
    producer.produce(topic, value, keys[0])  # metadata and producer id first, as for ours
    producer.flush(30)
    messages = [{"key": keys[i % 1024], "value": value} for i in range(count)] if batched else []
    start = time.perf_counter()
    if batched:
        for first in range(0, count, CALL_SIZE):
            chunk = messages[first : first + CALL_SIZE]
            if producer.produce_batch(topic, chunk) != len(chunk):
                raise RuntimeError("confluent-kafka's queue refused part of a batch")
    else:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, value, keys[i % 1024])
                    break
                except BufferError:
                    producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver everything")
    return count / (time.perf_counter() - start)


async def run_lockgate(
    bootstrap: str, topic: str, count: int, size: int, batched: bool, pure: bool
) -> float:
    """Runs in the child process (see run_lockgate_in_child)."""
    value = b"x" * size
    keys = [str(i).encode() for i in range(1024)]
    records = [(keys[i % 1024], value) for i in range(count)] if batched else []
    os.environ[PURE_PYTHON_VARIABLE] = "1" if pure else "0"  # read when a producer is built
    async with Producer(bootstrap, linger_ms=5, acks=-1, batch_size=BATCH_SIZE) as producer:
        assert (producer.implementation == "pure") == pure
        await producer.send_and_wait(topic, value, keys[0])  # metadata and producer id first
        start = time.perf_counter()
        if batched:
            for first in range(0, count, CALL_SIZE):
                await producer.send_batch(topic, records[first : first + CALL_SIZE])
        else:
            for i in range(count):
                await producer.send(topic, value, keys[i % 1024])
        await producer.flush()
        return count / (time.perf_counter() - start)


def run_lockgate_in_child(
    source: Path, bootstrap: str, topic: str, count: int, size: int, batched: bool, pure: bool
) -> float:
    """run_lockgate in a fresh process whose `lockgate` comes from `source`: each tree's
    client alone in its process (no other client's garbage in its collector's scans)."""
    job = {"bootstrap": bootstrap, "topic": topic, "count": count, "size": size}
    job |= {"batched": batched, "pure": pure}
    environment = os.environ | {"PYTHONPATH": str(source)}
    command = [sys.executable, "-m", "bench.client", "--child", json.dumps(job)]
    cwd = Path(__file__).resolve().parents[1]  # this tree's bench package, whatever lockgate
    output = subprocess.run(command, env=environment, cwd=cwd, capture_output=True)
    if output.returncode != 0:
        sys.stderr.write(output.stderr.decode(errors="replace"))
        raise RuntimeError(f"lockgate's producer from {source} failed")
    return float(json.loads(output.stdout.decode().splitlines()[-1])["rate"])


def child(job_text: str) -> None:
    job = json.loads(job_text)
    rate = asyncio.run(
        run_lockgate(
            job["bootstrap"], job["topic"], job["count"], job["size"], job["batched"], job["pure"]
        )
    )
    print(json.dumps({"rate": rate, "lockgate": lockgate.__file__}))


@contextmanager
def machine_load(busy: bool) -> Iterator[None]:
    """With `busy`, one process spinning on a core while inside."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen(SPINNER)
    try:
        time.sleep(0.2)  # running before the measurement starts
        yield
    finally:
        spinner.kill()  # by its PID: only the process started here
        spinner.wait(10)


def compare(
    bootstrap: str,
    size: int,
    batched: bool,
    count: int,
    rounds: int,
    pure: bool,
    busy: bool = False,
    baseline: Path | None = None,
) -> dict[str, float]:
    """Alternating rounds of the clients: per-record calls (send / produce) or calls of
    CALL_SIZE records (send_batch / produce_batch)."""
    api = "batch calls" if batched else "record calls"
    clients = ["confluent-kafka", "lockgate"] + (["lockgate-pure"] if pure else [])
    clients += ["lockgate-base"] if baseline is not None else []
    rates: dict[str, list[float]] = {client: [] for client in clients}
    for round_number in range(rounds):
        for client in clients:
            topic = f"bench-client-{size}-{client}-{int(batched)}-{round_number}"
            create_topic(bootstrap, topic)
            with machine_load(busy):
                if client.startswith("lockgate"):
                    source = OWN_SOURCE
                    if client == "lockgate-base":
                        assert baseline is not None
                        source = baseline
                    rate = run_lockgate_in_child(
                        source, bootstrap, topic, count, size, batched, client == "lockgate-pure"
                    )
                else:
                    rate = run_confluent(bootstrap, topic, count, size, batched)
            rates[client].append(rate)
            print(f"{size:>5} B  {api}  {client:<16} round {round_number}: {rate:>10,.0f} msg/s")
    theirs = statistics.median(rates["confluent-kafka"])
    result = {"confluent_kafka_msg_per_s": theirs}
    for client in clients[1:]:
        ours = statistics.median(rates[client])
        name = client.replace("-", "_")
        result |= {f"{name}_msg_per_s": ours, f"{name}_ratio": ours / theirs}
        print(
            f"{size:>5} B  {api}  median {client} {ours:,.0f} msg/s, confluent-kafka "
            f"{theirs:,.0f} msg/s: ratio {ours / theirs:.2f}"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pure", action="store_true", help="also run the pure-Python twin")
    parser.add_argument(
        "--busy", action="store_true", help="one more process spinning on a core meanwhile"
    )
    parser.add_argument(
        "--baseline", type=Path, help="also run lockgate's producer from this source tree"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one lockgate run (internal)
    options = parser.parse_args()
    if options.child is not None:
        child(options.child)
        return
    # a SIGTERM unwinds like an exception: the broker and any spinner stop with the benchmark
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    baseline = options.baseline
    if baseline is not None:
        baseline = baseline.resolve()
        if (baseline / "src" / "lockgate").is_dir():
            baseline = baseline / "src"  # a checkout's root
        if not (baseline / "lockgate").is_dir():
            parser.error(f"{options.baseline} holds no lockgate package")
    mode = "busy: one more process spinning on a core" if options.busy else "quiet"
    print(
        f"machine: {mode}; lockgate from {OWN_SOURCE}"
        + (f", base from {baseline}" if baseline else "")
    )
    sizes = [int(s) for s in options.sizes.split(",")]
    results: dict[str, Any] = {"mode": "busy" if options.busy else "quiet"}
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-client-") as scratch:
        process, bootstrap = start_broker(Path(scratch) / "data")
        try:
            for size in sizes:
                for batched in (False, True):
                    results[f"{size}{' batch' if batched else ''}"] = compare(
                        bootstrap,
                        size,
                        batched,
                        options.messages,
                        options.rounds,
                        options.pure,
                        options.busy,
                        baseline,
                    )
        finally:
            process.terminate()
            process.wait(30)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
