# console/views_topics.py — the topics pages (topics.py and records.py gather their data).
from __future__ import annotations

from starlette.routing import BaseRoute

ROUTES: list[BaseRoute] = []
