# console/views_cluster.py — the cluster page (cluster.py gathers its data).
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from lockgate.console import cluster
from lockgate.console.web import clients, render


async def home(request: Request) -> Response:
    return RedirectResponse("/cluster", status_code=303)


async def cluster_page(request: Request) -> Response:
    admin = await clients(request).admin()
    overview = await cluster.overview(admin)
    return render(request, "cluster/index.html", {"overview": overview, "title": "Cluster"})


ROUTES: list[BaseRoute] = [
    Route("/", home),
    Route("/cluster", cluster_page),
]
