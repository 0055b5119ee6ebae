# console/views_transactions.py — the transaction pages (transactions.py gathers their data):
# every transactional id a page at a time with the transactions held past their timeout
# (two-phase ones waiting for their manager) on top, the hanging-transaction scan, and the two
# mutations behind auth.mutation: abort (a hanging transaction, by partition and start offset)
# and force-terminate (KIP-939, by transactional id).
from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from lockgate.client.admin_transactions import DEFAULT_FORCE_TIMEOUT_MS, OPEN_STATES
from lockgate.client.cluster import TopicPartition
from lockgate.console import transactions
from lockgate.console.auth import mutation
from lockgate.console.errors import BadInput
from lockgate.console.params import whole_number
from lockgate.console.web import clients, render
from lockgate.tools.common import ToolError

# ListTransactions' state names (Kafka's TransactionState), for the filter
STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


def _integer(text: str | None, name: str, default: int, minimum: int = 0) -> int:
    value = whole_number(text, name, minimum)
    return default if value is None else value


async def transactions_page(request: Request) -> Response:
    query = request.query_params
    state = query.get("state", "")
    if state and state not in STATES:
        raise BadInput(f"unknown transaction state {state!r} (one of {', '.join(STATES)})")
    admin = await clients(request).admin()
    page = await transactions.list_transactions(
        admin,
        name_filter=query.get("q", ""),
        state_filter=state,
        page=_integer(query.get("page"), "page", 1, 1),
    )
    held = await transactions.held_past_timeout(admin, now_ms=page.now_ms)
    return render(
        request,
        "transactions/index.html",
        {
            "page": page,
            "held": held,
            "states": STATES,
            "open_states": OPEN_STATES,
            "title": "Transactions",
        },
    )


async def hanging_page(request: Request) -> Response:
    query = request.query_params
    minutes = _integer(
        query.get("max_timeout_minutes"),
        "the largest transaction timeout",
        transactions.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60_000,
    )
    admin = await clients(request).admin()
    scan = await transactions.find_hanging(
        admin,
        topic=query.get("topic", "").strip() or None,
        max_transaction_timeout_ms=minutes * 60_000,
    )
    return render(
        request,
        "transactions/hanging.html",
        {"scan": scan, "minutes": minutes, "title": "Hanging transactions"},
    )


def _partition_of(form: FormData) -> tuple[TopicPartition, int]:
    topic = str(form.get("topic", "")).strip()
    if not topic:
        raise BadInput("abort needs the topic of the hanging transaction")
    partition = _integer(str(form.get("partition", "")), "partition", -1)
    start = _integer(str(form.get("start_offset", "")), "start offset", -1)
    if partition < 0 or start < 0:
        raise BadInput("abort needs the partition and the start offset of the transaction")
    return TopicPartition(topic, partition), start


async def _abort_preview(request: Request, form: FormData) -> Sequence[tuple[str, str]]:
    topic_partition, start = _partition_of(form)
    admin = await clients(request).admin()
    states = await admin.describe_producers([topic_partition])
    for producer in states.get(topic_partition, []):
        if producer.current_txn_start_offset == start:
            return [
                ("partition", str(topic_partition)),
                ("producer id / epoch", f"{producer.producer_id} / {producer.producer_epoch}"),
                ("coordinator epoch", str(producer.coordinator_epoch)),
                ("transaction starts at offset", str(start)),
                ("effect", "an abort marker is written: read_committed readers move past it"),
            ]
    raise BadInput(f"no open transaction starts at offset {start} of {topic_partition}")


async def abort(request: Request, form: FormData) -> Response:
    topic_partition, start = _partition_of(form)
    try:
        producer = await transactions.abort_hanging(
            await clients(request).admin(), topic_partition, start
        )
    except ToolError as exc:
        raise BadInput(str(exc)) from None
    return RedirectResponse(
        f"/transactions/hanging?aborted={producer.producer_id}&topic="
        f"{quote(topic_partition.topic, safe='')}",
        status_code=303,
    )


def _transactional_id(form: FormData) -> str:
    transactional_id = str(form.get("transactional_id", ""))
    if not transactional_id:
        raise BadInput("force-terminate needs a transactional id")
    return transactional_id


async def _terminate_preview(request: Request, form: FormData) -> Sequence[tuple[str, str]]:
    row = await transactions.describe_transaction(
        await clients(request).admin(), _transactional_id(form)
    )
    waited = "–" if row.age_ms is None else f"{row.age_ms / 1000:.1f} s"
    return [
        ("transactional id", row.transactional_id),
        ("state", row.state),
        ("producer id / epoch", f"{row.producer_id} / {row.producer_epoch}"),
        ("open for", waited),
        ("partitions", transactions.partitions_text(row.partitions) or "–"),
        ("effect", "every producer of the id is fenced; its open transaction is aborted"),
    ]


async def force_terminate(request: Request, form: FormData) -> Response:
    transactional_id = _transactional_id(form)
    await transactions.force_terminate(
        await clients(request).admin(), transactional_id, timeout_ms=DEFAULT_FORCE_TIMEOUT_MS
    )
    return RedirectResponse(
        f"/transactions?terminated={quote(transactional_id, safe='')}", status_code=303
    )


ROUTES: list[BaseRoute] = [
    Route("/transactions", transactions_page),
    Route("/transactions/hanging", hanging_page),
    Route(
        "/transactions/abort",
        mutation("abort a hanging transaction", preview=_abort_preview)(abort),
        methods=["POST"],
    ),
    Route(
        "/transactions/force-terminate",
        mutation("force-terminate a transactional id", preview=_terminate_preview)(force_terminate),
        methods=["POST"],
    ),
]
