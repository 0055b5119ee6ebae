"""Apache Kafka's own share consumer (KafkaShareConsumer, kafka-clients 4.4) as a test peer: the
single-file program java/ShareGroupChecks.java consumes a topic of 30 records as a share group
with explicit acknowledgement (RELEASE offsets ending in 3 once, REJECT those ending in 7,
ACCEPT the rest; commitSync every other poll, the rest piggy-backed on ShareFetch) and prints
what it saw as JSON lines. The same program and the same checks run against every broker in
BROKERS: every record is delivered until accepted or rejected, released ones come again with
delivery count 2, rejected and accepted ones never again, no acknowledgement fails, and the
broker fills AcquisitionLockTimeoutMs. Differential by construction: each broker must give the
one summary below."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.java_programs import java_program

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "ShareGroupChecks.java"
BROKERS = ["kafka", "lockgate"]
RECORDS = 30


def run_share_checks(classpath: str, bootstrap: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [*java_program(PROGRAM, classpath, "-Xmx384m"), bootstrap, uuid.uuid4().hex[:10]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What a broker made of the run, in a form both brokers must agree on."""
    deliveries: dict[int, list[int]] = {}
    final: dict[int, str] = {}
    for event in events:
        if event["event"] == "delivered":
            assert event["value"] == f"v{event['offset']}" and event["key"] == f"k{event['offset']}"
            deliveries.setdefault(event["offset"], []).append(event["count"])
        elif event["event"] == "ack" and event["type"] != "RELEASE":
            assert event["offset"] not in final, f"settled twice: {event}"
            final[event["offset"]] = event["type"]
    return {
        "deliveries": deliveries,
        "final": final,
        "commit_errors": [e for e in events if e["event"] == "commit" and e["error"] is not None],
        "commits": sum(1 for e in events if e["event"] == "commit"),
        "strays": [e["offset"] for e in events if e["event"] == "stray"],
        "lock_ms": [e["ms"] for e in events if e["event"] == "lock"],
    }


def expected() -> dict[str, Any]:
    return {
        "deliveries": {o: [1, 2] if o % 10 == 3 else [1] for o in range(RECORDS)},
        "final": {o: "REJECT" if o % 10 == 7 else "ACCEPT" for o in range(RECORDS)},
        "commit_errors": [],
        "strays": [],
        "lock_ms": [30_000],  # group.share.record.lock.duration.ms's default
    }


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_kafkas_share_consumer_settles_every_record(share_broker: str, classpath: str) -> None:
    got = summary(run_share_checks(classpath, share_broker))
    assert got.pop("commits") >= 1  # commitSync went out (ShareAcknowledge)
    assert got == expected()
