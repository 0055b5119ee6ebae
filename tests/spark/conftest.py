from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.broker import BrokerProcess

SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("spark") / "data", SETTINGS).start()
    try:
        yield broker
    finally:
        broker.kill()
