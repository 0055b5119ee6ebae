"""The tools' tiered storage view (tools/remote.py): --remote-config files, each partition's
remote part from its manifests (superseded copies and orphans told apart), `dump-log` listing
and dumping remote segments as it dumps local ones, and `log-dirs` / `topics describe` with
remote sizes beside the local ones. Against the in-memory object store, filled by the
broker's own RemoteLogManager; the S3 end to end test is tests/integration/
test_tiered_tools.py."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import pytest

from lockgate.cli import build_parser
from lockgate.client.admin import Admin
from lockgate.client.producer import Producer
from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import Broker
from lockgate.storage.disk import DiskEngine
from lockgate.storage.engine import StorageEngine
from lockgate.storage.object_store import MemoryObjectStore, ObjectStoreError
from lockgate.tiered.layout import LOG, partition_prefix
from lockgate.tiered.manager import RemoteLogManager
from lockgate.tools import dump_log, log_dirs, topics
from lockgate.tools.common import ToolError
from lockgate.tools.remote import (
    remote_partition,
    remote_partitions,
    remote_settings,
    stored_topic_ids,
)

NOW = 1_000_000
TOPIC = "events"
TOPIC_ID = uuid.UUID(int=7)
KEEP_ALL = LogConfig(remote_storage=True, retention_ms=-1)  # every local segment stays
KEEP_ONE = LogConfig(
    remote_storage=True, retention_ms=-1, local_retention_ms=-1, local_retention_bytes=1
)


def tiered_partition(
    storage: StorageEngine, config: LogConfig, index: int = 0, topic_id: uuid.UUID = TOPIC_ID
) -> Partition:
    """Six segments of one 3-record batch each (timestamps 1000, 2000, ...), the last one
    active, everything visible."""
    partition = Partition(storage, TOPIC, index, topic_id, lambda: config)
    partition.load(NOW)
    for i in range(6):
        if i:
            partition.roll(NOW)
        batch = build_batch([(b"k%d" % j, b"v%d-%d" % (i, j)) for j in range(3)],
                            timestamp_ms=(i + 1) * 1000)  # fmt: skip
        partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


async def copied(
    store: MemoryObjectStore,
    storage: StorageEngine,
    config: LogConfig = KEEP_ONE,
    index: int = 0,
    topic_id: uuid.UUID = TOPIC_ID,
) -> Partition:
    """A partition whose five rolled segments (offsets 0..14) the leader copied to `store`."""
    partition = tiered_partition(storage, config, index, topic_id)
    await RemoteLogManager(store, storage, 3, lambda: NOW).run([partition])
    assert partition.remote_end == 15
    return partition


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def disk(tmp_path: Path) -> DiskEngine:
    return DiskEngine(str(tmp_path / "data"))


# ---------------------------------------------------------------------------------------------
# --remote-config


def test_remote_config_takes_the_brokers_lines_or_the_bare_names(tmp_path: Path) -> None:
    broker = tmp_path / "broker.properties"
    broker.write_text(
        "node.id=1\nrsm.config.s3.bucket=tiered\nrsm.config.s3.endpoint=http://127.0.0.1:1\n"
        "rsm.config.s3.prefix=/c1/\nrsm.config.s3.access.key.id=AK\n"
        "rsm.config.s3.secret.access.key=very-secret\n"
    )
    settings = remote_settings(broker, environ={})
    assert (settings.bucket, settings.endpoint, settings.prefix) == (
        "tiered",
        "http://127.0.0.1:1",
        "c1",
    )
    assert settings.allow_http and settings.secret_access_key == "very-secret"
    assert "very-secret" not in repr(settings)
    bare = tmp_path / "remote.properties"
    bare.write_text("s3.bucket=b2\ns3.region=eu-west-1\n")
    env = {"AWS_ACCESS_KEY_ID": "from-env", "AWS_SECRET_ACCESS_KEY": "env-secret"}
    settings = remote_settings(bare, environ=env)
    assert (settings.bucket, settings.region, settings.access_key_id) == (
        "b2",
        "eu-west-1",
        "from-env",
    )
    # a broker file with its own remote.log.storage.manager.impl.prefix
    other = tmp_path / "other.properties"
    other.write_text("remote.log.storage.manager.impl.prefix=tier.\ntier.s3.bucket=b3\n")
    assert remote_settings(other, environ={}).bucket == "b3"


def test_remote_config_errors_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.properties"
    empty.write_text("# nothing\n")
    with pytest.raises(ToolError, match=r"s3\.bucket is required"):
        remote_settings(empty, environ={})
    with pytest.raises(ToolError, match="--remote-config"):
        remote_settings(tmp_path / "missing.properties", environ={})


# ---------------------------------------------------------------------------------------------
# The remote part of partitions


async def test_partitions_from_the_manifests(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    storage = disk(tmp_path)
    await copied(store, storage, index=0)
    await copied(store, storage, index=1)
    # what an interrupted copy leaves: a data object without a manifest
    prefix = partition_prefix(TOPIC, TOPIC_ID, 1)
    orphan = f"{prefix}{15:020d}-{uuid.uuid4()}{LOG}"
    await store.put(orphan, b"torn")
    # an earlier topic of the same name left objects under its own id
    old_id = uuid.UUID(int=8)
    await copied(store, disk(tmp_path / "old"), topic_id=old_id)
    found = await remote_partitions(store, {TOPIC: TOPIC_ID, "absent": uuid.UUID(int=9)})
    assert sorted(found) == [(TOPIC, 0), (TOPIC, 1)]
    zero, one = found[(TOPIC, 0)], found[(TOPIC, 1)]
    assert [s.base_offset for s in zero.segments] == [0, 3, 6, 9, 12]
    assert (zero.start_offset, zero.end_offset) == (0, 14)
    assert zero.size == sum(s.size for s in zero.segments) > 0
    assert zero.orphans == () and one.orphans == (orphan,)
    assert zero.segment_holding(7) is zero.segments[2] and zero.segment_holding(15) is None
    assert await stored_topic_ids(store, TOPIC) == sorted([TOPIC_ID, old_id], key=str)
    assert await stored_topic_ids(store, "even") == []  # a prefix of the name is not the name
    nothing = await remote_partition(store, TOPIC, TOPIC_ID, 5)
    assert nothing.segments == () and nothing.end_offset is None


async def test_a_store_failure_is_a_tool_error() -> None:
    store = MemoryObjectStore()
    store.unavailable = ObjectStoreError("connection refused", retriable=True)
    with pytest.raises(ToolError, match="object store: connection refused"):
        await remote_partitions(store, {TOPIC: TOPIC_ID})


# ---------------------------------------------------------------------------------------------
# dump-log


async def test_dump_log_dumps_a_remote_segment_as_the_local_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = MemoryObjectStore()
    storage = disk(tmp_path)
    partition = await copied(store, storage, KEEP_ALL)
    local = Path(storage.local_path(f"{partition.directory}/{6:020d}.log") or "")
    assert local.exists()
    flags = ("--deep-iteration", "--print-data-log")
    assert dump_log._dump_log(parse("dump-log", "--files", str(local), *flags)) == 0
    local_lines = capsys.readouterr().out.splitlines()
    args = parse("dump-log", "--remote-config", "r.properties", "--topic", TOPIC, "--offset", "7",
                 *flags)  # fmt: skip
    assert await dump_log.dump_remote(args, store) == 0
    remote_lines = capsys.readouterr().out.splitlines()
    segment = (await remote_partition(store, TOPIC, TOPIC_ID, 0)).segments[2]
    assert remote_lines[0] == f"Dumping {segment.key(LOG)}"
    assert remote_lines[1:] == local_lines[1:]  # from "Log starting offset: 6" on
    assert remote_lines[1] == "Log starting offset: 6"
    assert remote_lines[4].startswith("| offset: 7 ") and remote_lines[4].endswith(
        "key: k1 payload: v2-1"
    )


async def test_dump_log_lists_remote_segments_and_orphans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = MemoryObjectStore()
    await copied(store, disk(tmp_path))
    orphan = f"{partition_prefix(TOPIC, TOPIC_ID, 0)}{15:020d}-{uuid.uuid4()}{LOG}"
    await store.put(orphan, b"")
    args = parse("dump-log", "--remote-config", "r", "--topic", TOPIC, "--remote-list")
    assert await dump_log.dump_remote(args, store) == 0
    lines = capsys.readouterr().out.splitlines()
    found = await remote_partition(store, TOPIC, TOPIC_ID, 0)
    assert lines[0] == (
        f"Remote segments of {TOPIC}-0 (topic id {TOPIC_ID}): 5 segments, {found.size} bytes, "
        "offsets 0..14"
    )
    assert lines[1].split() == ["BaseOffset", "EndOffset", "Size", "MaxTimestamp",
                                "LeaderEpochs", "Broker", "SegmentId"]  # fmt: skip
    first = found.segments[0]
    assert lines[2].split() == ["0", "2", str(first.size), "1000", "0@0", "3",
                                str(first.segment_id)]  # fmt: skip
    assert lines[-1] == f"Orphaned object (no manifest; its leader deletes it): {orphan}"
    args = parse("dump-log", "--remote-config", "r", "--topic", TOPIC, "--remote-list", "--json")
    assert await dump_log.dump_remote(args, store) == 0
    items = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [i["type"] for i in items] == ["remote-partition", *["remote-segment"] * 5, "orphan"]
    assert items[1]["leaderEpochs"] == [{"epoch": 0, "startOffset": 0}]
    assert (items[1]["baseOffset"], items[1]["endOffset"], items[1]["broker"]) == (0, 2, 3)
    assert items[-1] == {"type": "orphan", "key": orphan}


async def test_dump_log_remote_errors(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    await copied(store, disk(tmp_path))

    async def refused(*argv: str) -> str:
        with pytest.raises(ToolError) as raised:
            await dump_log.dump_remote(parse("dump-log", "--remote-config", "r", *argv), store)
        return str(raised.value)

    assert "needs --topic" in await refused("--offset", "1")
    assert "--remote-list" in await refused("--topic", TOPIC)
    assert "no --files" in await refused("--topic", TOPIC, "--offset", "1", "--files", "a.log")
    assert await refused("--topic", TOPIC, "--offset", "15") == (
        f"offset 15 of {TOPIC}-0 is in no remote segment: its remote offsets are 0..14"
    )
    assert "holds no segment" in await refused("--topic", TOPIC, "--partition", "4",
                                               "--offset", "0")  # fmt: skip
    assert await refused("--topic", "other", "--offset", "0") == (
        "the object store holds nothing of topic other"
    )
    await copied(store, disk(tmp_path / "again"), topic_id=uuid.UUID(int=8))
    assert "choose one with --topic-id" in await refused("--topic", TOPIC, "--offset", "0")
    # Kafka's form of the id (url-safe base64) picks one as well as the UUID does
    kafka_id = "AAAAAAAAAAAAAAAAAAAACA"  # uuid int 8
    assert dump_log.parse_topic_id(kafka_id) == uuid.UUID(int=8)
    args = parse("dump-log", "--remote-config", "r", "--topic", TOPIC, "--topic-id",
                 str(TOPIC_ID), "--remote-list")  # fmt: skip
    assert await dump_log.dump_remote(args, store) == 0


def test_dump_log_without_files_or_remote_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert dump_log._dump_log(parse("dump-log")) == 1
    assert "give --files" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# log-dirs and topics describe, against an in-process broker


async def broker_topic(broker: Broker) -> uuid.UUID:
    """Topic `events` (2 partitions) with a few records in partition 0; its id."""
    bootstrap = f"127.0.0.1:{broker.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic(TOPIC, 2, 1, {"remote.storage.enable": "false"})
        (description,) = await admin.describe_topics([TOPIC])
    async with Producer(bootstrap) as producer:
        for i in range(5):
            await producer.send_and_wait(TOPIC, b"value-%d" % i, partition=0)
    assert description.topic_id is not None
    return description.topic_id


def connection(broker: Broker) -> list[str]:
    return ["--bootstrap-server", f"127.0.0.1:{broker.port}", "--request-timeout-ms", "10000"]


async def test_log_dirs_with_remote_sizes(
    memory_broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic_id = await broker_topic(memory_broker)
    store = MemoryObjectStore()
    await copied(store, disk(tmp_path), topic_id=topic_id)
    remote = (await remote_partition(store, TOPIC, topic_id, 0)).size
    plain = parse("log-dirs", *connection(memory_broker), "--topic-list", TOPIC, "--json")
    assert await log_dirs.describe(plain, None) == 0
    without = json.loads(capsys.readouterr().out)
    assert "remote" not in without
    assert await log_dirs.describe(plain, store) == 0
    document = json.loads(capsys.readouterr().out)
    summary = document["remote"]
    partitions = document["brokers"][0]["logDirs"][0]["partitions"]
    assert [(p["partition"], p["remoteSize"]) for p in partitions] == [
        (f"{TOPIC}-0", remote),
        (f"{TOPIC}-1", 0),
    ]
    # the rest of the document is kafka-log-dirs.sh's, as without --remote-config
    for p in partitions:
        del p["remoteSize"]
    del document["remote"]
    assert document == without
    assert summary == {
        "size": remote,
        "segments": 5,
        "partitions": [
            {
                "partition": f"{TOPIC}-0",
                "size": remote,
                "segments": 5,
                "startOffset": 0,
                "endOffset": 14,
                "orphans": 0,
                "superseded": 0,
            }
        ],
    }
    table = parse("log-dirs", *connection(memory_broker), "--topic-list", TOPIC)
    assert await log_dirs.describe(table, store) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["Broker", "LogDir", "Error", "Partition", "Size", "RemoteSize",
                                "RemoteSegments", "OffsetLag", "IsFuture"]  # fmt: skip
    row = lines[1].split()
    assert row[row.index(f"{TOPIC}-0") + 2 :] == [str(remote), "5", "0", "no"]
    assert int(row[row.index(f"{TOPIC}-0") + 1]) > 0  # the local size as before
    assert f"remote: {remote} bytes in 5 segments of 1 partitions" in lines


async def test_topics_describe_with_local_and_remote_sizes(
    memory_broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic_id = await broker_topic(memory_broker)
    store = MemoryObjectStore()
    await copied(store, disk(tmp_path), topic_id=topic_id)
    remote = (await remote_partition(store, TOPIC, topic_id, 0)).size
    args = parse("topics", "describe", *connection(memory_broker), "--topic", TOPIC)
    assert await topics.describe(args, None) == 0
    plain = capsys.readouterr().out.splitlines()
    assert "remote.storage.enable=false" in plain[0]  # the tiered configs as every override
    assert all("LocalSize" not in line for line in plain)
    assert await topics.describe(args, store) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == plain[0]
    local_sizes = []
    for line, before in zip(lines[1:], plain[1:], strict=True):
        assert line.startswith(before + "\tLocalSize: ")
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        local_sizes.append(int(fields["LocalSize"]))
        expected = (str(remote), "5") if fields["Partition"] == "0" else ("0", "0")
        assert (fields["RemoteSize"], fields["RemoteSegments"]) == expected
    assert local_sizes[0] > 0 and local_sizes[1] == 0
