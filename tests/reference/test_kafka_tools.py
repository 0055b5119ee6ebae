"""Apache Kafka's own command-line tools (from the Kafka 4 jars) against lockgate and against
Apache Kafka itself, the same scenario on both, their answers compared: kafka-topics,
kafka-console-producer/consumer, kafka-get-offsets, kafka-consumer-groups (--list,
--describe, --reset-offsets), kafka-transactions (list, describe, describe-producers,
find-hanging, abort) and kafka-share-groups (--reset-offsets, on a share group whose member
heartbeated with raw ShareGroupHeartbeat requests). What legitimately differs (node ids, topic
ids, client and member ids, the transaction coordinator's bookkeeping times) is left out of the
comparison."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate.client.cluster import Cluster
from lockgate.protocol.api import ApiKey
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

TOPIC = "tools"
GROUP = "tools-group"
TOOL = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "transactions": "org.apache.kafka.tools.TransactionsCommand",
    "share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
}


@dataclass
class Target:
    name: str
    bootstrap: str
    node_id: int
    kafka: ReferenceKafka  # whose classpath runs the tools

    def run(self, tool: str, *args: str, stdin: str | None = None) -> str:
        command = self.kafka.java(TOOL[tool], "--bootstrap-server", self.bootstrap, *args)
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{tool} {args} on {self.name}: {done.stderr[-2000:]}"
        return done.stdout


@pytest.fixture(scope="module")
def targets(
    reference_kafka: ReferenceKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Target]]:
    lockgate = BrokerProcess(tmp_path_factory.mktemp("tools") / "data").start()
    try:
        yield [
            Target("lockgate", lockgate.bootstrap, 0, reference_kafka),
            Target("kafka", reference_kafka.bootstrap, 1, reference_kafka),
        ]
    finally:
        lockgate.kill()


def same(answers: dict[str, Any]) -> Any:
    """The answer both brokers gave (fails, showing both, if they differ)."""
    values = list(answers.values())
    assert all(v == values[0] for v in values), answers
    return values[0]


def table(text: str, first_column: str) -> list[dict[str, str]]:
    """Rows of a tool's whitespace-aligned table, keyed by its header (the line that starts
    with `first_column`; notes before it are skipped)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.split()[0] == first_column)
    header = lines[header_at].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[header_at + 1 :]]


def test_topics_console_clients_offsets_and_groups_answer_alike(targets: list[Target]) -> None:
    created: dict[str, Any] = {}
    described: dict[str, Any] = {}
    consumed: dict[str, Any] = {}
    offsets: dict[str, Any] = {}
    listed: dict[str, Any] = {}
    group_rows: dict[str, Any] = {}
    reset: dict[str, Any] = {}
    for t in targets:
        t.run("topics", "--create", "--topic", TOPIC, "--partitions", "3",
              "--replication-factor", "1")  # fmt: skip
        listed[t.name] = TOPIC in t.run("topics", "--list").split()
        text = t.run("topics", "--describe", "--topic", TOPIC)
        count = re.search(r"PartitionCount: (\d+)", text)
        rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)", text)
        described[t.name] = (count.group(1) if count else None, sorted(p for p, _ in rows))
        lines = "".join(f"k{n}:value-{n}\n" for n in range(9))
        t.run("console-producer", "--topic", TOPIC, "--reader-property", "parse.key=true",
              "--reader-property", "key.separator=:", stdin=lines)  # fmt: skip
        out = t.run("console-consumer", "--topic", TOPIC, "--from-beginning",
                    "--max-messages", "9", "--formatter-property", "print.key=true",
                    "--group", GROUP, "--timeout-ms", "60000")  # fmt: skip
        consumed[t.name] = sorted(out.splitlines())
        offsets[t.name] = sorted(t.run("get-offsets", "--topic", TOPIC).split())
        rows = table(t.run("consumer-groups", "--describe", "--group", GROUP), "GROUP")
        group_rows[t.name] = sorted(
            (r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows
        )
        created[t.name] = GROUP in t.run("consumer-groups", "--list").split()
        rows = table(t.run("consumer-groups", "--reset-offsets", "--group", GROUP,
                           "--topic", TOPIC, "--to-earliest", "--execute"), "GROUP")  # fmt: skip
        reset[t.name] = sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in rows)
    assert same(listed) is True and same(created) is True
    assert same(described) == ("3", ["0", "1", "2"])
    assert len(same(consumed)) == 9
    assert sum(int(line.rsplit(":", 1)[1]) for line in same(offsets)) == 9
    assert sum(int(row[1]) for row in same(group_rows)) == 9
    assert same(reset) == [("0", "0"), ("1", "0"), ("2", "0")]


def test_kafka_transactions_answers_alike(targets: list[Target]) -> None:
    states: dict[str, Any] = {}
    descriptions: dict[str, Any] = {}
    producers: dict[str, Any] = {}
    hanging: dict[str, Any] = {}
    aborted: dict[str, Any] = {}
    for t in targets:
        t.run("topics", "--create", "--topic", "tools-txn-topic", "--partitions", "1",
              "--replication-factor", "1")  # fmt: skip
        producer = Producer({"bootstrap.servers": t.bootstrap, "transactional.id": "tools-txn"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("tools-txn-topic", b"left open", partition=0)
        producer.flush(60)
        listing = table(t.run("transactions", "list"), "TransactionalId")
        states[t.name] = sorted(
            (r["TransactionalId"], r["TransactionState"]) for r in listing
            if r["TransactionalId"] == "tools-txn"
        )  # fmt: skip
        [row] = table(
            t.run("transactions", "describe", "--transactional-id", "tools-txn"), "CoordinatorId"
        )
        descriptions[t.name] = (row["TransactionState"], row["TopicPartitions"])
        rows = table(t.run("transactions", "describe-producers", "--topic", "tools-txn-topic",
                           "--partition", "0"), "ProducerId")  # fmt: skip
        producers[t.name] = [(r["CurrentTransactionStartOffset"]) for r in rows]
        hanging[t.name] = table(
            t.run("transactions", "find-hanging", "--broker-id", str(t.node_id)), "Topic"
        )
        start = rows[0]["CurrentTransactionStartOffset"]
        t.run("transactions", "abort", "--topic", "tools-txn-topic", "--partition", "0",
              "--start-offset", start)  # fmt: skip
        time.sleep(0.5)
        rows = table(t.run("transactions", "describe-producers", "--topic", "tools-txn-topic",
                           "--partition", "0"), "ProducerId")  # fmt: skip
        aborted[t.name] = [r["CurrentTransactionStartOffset"] for r in rows]
    assert same(states) == [("tools-txn", "Ongoing")]
    assert same(descriptions) == ("Ongoing", "tools-txn-topic-0")
    assert same(producers) == ["0"]
    assert same(hanging) == []  # younger than the transaction timeout: not hanging
    assert same(aborted) == ["None"]


async def _share_member(bootstrap: str, topic: str, group: str, leave: bool) -> tuple[int, int]:
    """A share group member (raw ShareGroupHeartbeat): joins and heartbeats until it is
    assigned its partitions (once their share state is initialized), or leaves."""
    async with Cluster(bootstrap) as cluster:
        [node] = cluster.metadata.brokers
        connection = await cluster.connection(node)
        body: dict[str, Any] = {"group_id": group, "member_id": "toolsShareMember00000A",
                                "member_epoch": -1 if leave else 0, "rack_id": None,
                                "subscribed_topic_names": None if leave else [topic]}  # fmt: skip
        deadline = time.monotonic() + 30
        while True:  # (Apache Kafka makes __consumer_offsets at the first FindCoordinator)
            found = await connection.request(
                ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group]}, version=4
            )
            if found.coordinators[0].error_code == 0:
                break
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.2)
        while True:
            answer = await connection.request(ApiKey.SHARE_GROUP_HEARTBEAT, body, version=1)
            code, epoch = int(answer.error_code), int(answer.member_epoch)
            if leave and code == 0:
                return code, epoch
            assigned = answer.assignment is not None and answer.assignment.topic_partitions
            if code == 0 and assigned:
                return code, epoch
            assert code in (0, 14, 15, 16) and time.monotonic() < deadline, answer
            if code == 0:
                body = {**body, "member_epoch": epoch, "subscribed_topic_names": None}
            await asyncio.sleep(0.2)


async def _share_offsets(bootstrap: str, topic: str, group: str) -> list[tuple[int, int]]:
    """(partition, start offset) of the group's share partitions (DescribeShareGroupOffsets)."""
    async with Cluster(bootstrap) as cluster:
        [node] = cluster.metadata.brokers
        connection = await cluster.connection(node)
        answer = await connection.request(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            {
                "groups": [
                    {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0, 1]}]}
                ]
            },
            version=1,
        )
        return sorted(
            (int(p.partition_index), int(p.start_offset))
            for t in answer.groups[0].topics for p in t.partitions
        )  # fmt: skip


def test_kafka_share_groups_answers_alike(targets: list[Target]) -> None:
    """kafka-share-groups --reset-offsets (the admin client's describeShareGroups, listOffsets
    and alterShareGroupOffsets) on an Empty share group whose partitions a member had."""
    topic, group = "share-tools", "share-tools-group"
    reset: dict[str, Any] = {}
    offsets: dict[str, Any] = {}
    for t in targets:
        create_topic(t.bootstrap, topic, 2)
        asyncio.run(_share_member(t.bootstrap, topic, group, leave=False))
        asyncio.run(_share_member(t.bootstrap, topic, group, leave=True))
        rows = table(t.run("share-groups", "--reset-offsets", "--group", group, "--topic", topic,
                           "--to-earliest", "--execute"), "GROUP")  # fmt: skip
        reset[t.name] = sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in rows)
        offsets[t.name] = asyncio.run(_share_offsets(t.bootstrap, topic, group))
    assert same(reset) == [("0", "0"), ("1", "0")]
    assert same(offsets) == [(0, 0), (1, 0)]
