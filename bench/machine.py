"""The machine's physical limits that bound the other benchmarks: loopback TCP bandwidth (one
sender process, one receiver process, 1 MiB writes, `--seconds`), the latency of a 4 KiB
write + fsync in `--dir` (what an acks=all write waits for under lockgate's fsync durability),
and the cores this process may use.

    python -m bench.machine [--seconds 3] [--dir .] [--fsyncs 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

CHUNK = 1 << 20


def _send(port: int, seconds: float) -> None:
    payload = b"\0" * CHUNK
    with socket.create_connection(("127.0.0.1", port)) as sock:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sock.sendall(payload)


def loopback_bandwidth(seconds: float) -> float:
    """Bytes per second one TCP connection carries over 127.0.0.1."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sender = multiprocessing.Process(target=_send, args=(server.getsockname()[1], seconds))
        sender.start()
        connection, _ = server.accept()
        received, started = 0, time.monotonic()
        with connection:
            buffer = bytearray(CHUNK)
            while chunk := connection.recv_into(buffer):
                received += chunk
        elapsed = time.monotonic() - started
        sender.join(10)
    return received / elapsed


def fsync_latencies(directory: Path, count: int) -> list[float]:
    """Seconds each 4 KiB append + fsync took, in a file of its own in `directory`."""
    times = []
    with tempfile.NamedTemporaryFile(dir=directory) as handle:
        block = os.urandom(4096)
        for _ in range(count):
            started = time.perf_counter()
            handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
            times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=".", help="where to measure fsync (the data directory)")
    parser.add_argument("--fsyncs", type=int, default=200)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    fsyncs = sorted(fsync_latencies(Path(args.dir), args.fsyncs))
    figures = {
        "cores": len(os.sched_getaffinity(0)),
        "loopback_GB_per_s": loopback_bandwidth(args.seconds) / 1e9,
        "fsync_4KiB_p50_ms": statistics.median(fsyncs) * 1000,
        "fsync_4KiB_p99_ms": fsyncs[int(len(fsyncs) * 0.99) - 1] * 1000,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
