"""What security costs: produce throughput of one confluent-kafka producer against one lockgate
broker (page-cache durability, started fresh on loopback ports) through its PLAINTEXT listener
and through its SASL_SSL listener (TLS 1.3, SCRAM-SHA-512), alternating in one run so that both
see the same machine.

The producer is idempotent, acks=all, linger 10 ms, batch size 1,000,000 bytes, and writes N
values of each size to a 3-partition topic (its own per round), polling every 1,000 messages,
and the clock stops when flush() returns with every message acknowledged. Connecting, the SASL
exchange and InitProducerId are not timed (one probe message is delivered first). Reported:
messages/s and MB/s per listener and size (the median of the rounds), and SASL_SSL ÷ PLAINTEXT.

    python -m bench.security [--messages N] [--sizes 100,1024] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.broker import BrokerProcess
from tests.support.tls import make_pki

PARTITIONS = 3
USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-512"


def client_settings(broker: BrokerProcess, listener: str, ca: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": broker.bootstrap_for(listener)}
    if listener == "SASL_SSL":
        settings |= {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca,
            "sasl.mechanisms": MECHANISM,
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        }
    return settings


def produce(settings: dict[str, Any], topic: str, messages: int, size: int) -> float:
    """Messages per second of one producer writing `messages` values of `size` bytes."""
    producer = Producer(
        settings
        | {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "delivery.report.only.error": True,
        }
    )
    failures: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer.produce(topic, b"probe", on_delivery=report)
    if producer.flush(30) != 0 or failures:
        raise RuntimeError(f"the probe was not delivered: {failures}")
    value = b"x" * size
    started = time.perf_counter()
    for index in range(messages):
        producer.produce(topic, value, partition=index % PARTITIONS, on_delivery=report)
        if index % 1000 == 999:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failures:
        raise RuntimeError(f"{left} undelivered, failures: {failures[:3]}")
    return messages / elapsed


def run(messages: int, sizes: list[int], rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-security-") as work:
        root = Path(work)
        pki = make_pki(root / "pki")
        data = root / "data"
        subprocess.run(
            [sys.executable, "-m", "lockgate.cli", "users", "add", USER, "--password", PASSWORD,
             "--mechanism", MECHANISM, "--data-dir", str(data)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        settings = {"lockgate.durability": "page-cache"}
        settings |= pki.server_settings(prefix="listener.name.sasl_ssl.")
        broker = BrokerProcess(data, settings, listeners=("PLAINTEXT", "SASL_SSL")).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            results: dict[str, dict[str, list[float]]] = {}
            for round_number in range(rounds):
                for size in sizes:
                    for listener in ("PLAINTEXT", "SASL_SSL"):
                        topic = f"bench-{listener.lower()}-{size}-{round_number}"
                        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                        rate = produce(client_settings(broker, listener, pki.ca), topic,
                                       messages, size)  # fmt: skip
                        results.setdefault(str(size), {}).setdefault(listener, []).append(rate)
                        print(f"round {round_number + 1} {size:>5} B {listener:<9} "
                              f"{rate:>10,.0f} msg/s", flush=True)  # fmt: skip
        finally:
            broker.stop()
    rows: dict[str, Any] = {}
    summary: dict[str, Any] = {"messages": messages, "rounds": rounds, "sizes": rows}
    for label, by_listener in results.items():
        plain = statistics.median(by_listener["PLAINTEXT"])
        secured = statistics.median(by_listener["SASL_SSL"])
        rows[label] = {
            "plaintext_msgs": round(plain),
            "sasl_ssl_msgs": round(secured),
            "plaintext_mb": round(plain * int(label) / 1e6, 1),
            "sasl_ssl_mb": round(secured * int(label) / 1e6, 1),
            "ratio": round(secured / plain, 2),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    summary = run(args.messages, sizes, args.rounds)
    print()
    print(f"{'size':>6}  {'PLAINTEXT msg/s':>16}  {'SASL_SSL msg/s':>15}  {'ratio':>5}")
    for size, row in summary["sizes"].items():
        print(f"{size:>6}  {row['plaintext_msgs']:>16,}  {row['sasl_ssl_msgs']:>15,}  "
              f"{row['ratio']:>5.2f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
