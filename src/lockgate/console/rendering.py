# console/rendering.py — how the record browser shows bytes: as text, as JSON (pretty), or as
# hex with an ASCII column. "auto" picks JSON for UTF-8 that parses as an object or array,
# text for other printable UTF-8, hex for the rest; a forced mode that does not fit (JSON that
# does not parse, text that is not UTF-8) falls back to hex and says why. Long values are cut
# at `limit` bytes (the page says how many more there were).
from __future__ import annotations

import json
from dataclasses import dataclass

MODES = ("auto", "text", "json", "hex")
DEFAULT_LIMIT = 16 * 1024
HEX_WIDTH = 16


@dataclass(frozen=True, slots=True)
class Shown:
    mode: str  # "text", "json", "hex" or "null"
    text: str
    cut: int = 0  # bytes not shown
    note: str = ""  # why a forced mode was not used


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = all(c.isprintable() or c in "\n\r\t" for c in text)
    return text if printable else None


def _json(text: str) -> str | None:
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return json.dumps(parsed, indent=2, ensure_ascii=False, sort_keys=False)


def hex_dump(data: bytes) -> str:
    lines = []
    for start in range(0, len(data), HEX_WIDTH):
        chunk = data[start : start + HEX_WIDTH]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        ascii_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hex_part:<{HEX_WIDTH * 3 - 1}}  {ascii_part}")
    return "\n".join(lines)


def _cut_text(head: bytes) -> str | None:
    """Text of a value cut at the limit, which may have split its last character."""
    for trim in range(4):
        text = _text(head[: len(head) - trim] if trim else head)
        if text is not None:
            return text
    return None


def show(data: bytes | None, mode: str = "auto", limit: int = DEFAULT_LIMIT) -> Shown:
    if data is None:
        return Shown("null", "null")
    if mode not in MODES:
        raise ValueError(f"unknown format {mode!r}: use {', '.join(MODES)}")
    cut = max(0, len(data) - limit)
    head = data[:limit]
    if mode == "hex":
        return Shown("hex", hex_dump(head), cut)
    text = _cut_text(head) if cut else _text(data)
    # JSON is judged on the whole value: a cut one would not parse
    looks_json = mode == "json" or (text is not None and text.lstrip()[:1] in ("{", "["))
    if mode in ("auto", "json") and text is not None and not cut and looks_json:
        pretty = _json(text)
        if pretty is not None:
            return Shown("json", pretty)
    note = ""
    if mode == "json":
        note = "too long to parse as JSON" if cut else "not JSON"
    if text is not None:
        return Shown("text", text, cut, note)
    if mode == "text":
        note = "not UTF-8 text"
    return Shown("hex", hex_dump(head), cut, note)
