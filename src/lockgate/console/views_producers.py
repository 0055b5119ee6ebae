# console/views_producers.py — the producers page (producers.py gathers its data): a topic
# and, optionally, one of its partitions chosen in a form; the producer state their leaders hold.
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from lockgate.console import producers
from lockgate.console.params import whole_number
from lockgate.console.web import clients, render


async def producers_page(request: Request) -> Response:
    topic = request.query_params.get("topic", "").strip()
    partition = whole_number(request.query_params.get("partition"), "partition", 0)
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
