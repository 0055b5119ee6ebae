# franz-go (github.com/twmb/franz-go) as a tested client: the program tests/go/franzcheck, built
# by `make go-deps` into .cache/go/franzcheck, runs one scenario per call and prints one JSON
# line; run() returns it, and the check_* functions hold what every broker must answer to it
# (lockgate on one node or a cluster, and Apache Kafka alike).
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FRANZCHECK = ROOT / ".cache" / "go" / "franzcheck"

Result = dict[str, Any]

# lockgate's settings for these tests
BROKER_SETTINGS = {
    # as the reference broker's: a new classic group is formed without waiting
    "group.initial.rebalance.delay.ms": "0",
    # KIP-848 members learn of a new member at their next heartbeat: keep it short
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
}


def franzcheck_binary() -> Path | None:
    """The built program, or None when `make go-deps` has not run."""
    return FRANZCHECK if FRANZCHECK.is_file() else None


def run(binary: Path, mode: str, timeout: float = 90.0, **flags: object) -> Result:
    """Runs `franzcheck MODE -flag=value ...` (underscores in flag names become dashes),
    bounded by `timeout` seconds, and returns its JSON line; an error line, a non-zero exit or
    no line fails with franz-go's log."""
    command = [str(binary), mode, f"-timeout={timeout}s", "-log-level=info"]
    command += [f"-{name.replace('_', '-')}={value}" for name, value in flags.items()]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout + 30, check=False
    )
    lines = done.stdout.strip().splitlines()
    result: Result = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or "error" in result or not result:
        raise AssertionError(
            f"{' '.join(command)} exited {done.returncode}: {done.stdout[-2000:]}\n"
            f"franz-go's log:\n{done.stderr[-6000:]}"
        )
    return result


def check_produce_consume(result: Result, records: int, partitions: int) -> None:
    """Every record delivered once, read back once at the offset it was given, in order."""
    assert result["produce_errors"] == [], result
    assert result["produced"] == result["consumed"] == records, result
    assert result["producer_id"] >= 0 and result["requests"]["InitProducerID"] >= 1, result
    assert result["bad_values"] == 0, result
    assert len(result["partitions"]) == partitions, result
    for partition, report in result["partitions"].items():
        assert report["produced"] == report["consumed"] == report["end_offset"] > 0, (
            partition,
            result,
        )
        assert report["contiguous"] and report["in_order"] and report["offsets_match"], (
            partition,
            result,
        )


# the requests that tell which protocol the members really spoke
GROUP_REQUESTS = {"classic": ("JoinGroup", "SyncGroup"), "consumer": ("ConsumerGroupHeartbeat",)}


def check_group(result: Result, protocol: str, records: int, partitions: int) -> None:
    """Two members split the partitions, every record reached exactly one of them once, their
    commits reached the end offsets, and the broker described the group of that protocol."""
    assert result["failures"] == [], result
    assert result["distinct"] == result["deliveries"] == records, result
    assert result["duplicates"] == 0, result
    assert result["split_assignment"], result
    members = result["members"]
    assert members["a"]["consumed"] > 0 and members["b"]["consumed"] > 0, result
    owned = members["a"]["partitions"] + members["b"]["partitions"]
    assert sorted(owned) == list(range(partitions)), result
    assert result["committed_offsets"] == result["end_offsets"], result
    assert sum(result["end_offsets"].values()) == records, result
    requests = result["requests"]
    for spoken, names in GROUP_REQUESTS.items():
        sent = [requests.get(name, 0) > 0 for name in names]
        assert all(sent) if spoken == protocol else not any(sent), result
    assert result["group_type"] == protocol, result
    assert result["group_state"] == "Stable" and result["described_members"] == 2, result
    expected_assignor = "uniform" if protocol == "consumer" else "cooperative-sticky"
    assert result["assignor"] == expected_assignor, result


def check_exactly_once(result: Result, records: int) -> None:
    """Every input record once in the read_committed output, in input order, and the group's
    offsets committed up to the input's end."""
    assert result["failures"] == [], result
    assert result["committed_records"] == records, result
    assert result["output_records"] == records, result
    assert result["missing"] == result["duplicates"] == result["foreign"] == 0, result
    assert result["in_order"], result
    assert result["offsets_committed"], result
    assert sum(result["input_end_offsets"].values()) == records, result
    assert result["transactions"] >= 2, result


# The scenarios every target runs (one node, a cluster, the reference Kafka): franzcheck's
# modes with their checks; `replication` for the topics they create.


def produce_and_consume(binary: Path, bootstrap: str, replication: int = 1) -> None:
    result = run(binary, "produce-consume", brokers=bootstrap, topic="franz-pc", partitions=3,
                 replication=replication, records=1000)  # fmt: skip
    check_produce_consume(result, records=1000, partitions=3)


def group_shares_a_topic(binary: Path, bootstrap: str, protocol: str, replication: int = 1) -> None:
    name = f"franz-group-{protocol}"
    result = run(binary, "group", brokers=bootstrap, topic=name, group=name, protocol=protocol,
                 partitions=6, replication=replication, records=600)  # fmt: skip
    check_group(result, protocol, records=600, partitions=6)


def exactly_once_chain(binary: Path, bootstrap: str, protocol: str, replication: int = 1) -> None:
    name = f"franz-eos-{protocol}"
    result = run(binary, "eos", brokers=bootstrap, input=f"{name}-in", output=f"{name}-out",
                 group=name, protocol=protocol, workers=2, partitions=4,
                 replication=replication, records=2000, max_poll=100)  # fmt: skip
    check_exactly_once(result, records=2000)


def check_share(result: Result, records: int, consumers: int) -> None:
    """KIP-932's promises to share consumers: every record answered for good, once (accepted
    once or rejected, never handed out after), each released record handed out again with a
    higher delivery count, delivery counts that count the deliveries, no error; and the
    protocol spoken was the share group's."""
    assert result["ack_errors"] == [] and result["poll_errors"] == [], result
    assert result["accepted"] + result["rejected"] == records, result
    assert result["rejected"] == sum(1 for i in range(records) if i % 10 == 7), result
    released = sum(1 for i in range(records) if i % 10 == 3)
    assert result["redelivered"] == released and result["max_delivery_count"] == 2, result
    assert result["accepted_twice"] == result["after_final"] == 0, result
    assert result["wrong_delivery_count"] == 0, result
    assert result["deliveries"] == records + released, result
    assert sum(result["members"].values()) == result["deliveries"], result
    assert len(result["members"]) <= consumers, result
    requests = result["requests"]
    assert requests.get("ShareGroupHeartbeat", 0) >= consumers, result
    assert requests.get("ShareFetch", 0) >= 1, result


def share_group_consumes(
    binary: Path, bootstrap: str, topic: str, consumers: int, partitions: int = 1,
    records: int = 200, replication: int = 1,
) -> Result:  # fmt: skip
    """`consumers` share consumers of one group read a topic of `partitions`."""
    result = run(binary, "share", brokers=bootstrap, topic=topic, group=f"{topic}-share",
                 consumers=consumers, partitions=partitions, records=records,
                 replication=replication)  # fmt: skip
    check_share(result, records, consumers)
    return result
