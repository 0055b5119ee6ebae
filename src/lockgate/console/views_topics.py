# console/views_topics.py — the topics pages: the list (filter, pages of 100), a topic's
# detail with its live throughput chart (a fragment the page's script refreshes, each refresh
# a sample: sampler.py), and the record browser. Query parameters are checked here; a bad one
# is a 400 page naming it, an unknown topic or partition a 404.
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from lockgate.client.admin import Admin
from lockgate.client.admin_records import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListedOffset
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError, OffsetOutOfRangeError
from lockgate.console import records, rendering, topics
from lockgate.console.charts import Series, line_chart
from lockgate.console.errors import BadInput
from lockgate.console.params import choice_param, int_param
from lockgate.console.sampler import rates
from lockgate.console.web import clients, render, sampler

DEFAULT_COUNT = 20
ISOLATIONS = {"committed": records.READ_COMMITTED, "uncommitted": records.READ_UNCOMMITTED}


def parse_time(raw: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    text = raw.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(
            f"time must be milliseconds since the epoch or an ISO 8601 time "
            f"(2026-01-31T12:00:00Z), not {raw!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def iso(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "–"
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def topic_list(request: Request) -> Response:
    name_filter = request.query_params.get("q", "")
    internal = request.query_params.get("internal") == "1"
    page = int_param(request, "page", 1, 1)
    admin = await clients(request).admin()
    listing = await topics.list_topics(
        admin, name_filter=name_filter, include_internal=internal, page=page
    )
    params = {"q": name_filter, **({"internal": "1"} if internal else {})}
    return render(
        request,
        "topics/list.html",
        {
            "title": "Topics",
            "listing": listing,
            "q": name_filter,
            "internal": internal,
            "params": params,
        },
    )


async def topic_page(request: Request) -> Response:
    name = request.path_params["name"]
    admin = await clients(request).admin()
    detail = await topics.topic_detail(admin, name)
    return render(
        request,
        "topics/detail.html",
        {"title": f"Topic {name}", "topic": detail, **await _throughput(request, name)},
    )


async def _throughput(request: Request, name: str) -> dict[str, Any]:
    admin = await clients(request).admin()
    samples = await sampler(request).sample(
        f"topic:{name}", lambda: topics.end_offsets_and_size(admin, name)
    )
    messages = rates(samples, "messages")
    size = rates(samples, "bytes")
    return {
        "messages_chart": line_chart(
            [Series("messages/s", messages)], title="Messages in", unit="per second"
        ),
        "bytes_chart": line_chart([Series("bytes/s", size)], title="Bytes in", unit="per second"),
        "messages_now": messages[-1][1] if messages else None,
        "bytes_now": size[-1][1] if size else None,
        "samples": len(samples),
    }


async def throughput_fragment(request: Request) -> Response:
    name = request.path_params["name"]
    return render(request, "topics/throughput.html", await _throughput(request, name))


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the record browser, its bytes already shown as text, JSON or hex."""

    offset: int
    time: str
    control: bool
    kind: str  # a marker's COMMIT/ABORT; "" for a record
    producer: str
    outcome: str | None
    key: rendering.Shown | None
    value: rendering.Shown | None
    headers: tuple[tuple[str, rendering.Shown], ...]


def _rows(page: records.RecordPage, key_format: str, value_format: str) -> list[Row]:
    rows = []
    for entry in page.entries:
        if isinstance(entry, records.ControlMarker):
            rows.append(
                Row(
                    entry.offset,
                    iso(entry.timestamp),
                    True,
                    entry.kind,
                    f"{entry.producer_id}/{entry.producer_epoch}",
                    None,
                    None,
                    None,
                    (),
                )
            )
            continue
        rows.append(
            Row(
                entry.offset,
                iso(entry.timestamp),
                False,
                "",
                str(entry.producer_id) if entry.transactional else "",
                entry.outcome,
                rendering.show(entry.key, key_format),
                rendering.show(entry.value, value_format),
                tuple((name, rendering.show(value, "auto")) for name, value in entry.headers),
            )
        )
    return rows


async def _offset(admin: Admin, tp: TopicPartition, timestamp: int, isolation: int) -> int:
    answer = (await admin.list_offsets({tp: timestamp}, isolation_level=isolation))[tp]
    if isinstance(answer, KafkaError):
        raise answer
    assert isinstance(answer, ListedOffset)
    return answer.offset


async def record_browser(request: Request) -> Response:
    name = request.path_params["name"]
    partition = int_param(request, "partition", 0, 0)
    count = int_param(request, "count", DEFAULT_COUNT, 1, records.MAX_COUNT)
    isolation_name = choice_param(request, "isolation", tuple(ISOLATIONS))
    isolation = ISOLATIONS[isolation_name]
    key_format = choice_param(request, "key_format", rendering.MODES)
    value_format = choice_param(request, "value_format", rendering.MODES)
    raw_time = request.query_params.get("time", "").strip()
    offset_given = request.query_params.get("offset", "").strip()
    admin = await clients(request).admin()
    info = await admin.cluster.topic(name)
    if partition >= len(info.partitions):
        raise BadInput(f"{name} has partitions 0 to {len(info.partitions) - 1}, not {partition}")
    tp = TopicPartition(name, partition)
    note = ""
    if raw_time:
        found = await records.resolve_time(admin, name, partition, parse_time(raw_time))
        if found is None:
            start = await _offset(admin, tp, LATEST_TIMESTAMP, isolation)
            note = f"No record at or after {raw_time}: showing from the end."
        else:
            start = found
    elif offset_given:
        start = int_param(request, "offset", 0, 0)
    else:  # the last `count` offsets
        end = await _offset(admin, tp, LATEST_TIMESTAMP, isolation)
        first = await _offset(admin, tp, EARLIEST_TIMESTAMP, isolation)
        start = max(first, end - count)
    try:
        page = await records.browse(admin, name, partition, start, count, isolation)
    except OffsetOutOfRangeError as exc:
        raise BadInput(str(exc)) from None
    params = {
        "partition": str(partition),
        "count": str(count),
        "isolation": isolation_name,
        "key_format": key_format,
        "value_format": value_format,
    }
    return render(
        request,
        "topics/records.html",
        {
            "title": f"Records of {name}-{partition}",
            "name": name,
            "partitions": len(info.partitions),
            "page": page,
            "rows": _rows(page, key_format, value_format),
            "params": params,
            "time": raw_time,
            "offset": start,
            "count": count,
            "isolation": isolation_name,
            "key_format": key_format,
            "value_format": value_format,
            "modes": rendering.MODES,
            "note": note,
            "previous": max(page.log_start, start - count) if start > page.log_start else None,
        },
    )


ROUTES: list[BaseRoute] = [
    Route("/topics", topic_list),
    Route("/topics/{name}", topic_page),
    Route("/topics/{name}/throughput", throughput_fragment),
    Route("/topics/{name}/records", record_browser),
]
