# Bootstrap address parsing.
from __future__ import annotations

import pytest

from lockgate.client.cluster import parse_bootstrap


def test_parses_lists_defaults_and_ipv6() -> None:
    assert parse_bootstrap("127.0.0.1:9092") == [("127.0.0.1", 9092)]
    assert parse_bootstrap(" a:1 , b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("broker") == [("broker", 9092)]
    assert parse_bootstrap("[::1]:9093,[fe80::1]") == [("::1", 9093), ("fe80::1", 9092)]
    assert parse_bootstrap("PLAINTEXT://h:19092") == [("h", 19092)]
    assert parse_bootstrap(["x:1", "y:2"]) == [("x", 1), ("y", 2)]


@pytest.mark.parametrize("text", ["", ",", "h:port", "h:0", "h:70000", ":9092"])
def test_rejects_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(text)
