# console/params.py — reading numbers and choices out of a page's query or form: a value that
# is not one, or out of its bounds, is a 400 page naming the field (BadInput), never a crash.
from __future__ import annotations

from starlette.requests import Request

from lockgate.console.errors import BadInput


def whole_number(
    text: str | None, name: str, low: int | None = None, high: int | None = None
) -> int | None:
    """`text` as an int, None when it is empty."""
    raw = (text or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{name} must be a whole number, not {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            bound = f"from {low} to {high}"
        else:
            bound = f"at least {low}" if low is not None else f"at most {high}"
        raise BadInput(f"{name} must be {bound}, not {value}")
    return value


def int_param(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
    value = whole_number(request.query_params.get(name), name, low, high)
    return default if value is None else value


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str:
    raw = request.query_params.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise BadInput(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return raw
