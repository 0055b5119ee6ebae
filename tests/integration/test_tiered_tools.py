"""The tools on a tiered topic end to end: a broker copying to S3Proxy, then `lockgate log-dirs`,
`topics describe` and `dump-log` with --remote-config (the broker's own rsm.config.s3.* lines)
run as the `lockgate` command, agreeing with each other and with `get-offsets` (-4, -5, -6 by
Kafka's names); the records dumped from the object store are the ones produced, and the secret
key appears in no output."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.object_store import S3ProxyServer
from tests.support.tiered import broker_settings

pytestmark = pytest.mark.compat

TOPIC = "tools-history"
RECORDS = 1500


@pytest.fixture(scope="module")
def tiered(
    s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, Path, str]]:
    """A broker whose topic has every rolled segment in the object store (only the active
    one left on disk), the --remote-config file and the secret key."""
    prefix = f"tools-{uuid.uuid4().hex[:8]}"
    settings = broker_settings(s3proxy, prefix)
    directory = tmp_path_factory.mktemp("tiered-tools")
    remote_config = directory / "remote.properties"
    remote_config.write_text(
        "".join(f"{k}={v}\n" for k, v in settings.items() if k.startswith("rsm.config."))
    )
    broker = BrokerProcess(directory / "data", settings).start()
    try:
        create_topic(
            broker.bootstrap,
            TOPIC,
            1,
            {"remote.storage.enable": "true", "internal.segment.bytes": "65536",
             "local.retention.bytes": "1"},
        )  # fmt: skip
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 4096}
        )
        for i in range(RECORDS):
            producer.produce(TOPIC, b"record-%05d-" % i + b"x" * 200)
        assert producer.flush(30) == 0
        wait_until_only_the_active_segment(broker.data_dir / f"{TOPIC}-0")
        yield broker, remote_config, settings["rsm.config.s3.secret.access.key"]
    finally:
        broker.kill()


def wait_until_only_the_active_segment(directory: Path, timeout: float = 60.0) -> None:
    """Until every rolled segment is copied and deleted locally: from then on (nothing more
    produced) neither the object store nor the disk changes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list(directory.glob("*.log"))
        if len(logs) == 1:
            return
        time.sleep(0.2)
    raise AssertionError(f"rolled segments were not all copied and deleted: {len(logs)} left")


def lockgate(secret: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.returncode, done.stderr[-600:])
    assert secret not in done.stdout + done.stderr
    return done.stdout


def test_log_dirs_topics_describe_and_dump_log_read_the_object_store(
    tiered: tuple[BrokerProcess, Path, str],
) -> None:
    broker, remote_config, secret = tiered
    connect = ["--bootstrap-server", broker.bootstrap, "--request-timeout-ms", "10000"]
    remote = ["--remote-config", str(remote_config)]

    # dump-log --remote-list: the partition's remote segments, from their manifests
    listed = [
        json.loads(line)
        for line in lockgate(
            secret, "dump-log", *remote, "--topic", TOPIC, "--remote-list", "--json"
        ).splitlines()
    ]
    head, segments = listed[0], [i for i in listed if i["type"] == "remote-segment"]
    assert len(segments) == head["segments"] >= 3
    assert [i["type"] for i in listed[1:]] == ["remote-segment"] * len(segments)  # no orphans
    assert segments[0]["baseOffset"] == 0
    for before, after in itertools.pairwise(segments):
        assert after["baseOffset"] == before["endOffset"] + 1
    remote_size = sum(s["size"] for s in segments)
    last = segments[-1]["endOffset"]
    assert head["size"] == remote_size

    # log-dirs: the local size as before, the remote one beside it
    document = json.loads(
        lockgate(secret, "log-dirs", *connect, *remote, "--topic-list", TOPIC, "--json")
    )
    (partition,) = document["brokers"][0]["logDirs"][0]["partitions"]
    assert partition["partition"] == f"{TOPIC}-0" and partition["remoteSize"] == remote_size
    local_size = partition["size"]
    assert 0 < local_size <= 65536 + 4096  # the active segment alone
    assert document["remote"]["segments"] == len(segments)
    assert document["remote"]["partitions"][0]["endOffset"] == last
    plain = json.loads(lockgate(secret, "log-dirs", *connect, "--topic-list", TOPIC, "--json"))
    assert "remote" not in plain and "remoteSize" not in str(plain)

    # topics describe: the tiered configs and both sizes on the partition line
    described = lockgate(secret, "topics", "describe", *connect, *remote, "--topic", TOPIC)
    topic_line, partition_line = described.splitlines()
    assert "remote.storage.enable=true" in topic_line
    assert "local.retention.bytes=1" in topic_line
    assert partition_line.endswith(
        f"\tLocalSize: {local_size}\tRemoteSize: {remote_size}\tRemoteSegments: {len(segments)}"
    )

    # get-offsets with Kafka's names of -5, -4 and -6 agree with the manifests
    def offset(time_name: str) -> int:
        out = lockgate(secret, "get-offsets", *connect, "--topic", TOPIC, "--time", time_name)
        return int(out.strip().rsplit(":", 1)[1])

    assert offset("latest-tiered") == last
    assert offset("earliest-local") == last + 1
    assert offset("earliest-pending-upload") == last + 1
    assert offset("earliest") == 0

    # dump-log of the remote segment holding an offset: the records produced
    target = segments[1]["baseOffset"] + 1
    dumped = lockgate(
        secret, "dump-log", *remote, "--topic", TOPIC, "--offset", str(target),
        "--print-data-log",
    ).splitlines()  # fmt: skip
    assert dumped[0].startswith(f"Dumping {TOPIC}-") and dumped[0].endswith(".log")
    assert dumped[1] == f"Log starting offset: {segments[1]['baseOffset']}"
    records = [line for line in dumped if line.startswith("| offset: ")]
    first, end = segments[1]["baseOffset"], segments[1]["endOffset"]
    assert len(records) == end - first + 1
    for number, line in zip(range(first, end + 1), records, strict=True):
        assert line.startswith(f"| offset: {number} ")
        assert line.endswith(f"payload: record-{number:05d}-" + "x" * 200)


def test_an_object_store_error_is_one_line_without_the_secret(
    tiered: tuple[BrokerProcess, Path, str], tmp_path: Path
) -> None:
    broker, remote_config, secret = tiered
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(
        remote_config.read_text().replace("rsm.config.s3.bucket=", "rsm.config.s3.bucket=no-")
        + "rsm.config.s3.max.retries=0\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "log-dirs", "--bootstrap-server",
         broker.bootstrap, "--remote-config", str(wrong)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-600:]
    assert done.stderr.startswith("lockgate log-dirs: error: object store: ")
    assert len(done.stderr.strip().splitlines()) == 1
    assert secret not in done.stdout + done.stderr
