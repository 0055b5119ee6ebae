"""One instance of a consume-transform-produce loop (KIP-447 style), run as a child process by
test_exactly_once_pipeline.py: `python eos_worker.py --client confluent-kafka ...`.

Each round reads a few records of the input topic as a member of the group, writes
"out:<value>" to the same partition of the output topic and commits the input offsets with
the consumer's group metadata, all in one transaction. On an abortable error the transaction
is aborted and the consumer rewound to the committed offsets.

Events go to stdout as JSON lines (assigned, revoked, committed, hang, paused, fenced, exit).
Test hooks: --hang-at N stops for ever inside the N-th transaction after the records and the
offsets were sent (the test kills it there); --pause-at N waits for a line on stdin inside the
N-th transaction after the records were sent and before the offsets are (the test freezes it
meanwhile: a zombie), then reports what happens to its commit and exits. --deadline bounds
the life of the process. The loop ends once --stop-file exists and a poll returned nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

TIMEOUT = 30.0


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def positions_after(records: list[tuple[int, int, bytes]]) -> dict[int, int]:
    positions: dict[int, int] = {}
    for partition, offset, _value in records:
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


class Hooks:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.transactions = 0
        self.stop_file = Path(options.stop_file)

    def begin(self) -> int:
        self.transactions += 1
        return self.transactions

    def after_records(self, number: int, count: int) -> None:
        if number == self.options.pause_at:
            emit("paused", transaction=number, records=count)
            sys.stdin.readline()
            emit("resumed", transaction=number)

    def after_offsets(self, number: int, count: int) -> None:
        if number == self.options.hang_at:
            emit("hang", transaction=number, records=count)
            while True:
                time.sleep(1)

    def stopping(self) -> bool:
        return self.stop_file.exists()


def run_confluent(options: argparse.Namespace, hooks: Hooks) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": options.bootstrap,
            "group.id": options.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": options.session_timeout_ms,
            "heartbeat.interval.ms": 200,
            "max.poll.interval.ms": 10_000,
            "partition.assignment.strategy": options.assignor,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": options.bootstrap,
            "transactional.id": options.transactional_id,
            "transaction.timeout.ms": options.transaction_timeout_ms,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(TIMEOUT)

    def assigned(_consumer: Any, partitions: list[Any]) -> None:
        emit("assigned", partitions=sorted(p.partition for p in partitions))

    def revoked(_consumer: Any, partitions: list[Any]) -> None:
        emit("revoked", partitions=sorted(p.partition for p in partitions))

    consumer.subscribe([options.input], on_assign=assigned, on_revoke=revoked)

    def rewind() -> None:
        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, timeout=TIMEOUT):
            offset = tp.offset if tp.offset >= 0 else -2  # -2: the beginning
            consumer.seek(TopicPartition(options.input, tp.partition, offset))

    while True:
        messages = consumer.consume(options.batch, 0.2)
        records: list[tuple[int, int, bytes]] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {error}")
            partition, offset, value = message.partition(), message.offset(), message.value()
            assert partition is not None and offset is not None and value is not None
            records.append((partition, offset, value))
        if not records:
            if hooks.stopping():
                break
            continue
        group_metadata = consumer.consumer_group_metadata()
        number = hooks.begin()
        producer.begin_transaction()
        for partition, _offset, value in records:
            producer.produce(options.output, value=b"out:" + value, partition=partition)
        if producer.flush(TIMEOUT) != 0:
            raise RuntimeError("records not delivered")
        hooks.after_records(number, len(records))
        offsets = [TopicPartition(options.input, p, o) for p, o in positions_after(records).items()]
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata, TIMEOUT)
            hooks.after_offsets(number, len(records))
            producer.commit_transaction(TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                raise
            emit(
                "aborting",
                transaction=number,
                error=error.name(),
                code=error.code(),
                stage="offsets-or-commit",
            )
            if number == options.pause_at:
                # the zombie: its commit must fail now too
                try:
                    producer.commit_transaction(TIMEOUT)
                    emit("fenced", transaction=number, commit="succeeded", error=error.name())
                except KafkaException as commit_error:
                    emit(
                        "fenced",
                        transaction=number,
                        commit="failed",
                        error=error.name(),
                        code=error.code(),
                        commit_error=commit_error.args[0].name(),
                    )
                producer.abort_transaction(TIMEOUT)
                break
            producer.abort_transaction(TIMEOUT)
            rewind()
            continue
        emit("committed", transaction=number, records=len(records))
    consumer.close()
    producer.flush(TIMEOUT)


def run_kafka_python(options: argparse.Namespace, hooks: Hooks) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=options.bootstrap,
        group_id=options.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=options.session_timeout_ms,
        heartbeat_interval_ms=200,
        max_poll_interval_ms=10_000,
        partition_assignment_strategy=[RangePartitionAssignor],
    )
    producer = KafkaProducer(
        bootstrap_servers=options.bootstrap,
        transactional_id=options.transactional_id,
        transaction_timeout_ms=options.transaction_timeout_ms,
        linger_ms=5,
    )
    producer.init_transactions()
    consumer.subscribe([options.input], listener=Listener())

    def rewind() -> None:
        for tp in consumer.assignment():
            committed = consumer.committed(tp, timeout_ms=int(TIMEOUT * 1000))
            if committed is None or committed < 0:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)

    while True:
        batches = consumer.poll(timeout_ms=200, max_records=options.batch)
        records = [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]
        if not records:
            if hooks.stopping():
                break
            continue
        group_metadata = consumer.group_metadata()
        number = hooks.begin()
        producer.begin_transaction()
        futures = [
            producer.send(options.output, value=b"out:" + value, partition=partition)
            for partition, _offset, value in records
        ]
        producer.flush(TIMEOUT)
        for future in futures:
            future.get(TIMEOUT)
        hooks.after_records(number, len(records))
        offsets = {
            TopicPartition(options.input, p): OffsetAndMetadata(o, "", -1)
            for p, o in positions_after(records).items()
        }
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata)
            hooks.after_offsets(number, len(records))
            producer.commit_transaction()
        except KafkaError as exc:
            emit(
                "aborting", transaction=number, error=type(exc).__name__, stage="offsets-or-commit"
            )
            if number == options.pause_at:
                try:
                    producer.commit_transaction()
                    emit("fenced", transaction=number, commit="succeeded", error=type(exc).__name__)
                except KafkaError as commit_error:
                    emit(
                        "fenced",
                        transaction=number,
                        commit="failed",
                        error=type(exc).__name__,
                        detail=str(exc),
                        commit_error=type(commit_error).__name__,
                    )
                producer.abort_transaction()
                break
            producer.abort_transaction()
            rewind()
            continue
        emit("committed", transaction=number, records=len(records))
    consumer.close(autocommit=False)
    producer.close(timeout=TIMEOUT)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=["confluent-kafka", "kafka-python"], required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--assignor", default="range")  # confluent-kafka only
    parser.add_argument("--session-timeout-ms", type=int, default=2000)
    parser.add_argument("--transaction-timeout-ms", type=int, default=20_000)
    parser.add_argument("--hang-at", type=int, default=0)
    parser.add_argument("--pause-at", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=120.0)
    options = parser.parse_args()

    def give_up() -> None:
        emit("deadline")
        os._exit(3)

    watchdog = threading.Timer(options.deadline, give_up)
    watchdog.daemon = True
    watchdog.start()
    hooks = Hooks(options)
    if options.client == "confluent-kafka":
        run_confluent(options, hooks)
    else:
        run_kafka_python(options, hooks)
    emit("exit", transactions=hooks.transactions)
    watchdog.cancel()


if __name__ == "__main__":
    main()
