from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.broker import BrokerProcess


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests use their own topics); stopped afterwards."""
    broker = BrokerProcess(tmp_path_factory.mktemp("compat") / "data").start()
    try:
        yield broker
    finally:
        broker.kill()
