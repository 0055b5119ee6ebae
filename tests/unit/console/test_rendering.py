"""How the record browser shows bytes: auto-detection, forced modes and their fallbacks."""

from __future__ import annotations

import pytest

from lockgate.console.rendering import hex_dump, show


def test_auto_detects_json_text_and_binary() -> None:
    assert show(b'{"a": [1, 2]}').mode == "json"
    assert show(b'{"a": [1, 2]}').text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert show("héllo wörld".encode()) == show("héllo wörld".encode(), "text")
    assert show(b"plain").mode == "text" and show(b"42").mode == "text"  # a number stays text
    assert show(b"\x00\xff\x01").mode == "hex"
    assert show(None).mode == "null"


def test_forced_modes_fall_back_and_say_why() -> None:
    assert show(b"42", "json").mode == "json"
    not_json = show(b"not json", "json")
    assert (not_json.mode, not_json.note) == ("text", "not JSON")
    binary = show(b"\xff\xfe", "text")
    assert (binary.mode, binary.note) == ("hex", "not UTF-8 text")
    assert show(b'{"a": 1}', "hex").text == hex_dump(b'{"a": 1}')
    with pytest.raises(ValueError, match="unknown format"):
        show(b"x", "xml")


def test_long_values_are_cut_without_splitting_a_character() -> None:
    value = "é".encode() * 10  # two bytes each
    shown = show(value, limit=5)
    assert (shown.mode, shown.text, shown.cut) == ("text", "éé", 15)
    assert show(b'{"a": "' + b"x" * 50 + b'"}', "json", limit=10).note == (
        "too long to parse as JSON"
    )


def test_hex_dump_has_offsets_and_an_ascii_column() -> None:
    lines = hex_dump(bytes(range(60, 80))).splitlines()
    assert lines[0].startswith("00000000  3c 3d 3e") and lines[0].endswith("<=>?@ABCDEFGHIJK")
    assert lines[1].startswith("00000010  4c 4d 4e 4f") and lines[1].endswith("LMNO")
