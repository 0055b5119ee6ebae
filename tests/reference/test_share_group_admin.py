"""Share-group admin (KIP-932) end to end: lockgate's admin functions and `lockgate
share-groups` against a broker that serves share groups, and the same commands run by Kafka's
own kafka-share-groups.sh (ShareGroupCommand) with their output compared. Without a consumer:
AlterShareGroupOffsets creates a missing share group (reset-offsets), and a member is made
of raw ShareGroupHeartbeat requests whose member id the client chooses, as KIP-932 has it.

Written for every broker kind; only Apache Kafka 4.4 serves share groups for now."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate.cli import main
from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError
from tests.support.broker import BrokerProcess
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

BROKER_KINDS = ["kafka", "lockgate"]
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
SHARE_GROUP_HEARTBEAT = 76
PARTITIONS = 3


@pytest.fixture(scope="module", params=BROKER_KINDS)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "kafka":
        kafka: ReferenceKafka = request.getfixturevalue("reference_kafka")
        yield kafka.bootstrap
        return
    process = BrokerProcess(tmp_path_factory.mktemp("share-admin") / "data").start()
    try:
        yield process.bootstrap
    finally:
        process.kill()


def make_topic(bootstrap: str, topic: str, records: dict[int, int]) -> None:
    """A topic of PARTITIONS partitions with `records[p]` records in partition p."""

    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic, num_partitions=PARTITIONS, replication_factor=1)

    asyncio.run(create())
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in records.items():
        for n in range(count):
            producer.produce(topic, f"r{n}".encode(), partition=partition)
    assert producer.flush(60) == 0


def ours(capsys: pytest.CaptureFixture[str], bootstrap: str, *args: str) -> tuple[int, str, str]:
    """`lockgate share-groups ARGS`: exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(["share-groups", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(text: str) -> list[list[str]]:
    """A table's cells, lines sorted (Kafka's tool prints some in hash order)."""
    return sorted(line.split() for line in text.splitlines() if line.strip())


def admin_call(bootstrap: str, call: Any) -> Any:
    async def run() -> Any:
        async with Admin(bootstrap) as admin:
            return await call(admin)

    return asyncio.run(run())


class Member:
    """A share-group member made of raw ShareGroupHeartbeat requests in a thread of its own,
    until it leaves (epoch -1)."""

    def __init__(self, bootstrap: str, group: str, topic: str, member_id: str) -> None:
        self.bootstrap, self.group, self.topic, self.member_id = bootstrap, group, topic, member_id
        self.assigned = threading.Event()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Member:
        self.thread.start()
        # partitions come once the share coordinator has initialized them (a later heartbeat)
        assert self.assigned.wait(60) or self.failure, "no assignment within 60 s"
        if self.failure:
            raise self.failure
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(30)
        if self.failure:
            raise self.failure

    def _run(self) -> None:
        try:
            asyncio.run(self._heartbeats())
        except BaseException as exc:  # reported by the test's thread
            self.failure = exc
            self.assigned.set()

    async def _heartbeats(self) -> None:
        async with Admin(self.bootstrap, client_id="share-admin-member") as admin:
            node = await admin.cluster.find_coordinator(0, self.group)
            connection = await admin.cluster.connection(node)
            epoch = 0
            while True:
                leaving = self.stopping.is_set()
                answer = await connection.request(
                    SHARE_GROUP_HEARTBEAT,
                    {
                        "group_id": self.group,
                        "member_id": self.member_id,
                        "member_epoch": -1 if leaving else epoch,
                        "rack_id": None,
                        "subscribed_topic_names": [self.topic] if epoch == 0 else None,
                    },
                )
                assert answer.error_code == ErrorCode.none, answer
                if leaving:
                    return
                epoch = int(answer.member_epoch)
                if answer.assignment is not None and answer.assignment.topic_partitions:
                    self.assigned.set()
                # often until assigned, then at the interval the coordinator asks for
                wait = answer.heartbeat_interval.total_seconds() if self.assigned.is_set() else 0.2
                await asyncio.to_thread(self.stopping.wait, wait)


def test_reset_creates_the_group_then_describe_delete_offsets_and_delete(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = "share-admin-reset", "share-admin-reset-group"
    make_topic(bootstrap, topic, {0: 2, 1: 0, 2: 5})
    code, out, _ = ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic",
                        f"{topic}:0,2", "--to-offset", "1", "--dry-run")  # fmt: skip
    assert code == 0 and rows(out) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [group, topic, "0", "1"],
        [group, topic, "2", "1"],
    ]
    assert group not in ours(capsys, bootstrap, "--list")[1].split()  # a dry run creates nothing
    code, out, _ = ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                        "--to-earliest", "--execute")  # fmt: skip
    assert code == 0 and len(rows(out)) == 1 + PARTITIONS
    code, out, _ = ours(capsys, bootstrap, "--list", "--state")
    assert [group, "Empty"] in rows(out)
    code, out, _ = ours(capsys, bootstrap, "--describe", "--group", group, "--verbose")
    assert code == 0 and rows(out) == [
        ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
        [group, topic, "0", "0", "0", "2"],
        [group, topic, "1", "0", "0", "0"],
        [group, topic, "2", "0", "0", "5"],
    ]
    offsets = admin_call(bootstrap, lambda admin: admin.describe_share_group_offsets(group))
    assert {tp.partition: o.start_offset for tp, o in offsets.items()} == {0: 0, 1: 0, 2: 0}
    # an offset past the end is kept at the end, as Kafka's tool does
    code, out, _ = ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--all-topics",
                        "--to-offset", "4", "--execute")  # fmt: skip
    assert code == 0 and [r[-1] for r in rows(out)[1:]] == ["2", "0", "4"]

    code, out, _ = ours(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", topic,
                        "--topic", "share-admin-no-such-topic")  # fmt: skip
    assert code == 1 and rows(out) == [
        ["TOPIC", "STATUS"],
        ["share-admin-no-such-topic", "Error:", "This", "server", "does", "not", "host", "this",
         "topic-partition."],
        [topic, "Successful"],
    ]  # fmt: skip
    code, out, _ = ours(capsys, bootstrap, "--describe", "--group", group)
    assert code == 0 and out == f"\nShare group '{group}' has no offset information.\n"

    code, out, _ = ours(capsys, bootstrap, "--delete", "--group", group, "--group", "share-nope")
    assert code == 1
    assert "* Group 'share-nope' could not be deleted due to: GROUP_ID_NOT_FOUND" in out
    assert f"These share groups were deleted successfully: '{group}'" in out
    assert group not in ours(capsys, bootstrap, "--list")[1].split()

    code, out, err = ours(capsys, bootstrap, "--describe", "--group", "share-nope")
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    code, _, err = ours(
        capsys, bootstrap, "--delete-offsets", "--group", "share-nope", "--topic", topic
    )
    assert code == 1


def test_a_group_with_a_member_is_described_and_protected(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = "share-admin-member", "share-admin-member-group"
    make_topic(bootstrap, topic, {0: 1, 1: 1, 2: 1})
    with Member(bootstrap, group, topic, "share-admin-member-1"):
        code, out, _ = ours(capsys, bootstrap, "--describe", "--group", group, "--members",
                            "--verbose")  # fmt: skip
        [header, row] = rows(out)
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                          "MEMBER-EPOCH", "ASSIGNMENT"]  # fmt: skip
        assert row[:2] == [group, "share-admin-member-1"] and row[3:5] == [
            "share-admin-member",
            "3",
        ]
        assert row[-1] == f"{topic}:0,1,2"
        description = admin_call(bootstrap, lambda a: a.describe_share_groups([group]))[group]
        assert (description.state, description.assignor, len(description.members)) == (
            "Stable", "simple", 1
        )  # fmt: skip
        code, _, err = ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic",
                            topic, "--to-earliest", "--execute")  # fmt: skip
        assert code == 1 and f"Share group '{group}' is not empty." in err
        code, out, _ = ours(capsys, bootstrap, "--delete", "--group", group)
        assert code == 1 and f"Share group '{group}' is not EMPTY." in out
        for attempt in (
            lambda a: a.alter_share_group_offsets(group, {TopicPartition(topic, 0): 0}),
            lambda a: a.delete_share_group_offsets(group, [topic]),
        ):
            with pytest.raises(KafkaError) as refused:
                admin_call(bootstrap, attempt)
            assert refused.value.code == ErrorCode.non_empty_group
        results = admin_call(bootstrap, lambda a: a.delete_share_groups([group]))
        assert results[group] is not None and results[group].code == ErrorCode.non_empty_group
    # the member left: the group is Empty and can go
    code, out, err = ours(capsys, bootstrap, "--describe", "--group", group, "--state")
    assert code == 0 and rows(out)[1][-2:] == ["Empty", "0"]
    assert f"Share group '{group}' has no active members." in err
    assert admin_call(bootstrap, lambda a: a.delete_share_groups([group])) == {group: None}


def test_groups_list_shows_the_share_type(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = "share-admin-type", "share-admin-type-group"
    make_topic(bootstrap, topic, {})
    assert ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                "--to-latest", "--execute")[0] == 0  # fmt: skip
    listed = admin_call(bootstrap, lambda a: a.list_groups())
    assert [(g.protocol_type, g.group_type) for g in listed if g.group_id == group] == [
        ("share", "share")
    ]
    capsys.readouterr()
    assert main(["groups", "list", "--bootstrap-server", bootstrap]) == 0
    assert [group, "Empty", "Share", "share"] in rows(capsys.readouterr().out)


# ------------------------------------------------------------------------------------------
# Differential: Kafka's own tool on the same broker prints what ours prints


def kafkas(kafka: ReferenceKafka, bootstrap: str, *args: str) -> str:
    command = kafka.java(SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap, *args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_output_is_kafka_tools_output(
    bootstrap: str, capsys: pytest.CaptureFixture[str], reference_kafka: ReferenceKafka
) -> None:
    topic, group = "share-admin-diff", "share-admin-diff-group"
    make_topic(bootstrap, topic, {0: 3, 2: 1})
    assert ours(capsys, bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:0,1",
                "--to-earliest", "--execute")[0] == 0  # fmt: skip
    views = [
        ("--describe", "--group", group),
        ("--describe", "--group", group, "--state", "--verbose"),
        ("--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--dry-run"),
    ]
    with Member(bootstrap, group + "-live", topic, "share-admin-diff-member"):
        views.append(("--describe", "--group", group + "-live", "--members", "--verbose"))
        for args in views:
            theirs = kafkas(reference_kafka, bootstrap, *args)
            code, mine, _ = ours(capsys, bootstrap, *args)
            assert code == 0 and rows(mine) == rows(theirs), args
            # the same layout (column widths, blank lines), not only the same cells
            assert sorted(mine.splitlines()) == sorted(theirs.splitlines()), args
