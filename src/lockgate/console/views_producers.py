# console/views_producers.py — the producers page (producers.py gathers its data): a topic
# and, optionally, one of its partitions chosen in a form; the producer state their leaders hold.
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from lockgate.console import producers
from lockgate.console.errors import BadInput
from lockgate.console.web import clients, render


def _partition(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"partition must be a whole number, got {text!r}") from None
    if value < 0:
        raise BadInput(f"partition cannot be negative, got {value}")
    return value


async def producers_page(request: Request) -> Response:
    topic = request.query_params.get("topic", "").strip()
    partition = _partition(request.query_params.get("partition", ""))
    admin = await clients(request).admin()
    view = await producers.describe_producers(admin, topic, partition) if topic else None
    topics = await admin.list_topics() if not topic else []
    return render(
        request,
        "producers/index.html",
        {
            "view": view,
            "topic": topic,
            "partition": partition,
            "topics": topics,
            "title": "Producers",
        },
    )


ROUTES: list[BaseRoute] = [Route("/producers", producers_page)]
