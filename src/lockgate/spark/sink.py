# spark/sink.py — the exactly-once sinks: every Spark task writes its rows inside a KIP-939
# two-phase transaction and prepares it; the driver completes all of them, or aborts them.
#
# Transactional ids are f"{prefix}-{partition id}": the same for every attempt of a task, so a
# new attempt's InitProducerId fences the attempts before it.
#
# Decisions (the commit point of a 2PC round): the driver appends {batch, every prepared state}
# to the commit-log topic, then points the consumer group named after the prefix at that record
# (its committed offset on the commit log). Committing the pointer is the commit point; finding
# the last decision is one OffsetFetch and one Fetch, however long the query has run.
# Streaming (exactly once across driver crashes):
# - driver dies before the pointer moves: no decision for N; Spark replays N; each task's
#   InitProducerId (without keep_prepared_txn) fences the old attempt and aborts its prepared
#   transaction, then the task writes anew;
# - driver dies after: Spark replays N (its checkpoint lacks commits/N); each task completes
#   its kept transaction as the decision says (init with keep_prepared_txn, then
#   complete_transaction) and skips the replayed batch; the driver's commit for a decided batch
#   completes whatever the tasks left open;
# - commit fails after the pointer moved (Spark then calls abort): abort rolls the decision
#   forward instead of aborting, so a decided batch is never half aborted.
# Only the last decision can have participants still open: the driver completes batch N before
# Spark plans N+1. A batch id below the last decided one means the checkpoint does not belong
# to this prefix: the write fails rather than skip or duplicate.
# delivery.guarantee=at_least_once swaps all of this for one idempotent producer per task
# (what Spark's Kafka sink gives): the benchmark's baseline.
# Speculative execution must stay off (spark.speculation=false, Spark's default): two live
# attempts of one task fence each other.
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.errors import TopicAlreadyExistsError
from lockgate.client.producer import Producer
from lockgate.client.security import ClientSecurity
from lockgate.client.transactions import PreparedTxnState, TransactionState
from lockgate.spark.arrow import uniform
from lockgate.spark.options import SinkOptions

COMMIT_LOG_TOPIC = "lockgate-spark-commits"
COMMIT_LOG = TopicPartition(COMMIT_LOG_TOPIC, 0)
COMMIT_LOG_REPLICAS = 3  # at most; as offsets.topic.replication.factor
NOTHING = PreparedTxnState(-1, -1)  # completing with this aborts whatever was kept
BATCH_ID_PROPERTY = "streaming.sql.batchId"
COMPLETING_AT_ONCE = 16  # the driver's concurrent complete_transaction rounds
READ_DECISION_TIMEOUT_S = 60.0
MAX_ORPHAN_PROBES = 64


@dataclass
class PreparedMessage(WriterCommitMessage):
    transactional_id: str
    state: str | None  # PreparedTxnState JSON; None when the task wrote nothing (a replay)
    rows: int = 0


@dataclass(frozen=True)
class Decision:
    batch: int  # the micro-batch id; -1 for a batch (non-streaming) write
    states: dict[str, PreparedTxnState] = field(default_factory=dict)


class CheckpointMismatchError(RuntimeError):
    """The checkpoint replays a batch older than the sink's last decision for this prefix."""


# ---------------------------------------------------------------------------------------------
# Decisions: a record in the commit log and the prefix's group offset pointing at it


async def last_decision(
    bootstrap: str, prefix: str, security: ClientSecurity | None = None
) -> Decision | None:
    """The last decision recorded for `prefix`, None if there is none."""
    async with Admin(bootstrap, client_id="lockgate-spark", security=security) as admin:
        pointer = (await admin.list_group_offsets(prefix)).get(COMMIT_LOG)
    if pointer is None:
        return None
    async with Consumer(
        bootstrap,
        client_id="lockgate-spark",
        isolation_level="read_uncommitted",
        security=security,
    ) as consumer:
        consumer.assign([COMMIT_LOG])
        consumer.seek(COMMIT_LOG, pointer)
        deadline = time.monotonic() + READ_DECISION_TIMEOUT_S
        while time.monotonic() < deadline:
            for message in await consumer.poll(500):
                if message.offset != pointer:
                    continue
                if message.key != prefix.encode() or message.value is None:
                    raise RuntimeError(
                        f"{COMMIT_LOG} offset {pointer} is not a decision of {prefix}"
                    )
                data = json.loads(message.value)
                return Decision(
                    int(data["batch"]),
                    {t: PreparedTxnState(*s) for t, s in data["states"].items()},
                )
    raise TimeoutError(f"could not read the decision of {prefix} at {COMMIT_LOG} offset {pointer}")


async def _record_decision(
    bootstrap: str, prefix: str, decision: Decision, security: ClientSecurity | None = None
) -> None:
    value = json.dumps(
        {
            "batch": decision.batch,
            "states": {t: [s.producer_id, s.epoch] for t, s in decision.states.items()},
        }
    ).encode()
    async with Admin(bootstrap, client_id="lockgate-spark", security=security) as admin:
        with contextlib.suppress(TopicAlreadyExistsError):
            await _create_commit_log(admin)
        # Not idempotent: a retried append may land twice, which is harmless (only the record
        # the pointer names counts), and its offset is always known.
        async with Producer(
            bootstrap,
            client_id="lockgate-spark",
            acks=-1,
            enable_idempotence=False,
            security=security,
        ) as producer:
            written = await producer.send_and_wait(
                COMMIT_LOG_TOPIC, value, prefix.encode(), partition=0
            )
        await admin.alter_group_offsets(prefix, {COMMIT_LOG: written.offset})  # commit point


async def _create_commit_log(admin: Admin) -> None:
    """The decisions are the sink's commit points: on a cluster they get the replication of
    Kafka's own internal topics (3 replicas, 2 in sync, fewer replicas on fewer brokers), so
    that losing a broker loses no decision and does not stop the pipeline."""
    brokers = len((await admin.cluster.refresh_metadata(())).brokers)
    replicas = min(COMMIT_LOG_REPLICAS, max(brokers, 1))
    configs = {"retention.ms": "-1"}
    if replicas >= COMMIT_LOG_REPLICAS:
        configs["min.insync.replicas"] = str(COMMIT_LOG_REPLICAS - 1)
    await admin.create_topic(COMMIT_LOG_TOPIC, 1, replicas, configs)


# ---------------------------------------------------------------------------------------------
# Participants


def _participant(options: SinkOptions, transactional_id: str) -> Producer:
    return Producer(
        options.bootstrap,
        client_id="lockgate-spark",
        transactional_id=transactional_id,
        linger_ms=5,
        security=options.security,
    )


async def _complete(options: SinkOptions, transactional_id: str, state: PreparedTxnState) -> bool:
    """Commits the kept transaction of `transactional_id` if it is `state`, aborts it
    otherwise; a no-op when nothing is kept (completed already, or never prepared). Returns
    whether a transaction was kept."""
    async with _participant(options, transactional_id) as producer:
        await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        kept = producer.transaction_state is TransactionState.PREPARED
        await producer.complete_transaction(state)
    return kept


async def _abort_orphans(options: SinkOptions, first_partition: int) -> None:
    """Aborts what task ids from `first_partition` on still hold: prepared transactions of an
    undecided run that had more write tasks than this one (the replay after a crash runs with
    fewer, e.g. spark.sql.shuffle.partitions was lowered). Stops at the first id holding
    nothing; ids beyond a task that failed before preparing are not reached."""
    prefix = options.transactional_id_prefix
    for partition_id in range(first_partition, first_partition + MAX_ORPHAN_PROBES):
        if not await _complete(options, f"{prefix}-{partition_id}", NOTHING):
            return


async def _complete_all(options: SinkOptions, states: dict[str, PreparedTxnState]) -> None:
    limit = asyncio.Semaphore(COMPLETING_AT_ONCE)

    async def one(transactional_id: str, state: PreparedTxnState) -> None:
        async with limit:
            await _complete(options, transactional_id, state)

    rounds: list[Awaitable[None]] = [one(t, s) for t, s in sorted(states.items())]
    await asyncio.gather(*rounds)


def _column(batch: Any, name: str) -> list[Any]:
    if name in batch.schema.names:
        return list(batch.column(name).to_pylist())
    return [None] * batch.num_rows


async def _send_rows(options: SinkOptions, producer: Producer, batches: Iterator[Any]) -> int:
    """Sends the rows of Spark's Arrow record batches (the columns of Spark's Kafka sink:
    value, and optionally key, topic, partition, headers) and waits until they are written;
    returns how many. A batch of one topic and partition without headers (what a pipeline
    usually writes) is one send_batch() call; any other is sent row by row."""
    count = 0
    delivered: list[asyncio.Future[Any]] = []
    async with contextlib.aclosing(_read_ahead(batches)) as stream:
        async for batch in stream:
            whole = uniform(batch, options.topic)
            if whole is not None:
                delivered.append(
                    await producer.send_batch(whole.topic, whole.records, partition=whole.partition)
                )
            else:
                await _send_each(options, producer, batch)
            count += batch.num_rows
    await asyncio.gather(*delivered)
    return count


async def _read_ahead(batches: Iterator[Any]) -> AsyncGenerator[Any, None]:
    """Spark's batches, the next one read from the JVM in a thread while this one is sent:
    reading blocks (on the worker's socket, without the GIL), and the event loop must run
    meanwhile to write produce requests and take their responses."""
    loop = asyncio.get_running_loop()
    source = iter(batches)
    with ThreadPoolExecutor(1, thread_name_prefix="lockgate-spark-read") as reader:
        upcoming = loop.run_in_executor(reader, next, source, None)
        while (batch := await upcoming) is not None:
            upcoming = loop.run_in_executor(reader, next, source, None)
            yield batch


async def _send_each(options: SinkOptions, producer: Producer, batch: Any) -> None:
    values, keys, topics = (
        _column(batch, "value"),
        _column(batch, "key"),
        _column(batch, "topic"),
    )
    partitions, headers = _column(batch, "partition"), _column(batch, "headers")
    for i in range(batch.num_rows):
        topic = topics[i] or options.topic
        if not topic:
            raise ValueError("no topic: give a topic column or the topic option")
        await producer.send(
            str(topic),
            _bytes(values[i]),
            _bytes(keys[i]),
            partition=partitions[i],
            headers=[(h["key"], _bytes(h["value"])) for h in headers[i] or ()],
        )


async def _write_at_least_once(options: SinkOptions, rows: Iterator[Any]) -> PreparedMessage:
    async with Producer(
        options.bootstrap, client_id="lockgate-spark", linger_ms=5, security=options.security
    ) as producer:
        count = await _send_rows(options, producer, rows)
        await producer.flush()
    return PreparedMessage("", None, count)


async def _write_task(
    options: SinkOptions, rows: Iterator[Any], batch: int | None, decision: Decision | None
) -> PreparedMessage:
    if not options.exactly_once:
        return await _write_at_least_once(options, rows)
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    transactional_id = f"{options.transactional_id_prefix}-{partition_id}"
    if batch is not None and decision is not None:
        if batch < decision.batch:
            raise CheckpointMismatchError(
                f"micro-batch {batch} but {options.transactional_id_prefix} already decided "
                f"batch {decision.batch}: the checkpoint does not belong to this sink"
            )
        if batch == decision.batch:
            # A replay of a decided batch (the driver died after the commit point): finish
            # this task's part of the decision (a kept transaction it does not name is an
            # earlier attempt's, aborted) and write nothing.
            await _complete(
                options, transactional_id, decision.states.get(transactional_id, NOTHING)
            )
            return PreparedMessage(transactional_id, None)
    # Any other decision was completed before Spark planned this batch, so whatever this id
    # still has open is an undecided earlier attempt's: InitProducerId without
    # keep_prepared_txn fences it and aborts its transaction.
    async with _participant(options, transactional_id) as producer:
        await producer.init_transactions(keep_prepared_txn=False, enable_2pc=True)
        producer.begin_transaction()
        count = await _send_rows(options, producer, rows)
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
    prefix = options.transactional_id_prefix
    await _complete_all(options, {f"{prefix}-{p}": NOTHING for p in range(len(messages))})
    await _abort_orphans(options, len(messages))


# ---------------------------------------------------------------------------------------------
# Spark's writer classes


class BatchWriter(DataSourceArrowWriter):
    """df.write.format("lockgate"): one job, all or nothing. The decision is recorded as for
    streams (batch -1), so that a driver that dies while completing leaves a decision that
    recover() rolls forward."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PreparedMessage:
        return asyncio.run(_write_task(self.options, iterator, None, None))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.options.exactly_once:
            return  # at least once: the tasks flushed already

        async def run() -> None:
            decision = Decision(-1, _prepared(messages))
            await _record_decision(
                self.options.bootstrap,
                self.options.transactional_id_prefix,
                decision,
                self.options.security,
            )
            await _complete_all(self.options, decision.states)

        asyncio.run(run())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.options.exactly_once:
            return  # at least once: what the tasks wrote stays

        async def run() -> None:
            last = await last_decision(
                self.options.bootstrap,
                self.options.transactional_id_prefix,
                self.options.security,
            )
            if last is not None and last.states and last.states == _prepared(messages):
                await _complete_all(self.options, last.states)  # commit() got past its decision
            else:
                await _abort_all(self.options, messages)

        asyncio.run(run())


class StreamWriter(DataSourceStreamArrowWriter):
    """df.writeStream.format("lockgate"): each micro-batch all or nothing, and exactly once
    across restarts from the checkpoint (see the module comment)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PreparedMessage:
        context = TaskContext.get()
        raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if raw is None and self.options.exactly_once:
            # Without it a replayed batch cannot be recognised: its task would fence and abort
            # a decided transaction the driver has not completed yet.
            raise RuntimeError(f"no {BATCH_ID_PROPERTY} in the task's local properties")
        batch = int(raw) if raw is not None else None

        async def run() -> PreparedMessage:
            decision = (
                await last_decision(
                    self.options.bootstrap,
                    self.options.transactional_id_prefix,
                    self.options.security,
                )
                if self.options.exactly_once
                else None
            )
            return await _write_task(self.options, iterator, batch, decision)

        return asyncio.run(run())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.exactly_once:
            return
        prefix = self.options.transactional_id_prefix

        async def run() -> None:
            last = await last_decision(self.options.bootstrap, prefix, self.options.security)
            if last is not None and last.batch > batchId:
                raise CheckpointMismatchError(
                    f"committing micro-batch {batchId} but {prefix} already decided batch "
                    f"{last.batch}: the checkpoint does not belong to this sink"
                )
            if last is not None and last.batch == batchId:
                decision = last  # a replay: the earlier run's decision stands
            else:
                decision = Decision(batchId, _prepared(messages))
                await _record_decision(
                    self.options.bootstrap, prefix, decision, self.options.security
                )
            await _complete_all(self.options, decision.states)
            await _abort_orphans(self.options, len(messages))

        asyncio.run(run())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.exactly_once:
            return

        async def run() -> None:
            last = await last_decision(
                self.options.bootstrap,
                self.options.transactional_id_prefix,
                self.options.security,
            )
            if last is not None and last.batch == batchId:
                await _complete_all(self.options, last.states)  # decided: roll forward
            else:
                await _abort_all(self.options, messages)

        asyncio.run(run())


def recover(
    bootstrap: str, transactional_id_prefix: str, security: ClientSecurity | None = None
) -> Decision | None:
    """Completes the participants of the prefix's last decision (a driver that died between
    its decision and the last complete_transaction leaves them prepared, holding back
    read_committed readers of their partitions). Safe to run any number of times; returns the
    decision it rolled forward."""

    async def run() -> Decision | None:
        decision = await last_decision(bootstrap, transactional_id_prefix, security)
        if decision is not None:
            await _complete_all(
                SinkOptions(bootstrap, None, transactional_id_prefix, security=security),
                decision.states,
            )
        return decision

    return asyncio.run(run())
