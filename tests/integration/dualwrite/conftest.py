"""Servers for the dual-write tests: one PostgreSQL (Debian's package, started by
tests/support/postgres.py) and one lockgate broker allowing two-phase commit, per module.
Without PostgreSQL a test is skipped with the reason, except under CI, where the test command
has installed it and its absence is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.broker import BrokerProcess
from tests.support.postgres import PostgresServer, running_postgres

BROKER_SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    # the abort sweep runs often: prepared transactions must survive it
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    try:
        with running_postgres() as server:
            yield server
    except LookupError as missing:
        if os.environ.get("CI"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("dualwrite") / "data", BROKER_SETTINGS)
    process.start()
    try:
        yield process
    finally:
        process.kill()
