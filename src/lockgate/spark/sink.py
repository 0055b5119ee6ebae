# spark/sink.py — the exactly-once sinks: every Spark task writes its rows inside a KIP-939
# two-phase transaction and prepares it; the driver completes all of them, or aborts them.
#
# Transactional ids are f"{prefix}-{partition id}": the same for every attempt of a task, so a
# new attempt's InitProducerId fences the attempts before it.
#
# Streaming (exactly once across driver crashes): before completing batch N, the driver appends
# the decision {prefix, batch N, every prepared state} to the commit-log topic (acks=all). That
# record is the commit point:
# - driver dies before it: no decision; Spark replays N; each task's init (keep_prepared_txn)
#   finds its old prepared transaction, sees no decision for it and aborts it, then writes anew;
# - driver dies after it: Spark replays N (its own checkpoint lacks N); each task finds its kept
#   transaction in a decision, commits it, and skips the replayed batch (N ≤ last decided);
#   the driver's commit for a decided batch completes whatever the tasks left open.
# Speculative execution must stay off (spark.speculation=false, Spark's default): two live
# attempts of one task fence each other.
from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.errors import TopicAlreadyExistsError
from lockgate.client.producer import Producer
from lockgate.client.transactions import PreparedTxnState
from lockgate.spark.options import SinkOptions

COMMIT_LOG_TOPIC = "lockgate-spark-commits"
NOTHING = PreparedTxnState(-1, -1)  # completing with this aborts whatever was kept
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class PreparedMessage(WriterCommitMessage):
    transactional_id: str
    state: str | None  # PreparedTxnState JSON; None when the task wrote nothing (a replay)
    rows: int = 0


@dataclass(frozen=True)
class Decision:
    batch: int
    states: dict[str, PreparedTxnState] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The commit log


async def _ensure_commit_log(bootstrap: str) -> None:
    async with Admin(bootstrap, client_id="lockgate-spark") as admin:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topic(COMMIT_LOG_TOPIC, num_partitions=1)


async def _decisions(bootstrap: str, prefix: str) -> list[Decision]:
    await _ensure_commit_log(bootstrap)
    tp = TopicPartition(COMMIT_LOG_TOPIC, 0)
    found: list[Decision] = []
    async with Consumer(bootstrap, client_id="lockgate-spark") as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for message in await consumer.poll(500):
                if message.key != prefix.encode() or message.value is None:
                    continue
                data = json.loads(message.value)
                found.append(
                    Decision(
                        int(data["batch"]),
                        {t: PreparedTxnState(*s) for t, s in data["states"].items()},
                    )
                )
    return found


async def _record_decision(bootstrap: str, prefix: str, decision: Decision) -> None:
    value = json.dumps(
        {
            "batch": decision.batch,
            "states": {t: [s.producer_id, s.epoch] for t, s in decision.states.items()},
        }
    ).encode()
    async with Producer(bootstrap, client_id="lockgate-spark", acks=-1) as producer:
        await producer.send_and_wait(COMMIT_LOG_TOPIC, value, prefix.encode(), partition=0)


# ---------------------------------------------------------------------------------------------
# Participants


def _participant(options: SinkOptions, transactional_id: str) -> Producer:
    return Producer(
        options.bootstrap,
        client_id="lockgate-spark",
        transactional_id=transactional_id,
        linger_ms=5,
    )


async def _complete(options: SinkOptions, transactional_id: str, state: PreparedTxnState) -> None:
    """Commits the kept transaction of `transactional_id` if it is `state`, aborts it
    otherwise; a no-op when nothing is kept (completed already, or never prepared)."""
    async with _participant(options, transactional_id) as producer:
        await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        await producer.complete_transaction(state)


async def _write_task(
    options: SinkOptions,
    rows: Iterator[Row],
    batch: int | None,
    decided: list[Decision],
) -> PreparedMessage:
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    transactional_id = f"{options.transactional_id_prefix}-{partition_id}"
    committed = {t: s for d in decided for t, s in d.states.items()}
    async with _participant(options, transactional_id) as producer:
        # Keep what an earlier attempt prepared: commit it if a decision names it, else abort.
        await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        await producer.complete_transaction(committed.get(transactional_id, NOTHING))
        if batch is not None and decided and batch <= max(d.batch for d in decided):
            return PreparedMessage(transactional_id, None)  # a replay of a decided batch
        producer.begin_transaction()
        count = 0
        for row in rows:
            record = row.asDict()
            topic = record.get("topic") or options.topic
            if not topic:
                raise ValueError("no topic: give a topic column or the topic option")
            await producer.send(
                str(topic),
                _bytes(record.get("value")),
                _bytes(record.get("key")),
                partition=record.get("partition"),
                headers=[(h["key"], _bytes(h["value"])) for h in record.get("headers") or ()],
            )
            count += 1
        prepared = await producer.prepare_transaction()
    return PreparedMessage(transactional_id, prepared.to_json(), count)


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    return str(value).encode()


def _prepared(messages: list[WriterCommitMessage | None]) -> dict[str, PreparedTxnState]:
    return {
        m.transactional_id: PreparedTxnState.from_json(m.state)
        for m in messages
        if isinstance(m, PreparedMessage) and m.state is not None
    }


async def _abort_all(options: SinkOptions, messages: list[WriterCommitMessage | None]) -> None:
    # Every task's id, those that failed before returning a message included: fenced and
    # their open transaction aborted.
    for partition_id, _message in enumerate(messages):
        await _complete(options, f"{options.transactional_id_prefix}-{partition_id}", NOTHING)


# ---------------------------------------------------------------------------------------------
# Spark's writer classes


class BatchWriter(DataSourceWriter):
    """df.write.format("lockgate"): one job, all or nothing."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> PreparedMessage:
        return asyncio.run(_write_task(self.options, iterator, None, []))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        async def run() -> None:
            for transactional_id, state in _prepared(messages).items():
                await _complete(self.options, transactional_id, state)

        asyncio.run(run())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        asyncio.run(_abort_all(self.options, messages))


class StreamWriter(DataSourceStreamWriter):
    """df.writeStream.format("lockgate"): each micro-batch all or nothing, and exactly once
    across restarts from the checkpoint (see the module comment)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> PreparedMessage:
        context = TaskContext.get()
        raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        batch = int(raw) if raw is not None else None

        async def run() -> PreparedMessage:
            decided = await _decisions(self.options.bootstrap, self.options.transactional_id_prefix)
            return await _write_task(self.options, iterator, batch, decided)

        return asyncio.run(run())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        prefix = self.options.transactional_id_prefix

        async def run() -> None:
            decided = await _decisions(self.options.bootstrap, prefix)
            earlier = [d for d in decided if d.batch == batchId]
            decision = earlier[-1] if earlier else Decision(batchId, _prepared(messages))
            if not earlier:
                await _record_decision(self.options.bootstrap, prefix, decision)  # commit point
            for transactional_id, state in decision.states.items():
                await _complete(self.options, transactional_id, state)

        asyncio.run(run())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        asyncio.run(_abort_all(self.options, messages))
