# console/transactions.py — what the console's transaction pages show and do: every
# transactional id a page at a time with its state, age, timeout, partitions and producer
# id/epoch; transactions held open past their timeout (how two-phase KIP-939 transactions
# prepared by an external manager look from the wire); hanging transactions; and the two ways
# out, abort (a hanging one, by its partition and start offset) and force-terminate (KIP-939).
#
# Invariants: a list page costs one ListTransactions per broker and one DescribeTransactions
# per coordinator for the page's ids. DescribeTransactions (v0, the only version) does not say
# whether an id is two-phase; lockgate's timeout task aborts every other transaction past its
# timeout, so an open transaction older than its timeout is a two-phase one held by its manager
# (or one the task has not reached yet: it runs every transaction.abort.timed.out.transaction.
# cleanup.interval.ms).
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lockgate.client import admin_transactions
from lockgate.client.admin import Admin
from lockgate.client.admin_transactions import (
    OPEN_STATES,
    HangingTransaction,
    ProducerState,
    TransactionDescription,
)
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import TransactionalIdNotFoundError
from lockgate.console.paging import PAGE_SIZE, page_of
from lockgate.tools.transactions import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
    open_transaction_at,
    topic_partitions,
)

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES * 60_000


@dataclass(frozen=True, slots=True)
class TransactionRow:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None when no transaction is open
    age_ms: int | None  # now - start, None when no transaction is open
    partitions: tuple[TopicPartition, ...]
    coordinator_id: int

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def past_timeout(self) -> bool:
        """Open for longer than its timeout: on lockgate, a two-phase transaction held by its
        manager (the timeout task aborts every other one)."""
        return self.open and self.age_ms is not None and self.age_ms > self.timeout_ms


@dataclass(frozen=True, slots=True)
class TransactionPage:
    rows: tuple[TransactionRow, ...]
    page: int  # 1-based
    pages: int
    matching: int
    total: int
    name_filter: str
    state_filter: str
    now_ms: int


def _row(description: TransactionDescription, now_ms: int) -> TransactionRow:
    return TransactionRow(
        description.transactional_id,
        description.state,
        description.producer_id,
        description.producer_epoch,
        description.timeout_ms,
        description.start_time_ms,
        description.duration_ms(now_ms),
        description.partitions,
        description.coordinator_id,
    )


async def describe_all(
    admin: Admin, transactional_ids: Sequence[str]
) -> dict[str, TransactionDescription]:
    """DescribeTransactions for many ids, batched per coordinator. An id that expired since it
    was listed is left out (the batch is asked again without it)."""
    if not transactional_ids:
        return {}
    try:
        return await admin.describe_transactions(transactional_ids)
    except TransactionalIdNotFoundError:
        pass
    found: dict[str, TransactionDescription] = {}
    for transactional_id in transactional_ids:
        try:
            found.update(await admin.describe_transactions([transactional_id]))
        except TransactionalIdNotFoundError:
            continue
    return found


async def list_transactions(
    admin: Admin,
    *,
    name_filter: str = "",
    state_filter: str = "",
    page: int = 1,
    page_size: int = PAGE_SIZE,
    now_ms: int | None = None,
) -> TransactionPage:
    """Transactional ids containing `name_filter` (case-insensitive) and, when given, in state
    `state_filter`, sorted; one page of them described."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    listings = await admin.list_transactions()
    wanted = name_filter.strip().lower()
    matching = [
        t
        for t in listings
        if wanted in t.transactional_id.lower() and (not state_filter or t.state == state_filter)
    ]
    listed, page, pages = page_of(matching, page, page_size)
    shown = [t.transactional_id for t in listed]
    described = await describe_all(admin, shown)
    rows = tuple(_row(described[t], now) for t in shown if t in described)
    return TransactionPage(
        rows, page, pages, len(matching), len(listings), name_filter, state_filter, now
    )


async def describe_transaction(
    admin: Admin, transactional_id: str, *, now_ms: int | None = None
) -> TransactionRow:
    """One id (TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return _row((await admin.describe_transactions([transactional_id]))[transactional_id], now)


async def held_past_timeout(
    admin: Admin, *, now_ms: int | None = None
) -> tuple[TransactionRow, ...]:
    """Open transactions older than their own timeout, longest waiting first: two-phase
    transactions prepared (or still being written) and held by their external manager. Asks
    only for the open ones (ListTransactions' state filter)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    listings = await admin.list_transactions(states=sorted(OPEN_STATES))
    described = await describe_all(admin, [t.transactional_id for t in listings])
    rows = [_row(d, now) for d in described.values()]
    held = [row for row in rows if row.past_timeout]
    return tuple(sorted(held, key=lambda row: -(row.age_ms or 0)))


@dataclass(frozen=True, slots=True)
class HangingScan:
    """What find_hanging looked at, so that the page can say its scope."""

    hanging: tuple[HangingTransaction, ...]
    partitions_scanned: int
    topic: str | None  # None: every partition of every topic, internal ones left out
    max_transaction_timeout_ms: int


async def find_hanging(
    admin: Admin,
    *,
    topic: str | None = None,
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    now_ms: int | None = None,
) -> HangingScan:
    """kafka-transactions.sh find-hanging over one topic or every non-internal partition
    (one Metadata, one DescribeProducers per leader): producers with a transaction open on a
    partition for longer than `max_transaction_timeout_ms` that their coordinator does not
    count there."""
    if topic:
        partitions = await topic_partitions(admin, topic, None)
    else:
        metadata = await admin.cluster.refresh_metadata(None)
        partitions = sorted(
            p.topic_partition
            for info in metadata.topics.values()
            if not info.internal and not info.error_code
            for p in info.partitions
        )
    hanging = await admin_transactions.find_hanging_transactions(
        admin.cluster,
        partitions,
        max_transaction_timeout_ms=max_transaction_timeout_ms,
        now_ms=now_ms,
    )
    return HangingScan(tuple(hanging), len(partitions), topic or None, max_transaction_timeout_ms)


async def abort_hanging(
    admin: Admin, topic_partition: TopicPartition, start_offset: int
) -> ProducerState:
    """Writes the abort marker of the transaction open on the partition at `start_offset`
    (its producer id and epochs read again from the partition's leader, as the CLI's
    --start-offset does); returns the producer whose transaction was aborted."""
    producer = await open_transaction_at(admin, topic_partition, start_offset)
    await admin.abort_transaction(
        topic_partition, producer.producer_id, producer.producer_epoch, producer.coordinator_epoch
    )
    return producer


async def force_terminate(admin: Admin, transactional_id: str, *, timeout_ms: int) -> None:
    """KIP-939 force-terminate: fences every producer of the id and aborts its open
    transaction, prepared or not."""
    await admin.force_terminate_transaction(transactional_id, timeout_ms=timeout_ms)


def partitions_text(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in partitions)
