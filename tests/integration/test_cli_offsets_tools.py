"""The Kafka-script counterparts against one broker, with data written by confluent-kafka
(librdkafka): `groups reset-offsets` (every spec, scopes, dry run, export and --from-file),
`groups delete-offsets`, `delete-records`, `get-offsets` and `dump-log` on the broker's live
data directory. The tools run in-process through `lockgate.cli.main`."""

from __future__ import annotations

import asyncio
import datetime
import glob
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition

from lockgate.cli import main
from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TOPIC = "offsets-tools"  # 2 partitions: offsets 0-3 two days old, 4-7 an hour old, 8 a marker
OPEN = "open-txn"  # 1 partition: two plain records, then a transaction left open
DOOMED = "delete-me"  # 2 partitions of 5 records, for delete-records
NOW_MS = int(time.time() * 1000)
OLD_MS = NOW_MS - 2 * 86_400_000
RECENT_MS = NOW_MS - 3_600_000
TRANSACTIONAL_ID = "tools-tx"
FIXTURE_GROUP = "fixture-group"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("cli-offsets") / "data"
    process = BrokerProcess(data, {"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        create_topic(process.bootstrap, TOPIC, 2)
        create_topic(process.bootstrap, OPEN, 1)
        create_topic(process.bootstrap, DOOMED, 2)
        producer = Producer(
            {"bootstrap.servers": process.bootstrap, "transactional.id": TRANSACTIONAL_ID}
        )
        producer.init_transactions(10)
        producer.begin_transaction()
        for partition in (0, 1):
            for i in range(8):
                when = OLD_MS + i if i < 4 else RECENT_MS + i
                producer.produce(TOPIC, key=b"k%d" % i, value=b"v", partition=partition,
                                 timestamp=when)  # fmt: skip
        producer.commit_transaction(10)
        plain = Producer({"bootstrap.servers": process.bootstrap})
        for partition in (0, 1):
            for _ in range(5):
                plain.produce(DOOMED, value=b"x", partition=partition)
        for _ in range(2):
            plain.produce(OPEN, value=b"committed", partition=0)
        assert plain.flush(10) == 0
        hanging = Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "open"})
        hanging.init_transactions(10)
        hanging.begin_transaction()
        hanging.produce(OPEN, value=b"pending", partition=0)
        assert hanging.flush(10) == 0
        commit(process, FIXTURE_GROUP, {0: 1})
        yield process
    finally:
        process.kill()


def commit(broker: BrokerProcess, group: str, offsets: dict[int, int], topic: str = TOPIC) -> None:
    """A commit outside any generation (the group stays Empty), as a simple consumer's."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[ConfluentPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    async def fetch() -> dict[TopicPartition, int]:
        async with Admin(broker.bootstrap) as admin:
            return await admin.list_group_offsets(group)

    return {(tp.topic, tp.partition): o for tp, o in asyncio.run(fetch()).items()}


def lockgate(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main([*args, "--bootstrap-server", broker.bootstrap, "--request-timeout-ms", "10000"])
    out, err = capsys.readouterr()
    return code, out, err


def rows(table: str) -> list[list[str]]:
    """The rows of the table in a tool's output, without its header and notes."""
    lines = table.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(("GROUP", "TOPIC"))), None)
    if start is None:
        return []
    return [line.split() for line in lines[start + 1 :] if line and not line.startswith("(")]


def test_get_offsets(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    def offsets(*args: str) -> list[str]:
        code, out, err = lockgate(broker, capsys, "get-offsets", *args)
        assert code == 0, err
        return out.splitlines()

    assert offsets("--topic", TOPIC) == [f"{TOPIC}:0:9", f"{TOPIC}:1:9"]
    assert offsets("--topic", "offsets-t.*", "--time", "earliest") == [
        f"{TOPIC}:0:0",
        f"{TOPIC}:1:0",
    ]
    assert offsets("--topic", TOPIC, "--partitions", "1", "--time", str(RECENT_MS)) == [
        f"{TOPIC}:1:4"
    ]
    # the commit marker, stamped with the broker's clock, is the newest record
    assert offsets("--topic-partitions", f"{TOPIC}:0", "--time", "max-timestamp") == [
        f"{TOPIC}:0:8"
    ]
    # no record that recent (the clock read now: the module may be imported minutes before this
    # runs, and the markers carry the broker's clock): the partitions are left out, as
    # kafka-get-offsets.sh does
    future_ms = int(time.time() * 1000) + 3_600_000
    assert offsets("--topic", TOPIC, "--time", str(future_ms)) == []
    # no tiered storage: -4 is the log start, -5 has no offset (Kafka answers -1 too), so
    # nothing is printed
    assert offsets("--topic", TOPIC, "--partitions", "0", "--time", "-4") == [f"{TOPIC}:0:0"]
    assert offsets("--topic", TOPIC, "--partitions", "0", "--time", "latest-tiered") == []
    assert offsets("--topic", OPEN) == [f"{OPEN}:0:3"]
    assert offsets("--topic", OPEN, "--isolation", "read_committed") == [f"{OPEN}:0:2"]
    everything = offsets("--exclude-internal-topics")
    assert f"{DOOMED}:1:5" in everything and not any(line.startswith("__") for line in everything)
    code, _out, err = lockgate(broker, capsys, "get-offsets", "--topic", "no-such-.*")
    assert code == 1 and "no topic partition matches" in err


def test_reset_offsets(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    group = "reset-a"
    commit(broker, group, {0: 6, 1: 6})

    def reset(*args: str) -> tuple[str, str]:
        code, out, err = lockgate(broker, capsys, "groups", "reset-offsets", *args)
        assert code == 0, err
        return out, err

    recent = datetime.datetime.fromtimestamp((RECENT_MS - 1_000) / 1000, datetime.UTC)
    out, _err = reset("--group", group, "--all-topics", "--to-datetime", recent.isoformat())
    assert rows(out) == [[group, TOPIC, "0", "4"], [group, TOPIC, "1", "4"]]
    assert "dry run" in out and committed(broker, group) == {(TOPIC, 0): 6, (TOPIC, 1): 6}

    reset("--group", group, "--topic", f"{TOPIC}:0", "--by-duration", "P1D", "--execute")
    assert committed(broker, group) == {(TOPIC, 0): 4, (TOPIC, 1): 6}

    out, err = reset("--group", group, "--all-topics", "--shift-by", "-5", "--execute")
    assert rows(out) == [[group, TOPIC, "0", "0"], [group, TOPIC, "1", "1"]]
    assert f"lower than the earliest offset of {TOPIC}-0" in err
    out, err = reset("--group", group, "--topic", TOPIC, "--shift-by", "100", "--dry-run")
    assert [row[3] for row in rows(out)] == ["9", "9"] and "higher than the latest" in err
    out, _err = reset("--group", group, "--topic", TOPIC, "--to-current")
    assert [row[3] for row in rows(out)] == ["0", "1"]
    out, _err = reset("--group", group, "--topic", TOPIC, "--to-datetime", "2000-01-01T00:00:00Z")
    assert [row[3] for row in rows(out)] == ["0", "0"]

    out, err = reset("--group", group, "--topic", TOPIC, "--to-latest", "--export", "--execute")
    assert out.splitlines() == [f"{TOPIC},0,9", f"{TOPIC},1,9"] and "dry run" not in err
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{TOPIC},0,2\n{TOPIC},1,50\n")
    out, _err = reset("--group", group, "--from-file", str(plan), "--execute")
    assert committed(broker, group) == {(TOPIC, 0): 2, (TOPIC, 1): 9}  # 50: clamped to the end

    other = "reset-b"  # unknown to the broker: Dead, which may be reset
    out, _err = reset(
        "--group", group, "--group", other, "--topic", f"{TOPIC}:1", "--to-offset", "3", "--export"
    )
    assert out.splitlines() == [f"{group},{TOPIC},1,3", f"{other},{TOPIC},1,3"]
    plan.write_text(out)
    reset("--group", group, "--group", other, "--from-file", str(plan), "--execute")
    assert committed(broker, other) == {(TOPIC, 1): 3}
    assert committed(broker, group)[(TOPIC, 1)] == 3
    out, _err = reset("--all-groups", "--topic", f"{TOPIC}:0", "--to-earliest")
    listed = {row[0] for row in rows(out)}
    assert {group, other, FIXTURE_GROUP} <= listed

    code, _out, err = lockgate(
        broker, capsys, "groups", "reset-offsets", "--group", group, "--to-earliest"
    )
    assert code == 1 and "needs --topic, --all-topics or --from-file" in err
    code, _out, err = lockgate(
        broker, capsys, "groups", "reset-offsets", "--group", group, "--all-topics",
        "--by-duration", "1 day",
    )  # fmt: skip
    assert code == 1 and "ISO-8601" in err


def test_active_group_refusals_and_delete_offsets(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    group = "active-group"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        consumer.commit(
            offsets=[ConfluentPartition(TOPIC, 0, 5), ConfluentPartition(OPEN, 0, 1)],
            asynchronous=False,
        )
        code, out, err = lockgate(
            broker, capsys, "groups", "reset-offsets", "--group", group, "--all-topics",
            "--to-earliest",
        )  # fmt: skip
        assert code == 1
        assert (
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            "current state is Stable." in err
        )
        assert rows(out) == []
        code, out, err = lockgate(
            broker, capsys, "groups", "delete-offsets", "--group", group, "--topic", TOPIC,
            "--topic", OPEN,
        )  # fmt: skip
        assert code == 1 and "Encountered some partition-level error" in err
        subscribed = (
            "Error: Deleting offsets of a topic is forbidden while the consumer group is "
            "actively subscribed to it."
        )
        assert [(topic, p, " ".join(status)) for topic, p, *status in rows(out)] == [
            (TOPIC, "0", subscribed),
            (TOPIC, "1", subscribed),
            (OPEN, "0", "Successful"),  # not subscribed to: its offset may go
        ]
        assert committed(broker, group) == {(TOPIC, 0): 5}
    finally:
        consumer.close()
    code, out, err = lockgate(
        broker, capsys, "groups", "delete-offsets", "--group", group, "--topic", f"{TOPIC}:0"
    )
    assert code == 0, err
    assert out.startswith(
        f"Request succeed for deleting offsets with topic {TOPIC}:0 group {group}\n"
    )
    assert rows(out) == [[TOPIC, "0", "Successful"]]
    assert committed(broker, group) == {}
    code, _out, err = lockgate(
        broker, capsys, "groups", "delete-offsets", "--group", "nobody", "--topic", TOPIC
    )
    assert code == 1 and "'nobody' does not exist. (GROUP_ID_NOT_FOUND)" in err


def test_delete_records(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": DOOMED, "partition": 0, "offset": 2},
                    {"topic": DOOMED, "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    code, out, err = lockgate(broker, capsys, "delete-records", "--offset-json-file", str(spec))
    assert code == 0, err
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {DOOMED}-0\tlow_watermark: 2",
        f"partition: {DOOMED}-1\tlow_watermark: 5",
    ]
    code, out, err = lockgate(
        broker, capsys, "delete-records", "--topic", DOOMED, "--partition", "0",
        "--before-offset", "3",
    )  # fmt: skip
    assert code == 0 and out.splitlines()[-1] == f"partition: {DOOMED}-0\tlow_watermark: 3"
    code, out, _err = lockgate(
        broker, capsys, "delete-records", "--topic", DOOMED, "--before-offset", "99"
    )
    assert code == 1
    assert [line.split("\t")[1].split(":")[:2] for line in out.splitlines()[2:]] == [
        ["error", " OFFSET_OUT_OF_RANGE"],
        ["error", " OFFSET_OUT_OF_RANGE"],
    ]
    code, out, _err = lockgate(broker, capsys, "get-offsets", "--topic", DOOMED, "--time", "-2")
    assert out.splitlines() == [f"{DOOMED}:0:3", f"{DOOMED}:1:5"]


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["dump-log", *args])
    return code, capsys.readouterr().out.splitlines()


def records_of(lines: list[str]) -> list[dict[str, object]]:
    return [item for item in map(json.loads, lines) if item["type"] == "record"]


def test_dump_log_of_the_live_data_directory(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = broker.data_dir / f"{TOPIC}-0" / "00000000000000000000.log"
    code, lines = dump(capsys, "--files", str(segment), "--print-data-log")
    assert code == 0
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert all("isTransactional: true" in line and "isvalid: true" in line for line in batches)
    data = [line for line in lines if line.startswith("| ")]
    assert [line.split("key: ")[1] for line in data[:8]] == [f"k{i} payload: v" for i in range(8)]
    assert data[0].split()[3:5] == ["CreateTime:", str(OLD_MS)]
    assert data[-1].startswith("| offset: 8 ") and "endTxnMarker: COMMIT" in data[-1]

    transaction_logs = glob.glob(str(broker.data_dir / "__transaction_state-*" / "*.log"))
    states = []
    for path in transaction_logs:
        if Path(path).stat().st_size:
            code, lines = dump(capsys, "--files", path, "--transaction-log-decoder", "--json")
            assert code == 0
            for record in records_of(lines):
                key, payload = record["key"], record["payload"]
                assert isinstance(key, dict) and isinstance(payload, dict)
                if key["data"] == {"transactionalId": TRANSACTIONAL_ID}:
                    states.append(payload["data"])
    assert [s["transactionStatus"] for s in states][-2:] == ["PrepareCommit", "CompleteCommit"]
    assert {"topic": TOPIC, "partitionIds": [0, 1]} in states[-2]["transactionPartitions"]

    commits = []
    for path in glob.glob(str(broker.data_dir / "__consumer_offsets-*" / "*.log")):
        if Path(path).stat().st_size:
            code, lines = dump(capsys, "--files", path, "--offsets-decoder", "--json")
            assert code == 0
            commits += [
                (record["key"], record["payload"])
                for record in records_of(lines)
                if isinstance(record["key"], dict)
                and record["key"].get("data", {}).get("group") == FIXTURE_GROUP
            ]
    assert commits[0][0] == {
        "type": "1",
        "data": {"group": FIXTURE_GROUP, "topic": TOPIC, "partition": 0},
    }
    assert isinstance(commits[0][1], dict) and commits[0][1]["data"]["offset"] == 1

    indexes = [str(segment.with_suffix(suffix)) for suffix in (".index", ".timeindex")]
    code, lines = dump(capsys, "--files", ",".join(indexes), "--index-sanity-check")
    assert code == 0 and lines[-1] == f"{indexes[1]} passed sanity check."
    code, lines = dump(capsys, "--files", indexes[1])
    assert lines[1:] == [f"timestamp: {RECENT_MS + 7} offset: 7"]
