"""The metric families after real client traffic (confluent-kafka / librdkafka) against one
broker process on disk with fsync: bytes and messages in/out per topic, requests and error
codes per API, per-partition log gauges, transactions and LSO lag, consumer lag, connections,
group commit, coordinator loads, disk and process metrics. The same broker logs JSON lines
(lockgate.log.format=json), checked for the request context of a topic creation; and
`lockgate serve --log-format json` is run once on its own."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.broker import BrokerProcess, free_port, wait_for_port

TOPIC = "metered"
GROUP = "metered-group"
ADMIN_CLIENT_ID = "metrics-admin"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
    return text


def value(text: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert match, f"{sample} missing"
    return float(match.group(1))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    data = tmp_path_factory.mktemp("metrics") / "data"
    metrics_port = free_port()
    settings = {
        "lockgate.metrics.port": str(metrics_port),
        "lockgate.log.format": "json",
        "transaction.state.log.num.partitions": "2",
        "offsets.topic.num.partitions": "2",
    }
    process = BrokerProcess(data, settings).start()
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap, "client.id": ADMIN_CLIENT_ID})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(timeout=20)
        producer = Producer({"bootstrap.servers": process.bootstrap, "enable.idempotence": True})
        for i in range(10):
            producer.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert producer.flush(10) == 0
        open_txn = Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "held"})
        open_txn.init_transactions(10)
        open_txn.begin_transaction()
        open_txn.produce(TOPIC, value=b"pending", partition=0)
        assert open_txn.flush(10) == 0
        consumer = Consumer(
            {"bootstrap.servers": process.bootstrap, "group.id": GROUP,
             "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )  # fmt: skip
        # past the log end first: the fetch answers OFFSET_OUT_OF_RANGE, then the reset
        consumer.assign([ConfluentPartition(TOPIC, 0, 1000)])
        received = 0
        for _ in range(100):  # bounded: 10 records (read_uncommitted sees the open one too)
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received += 1
                if received == 4:
                    break
        assert received == 4
        consumer.commit(offsets=[ConfluentPartition(TOPIC, 0, 4)], asynchronous=False)
        consumer.close()
        yield process, metrics_port
        open_txn.abort_transaction(10)
    finally:
        process.kill()


def test_traffic_families(broker: tuple[BrokerProcess, int]) -> None:
    _process, port = broker
    text = scrape(port)
    topic = f'topic="{TOPIC}"'
    partition = f'{{partition="0",{topic}}}'
    assert value(text, f"lockgate_topic_messages_in_total{{{topic}}}") == 11
    # the batches are stored as produced: the bytes in are the log's size
    bytes_in = value(text, f"lockgate_topic_bytes_in_total{{{topic}}}")
    assert bytes_in == value(text, f"lockgate_log_size_bytes{partition}") > 0
    assert value(text, f"lockgate_topic_bytes_out_total{{{topic}}}") > 0
    assert value(text, 'lockgate_requests_total{api="PRODUCE"}') >= 2
    assert value(text, 'lockgate_request_latency_seconds_count{api="FETCH"}') >= 1
    assert value(text, 'lockgate_request_errors_total{api="PRODUCE",error="NONE"}') >= 2
    assert (
        value(text, 'lockgate_request_errors_total{api="FETCH",error="OFFSET_OUT_OF_RANGE"}') >= 1
    )
    assert value(text, 'lockgate_request_errors_total{api="FIND_COORDINATOR",error="NONE"}') >= 1
    # the partition: 10 records, one open transactional record, nothing committed after it
    assert value(text, f"lockgate_log_end_offset{partition}") == 11
    assert value(text, f"lockgate_log_high_watermark{partition}") == 11
    assert value(text, f"lockgate_log_last_stable_offset{partition}") == 10
    assert value(text, f"lockgate_last_stable_offset_lag{partition}") == 1
    assert value(text, f"lockgate_log_start_offset{partition}") == 0
    assert value(text, f"lockgate_log_segments{partition}") == 1
    assert value(text, 'lockgate_transactions{state="Ongoing"}') == 1
    assert value(text, "lockgate_active_transaction_open_time_max_ms") > 0
    assert value(text, "lockgate_two_phase_transactions_waiting") == 0
    assert value(text, f'lockgate_consumer_lag{{group="{GROUP}",partition="0",{topic}}}') == 7
    assert value(text, f'lockgate_consumer_group_lag{{group="{GROUP}"}}') == 7
    assert value(text, 'lockgate_connections_opened_total{listener="PLAINTEXT"}') >= 3
    assert value(text, 'lockgate_connections_closed_total{listener="PLAINTEXT"}') >= 1
    assert value(text, 'lockgate_connections{listener="PLAINTEXT"}') >= 1  # the open producer
    assert value(text, "lockgate_log_flush_seconds_count") >= 1
    assert value(text, "lockgate_log_flush_partitions_sum") >= 1
    assert value(text, 'lockgate_coordinator_load_seconds_count{coordinator="transaction"}') == 2
    assert value(text, 'lockgate_coordinator_load_seconds_count{coordinator="group"}') == 2
    assert re.search(r"^lockgate_log_dir_free_bytes\{dir=\".+\"\} [1-9]", text, re.MULTILINE)
    assert value(text, "lockgate_under_replicated_partitions") == 0
    assert value(text, "process_open_fds") > 0
    assert "python_info{" in text


def test_json_log_lines_carry_the_request_context(broker: tuple[BrokerProcess, int]) -> None:
    process, _port = broker
    lines = [json.loads(line) for line in process.log().splitlines() if line.strip()]
    assert lines, "no log lines"
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= line.keys()
        assert line["timestamp"].endswith("+00:00")
    created = [line for line in lines if line["message"].startswith(f"created topic {TOPIC}")]
    assert len(created) == 1
    assert created[0]["api"] == "CREATE_TOPICS"
    assert created[0]["client_id"] == ADMIN_CLIENT_ID
    assert created[0]["listener"] == "PLAINTEXT"
    assert created[0]["client_address"].startswith("127.0.0.1:")
    assert isinstance(created[0]["correlation_id"], int)
    assert created[0]["principal"] == "User:ANONYMOUS"
    started = [line for line in lines if line["message"].startswith("lockgate broker")]
    assert started and "api" not in started[0]  # outside any request: no request fields


def test_serve_log_format_json_flag(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "lockgate.cli", "serve", "--log-format", "json",
               "--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}",
               "--set", "transaction.state.log.num.partitions=1",
               "--set", "offsets.topic.num.partitions=1"]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        child.send_signal(signal.SIGTERM)
        _out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    lines = [json.loads(line) for line in err.decode().splitlines()]
    messages = [line["message"] for line in lines]
    assert any(message.startswith("lockgate broker") for message in messages)
    assert messages[-1] == "stopped"
    assert all(line["level"] in ("DEBUG", "INFO", "WARNING") for line in lines)
