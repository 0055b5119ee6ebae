# console/paging.py — the one rule of every paginated list: pages of PAGE_SIZE, numbered from
# 1, a page number past either end showing the nearest page there is.
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

PAGE_SIZE = 100
T = TypeVar("T")


def page_of(
    items: Sequence[T], page: int, page_size: int = PAGE_SIZE
) -> tuple[Sequence[T], int, int]:
    """(the items of that page, the page shown, how many pages there are)."""
    pages = max(1, math.ceil(len(items) / page_size))
    page = min(max(1, page), pages)
    return items[(page - 1) * page_size : page * page_size], page, pages
