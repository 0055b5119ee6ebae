# The `lockgate topics|produce|consume` tools as subprocesses against a broker in a child process
# on 127.0.0.1, cross-checked with confluent-kafka (librdkafka): what the CLI writes librdkafka
# reads, on the partition librdkafka's Java-compatible murmur2 partitioner picks for each key,
# and what librdkafka writes the CLI prints. Every subprocess and every wait is bounded.
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from tests.support.broker import BrokerProcess, free_port

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
Outgoing = tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]  # key, value, headers
TIMEOUT_OPTION = ["--request-timeout-ms", "10000"]


def lockgate(
    *args: str, stdin: bytes | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def topics(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    action, *rest = args
    return lockgate(
        "topics", action, "--bootstrap-server", broker.bootstrap, *TIMEOUT_OPTION, *rest
    )


def confluent_read(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of `count` records read from offset 0 of every
    partition by librdkafka with manual assignment (it wants a group id; nothing is committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cli-cross-check",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    records: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                assert error is None or error.code() == KafkaError._PARTITION_EOF, error
                if error is None:
                    partition, offset = message.partition(), message.offset()
                    assert partition is not None and offset is not None
                    records.append((partition, offset, message.key(), message.value()))
    finally:
        consumer.close()
    return records


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: list[Outgoing],
    compression: str = "none",
) -> list[tuple[int, int]]:
    """Produces (key, value, headers) with librdkafka's Java-compatible partitioner;
    returns each record's (partition, offset) in order."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    placed: dict[int, tuple[int, int]] = {}
    for index, (key, value, headers) in enumerate(records):

        def delivered(error: KafkaError | None, message: Message, index: int = index) -> None:
            assert error is None, error
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            placed[index] = (partition, offset)

        producer.produce(topic, value, key, headers=headers, on_delivery=delivered)
    assert producer.flush(30) == 0, "librdkafka could not deliver everything"
    return [placed[i] for i in range(len(records))]


# ---------------------------------------------------------------------------------------------
# topics


def test_topics_create_list_describe_alter_delete(broker_process: BrokerProcess) -> None:
    created = topics(
        broker_process,
        "create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=3600000",
    )
    assert ok(created) == "Created topic orders.\n"
    ok(topics(broker_process, "create", "--topic", "audit", "--partitions", "1"))
    assert ok(topics(broker_process, "list")).splitlines() == ["audit", "orders"]
    assert "__consumer_offsets" in ok(topics(broker_process, "list", "--include-internal"))

    lines = ok(topics(broker_process, "describe", "--topic", "orders")).splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=3600000" in lines[0]
    assert [line.split("\t")[2] for line in lines[1:]] == [
        "Partition: 0",
        "Partition: 1",
        "Partition: 2",
    ]
    assert all("\tLeader: " in line and "\tLeaderEpoch: " in line for line in lines[1:])

    altered = topics(
        broker_process,
        "alter",
        "--topic",
        "orders",
        "--add-config",
        "retention.bytes=1048576",
        "--delete-config",
        "retention.ms",
        "--partitions",
        "4",
    )
    assert "Topic orders now has 4 partitions." in ok(altered)
    header = ok(topics(broker_process, "describe", "--topic", "orders")).splitlines()[0]
    assert "PartitionCount: 4" in header
    assert header.endswith("Configs: retention.bytes=1048576")

    everything = ok(topics(broker_process, "describe"))
    assert "Topic: audit\t" in everything and "Topic: orders\t" in everything

    assert ok(topics(broker_process, "delete", "--topic", "audit")) == "Deleted topic audit.\n"
    assert ok(topics(broker_process, "list")).splitlines() == ["orders"]
    ok(topics(broker_process, "delete", "--topic", "audit", "--if-exists"))


def test_topics_errors_exit_non_zero_with_the_kafka_error(broker_process: BrokerProcess) -> None:
    ok(topics(broker_process, "create", "--topic", "t", "--partitions", "2"))
    cases = [
        (("describe", "--topic", "missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("delete", "--topic", "missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("alter", "--topic", "t", "--partitions", "1"), "INVALID_PARTITIONS"),
        (("alter", "--topic", "t", "--add-config", "retention.ms=soon"), "INVALID_CONFIG"),
        (("alter", "--topic", "t"), "nothing to alter"),
        (("create", "--topic", "u", "--config", "no-equals-sign"), "NAME=VALUE"),
    ]
    for args, expected in cases:
        result = topics(broker_process, *args)
        assert result.returncode == 1, args
        assert result.stdout == b"", args
        assert expected in result.stderr.decode(), (args, result.stderr)


def test_creating_an_existing_topic_fails(broker_process: BrokerProcess) -> None:
    ok(topics(broker_process, "create", "--topic", "dup", "--partitions", "1"))
    result = lockgate(
        "topics", "create", "--bootstrap-server", broker_process.bootstrap,
        "--request-timeout-ms", "3000", "--topic", "dup",
    )  # fmt: skip
    assert result.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in result.stderr.decode()


def test_an_unreachable_broker_is_an_error() -> None:
    address = f"127.0.0.1:{free_port()}"
    result = lockgate("topics", "list", "--bootstrap-server", address, timeout=30)
    assert result.returncode == 1
    assert "no bootstrap server reachable" in result.stderr.decode()


# ---------------------------------------------------------------------------------------------
# produce → librdkafka


@pytest.mark.parametrize("compression", CODECS)
def test_cli_produce_is_read_by_librdkafka_on_java_partitions(
    broker_process: BrokerProcess, compression: str
) -> None:
    bootstrap = broker_process.bootstrap
    keys = [f"customer-{i % 13}" for i in range(60)]
    lines = "".join(f"{key}:value {i} with : inside\n" for i, key in enumerate(keys))
    ok(topics(broker_process, "create", "--topic", "from-cli", "--partitions", "5"))
    ok(topics(broker_process, "create", "--topic", "reference", "--partitions", "5"))

    ok(
        lockgate(
            "produce", "--bootstrap-server", bootstrap, "--topic", "from-cli",
            "--key-separator", ":", "--compression", compression, *TIMEOUT_OPTION,
            stdin=lines.encode(),
        )
    )  # fmt: skip

    records = confluent_read(bootstrap, "from-cli", 5, len(keys))
    assert len(records) == len(keys)
    assert {value for _p, _o, _k, value in records} == {
        f"value {i} with : inside".encode() for i in range(len(keys))
    }
    cli_partition = {key: partition for partition, _o, key, _v in records}
    # per partition the offsets are dense and the records keep the order of the lines
    for partition in range(5):
        mine = sorted((o, v) for p, o, _k, v in records if p == partition)
        assert [o for o, _v in mine] == list(range(len(mine)))
        numbers = [int(v.split()[1]) for _o, v in mine if v is not None]
        assert numbers == sorted(numbers)

    distinct = sorted(set(keys))
    placed = confluent_produce(bootstrap, "reference", [(k.encode(), b"", []) for k in distinct])
    librdkafka_partition = {k.encode(): p for k, (p, _o) in zip(distinct, placed, strict=True)}
    assert cli_partition == librdkafka_partition
    assert len(set(cli_partition.values())) > 1, "13 keys should not all share a partition"


def test_cli_produce_without_keys_and_with_bad_lines(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    ok(topics(broker_process, "create", "--topic", "plain", "--partitions", "2"))
    produce = ["produce", "--bootstrap-server", bootstrap, "--topic", "plain", *TIMEOUT_OPTION]
    ok(lockgate(*produce, stdin=b"one\r\ntwo\n\nfour"))  # CRLF, an empty line, no final newline
    records = confluent_read(bootstrap, "plain", 2, 4)
    assert sorted(value or b"" for _p, _o, _k, value in records) == [b"", b"four", b"one", b"two"]
    assert {key for _p, _o, key, _v in records} == {None}
    assert sorted(p for p, _o, _k, _v in records) == [0, 0, 1, 1]  # round robin

    missing_separator = lockgate(*produce, "--key-separator", "=", stdin=b"a=1\nno separator\n")
    assert missing_separator.returncode == 1
    assert "line 2 has no key separator" in missing_separator.stderr.decode()

    wrong_partition = lockgate(*produce, "--partition", "7", stdin=b"x\n")
    assert wrong_partition.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in wrong_partition.stderr.decode()


# ---------------------------------------------------------------------------------------------
# librdkafka → consume


@pytest.mark.parametrize("compression", ["none", "snappy", "zstd"])
def test_librdkafka_records_are_printed_by_cli_consume(
    broker_process: BrokerProcess, compression: str
) -> None:
    bootstrap = broker_process.bootstrap
    ok(topics(broker_process, "create", "--topic", "from-librdkafka", "--partitions", "3"))
    records: list[Outgoing] = [
        (f"k{i % 4}".encode(), f"v{i}".encode(), [("seq", str(i).encode())]) for i in range(30)
    ]
    placed = confluent_produce(bootstrap, "from-librdkafka", records, compression)

    result = lockgate(
        "consume", "--bootstrap-server", bootstrap, "--topic", "from-librdkafka",
        "--from-beginning", "--max-messages", "30", "--format", "%p|%o|%k|%v|%h\\n",
        *TIMEOUT_OPTION,
    )  # fmt: skip
    printed = sorted(ok(result).splitlines())
    expected = sorted(f"{p}|{o}|k{i % 4}|v{i}|seq={i}" for i, (p, o) in enumerate(placed))
    assert printed == expected
    assert "Processed a total of 30 messages" in result.stderr.decode()


def test_consume_from_an_offset_of_one_partition_with_keys(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    ok(topics(broker_process, "create", "--topic", "pick", "--partitions", "2"))
    records: list[Outgoing] = [(b"same-key", f"m{i}".encode(), []) for i in range(6)]
    placed = confluent_produce(bootstrap, "pick", records)
    partition = placed[0][0]
    assert {p for p, _o in placed} == {partition}

    consume = ["consume", "--bootstrap-server", bootstrap, "--topic", "pick", *TIMEOUT_OPTION]
    result = lockgate(
        *consume, "--partition", str(partition), "--offset", "3", "--print-key",
        "--key-separator", "=", "--timeout-ms", "1500",
    )  # fmt: skip
    assert ok(result) == "same-key=m3\nsame-key=m4\nsame-key=m5\n"

    other = lockgate(*consume, "--partition", str(1 - partition), "--from-beginning",
                     "--timeout-ms", "500")  # fmt: skip
    assert ok(other) == ""
    assert "Processed a total of 0 messages" in other.stderr.decode()

    bad_format = lockgate(*consume, "--format", "%k %x", "--timeout-ms", "500")
    assert bad_format.returncode == 1
    assert "unknown field %x" in bad_format.stderr.decode()

    beyond = lockgate(*consume, "--partition", "9", "--timeout-ms", "500")
    assert beyond.returncode == 1
    assert "no partition 9" in beyond.stderr.decode()


def test_consume_defaults_to_new_messages_only(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    ok(topics(broker_process, "create", "--topic", "tail", "--partitions", "1"))
    confluent_produce(bootstrap, "tail", [(b"k", b"old", [])])
    consumer = subprocess.Popen(
        [
            sys.executable, "-m", "lockgate.cli", "consume", "--bootstrap-server", bootstrap,
            "--topic", "tail", "--max-messages", "1", "--format", "%o %v",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # the consumer positions itself at the end before anything new arrives; produce until
        # it has seen one new record (bounded), since its start-up time is unknown
        deadline = time.monotonic() + 30
        while consumer.poll() is None and time.monotonic() < deadline:
            confluent_produce(bootstrap, "tail", [(b"k", b"new", [])])
            time.sleep(0.5)
        stdout, _stderr = consumer.communicate(timeout=30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert consumer.returncode == 0
    offset, value = stdout.decode().split()
    assert value == "new" and int(offset) >= 1
