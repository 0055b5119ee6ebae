from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker import BrokerProcess

SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session per pytest worker running Spark tests, with lockgate's
    data source registered."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run our interpreter
    from pyspark.sql import SparkSession

    from lockgate.spark import LockgateDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lockgate-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.speculation", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(LockgateDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("spark") / "data", SETTINGS).start()
    try:
        yield broker
    finally:
        broker.kill()
