"""Apache Kafka, the reference broker: one per test session (per worker), started from the
jars `make reference-deps` resolved. Without them a test is skipped with the reason, except
under CI, where the test command has resolved them and their absence is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.reference_kafka import ReferenceKafka, reference_classpath


@pytest.fixture(scope="session")
def classpath() -> str:
    """Apache Kafka's resolved classpath."""
    found = reference_classpath()
    if found is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def reference_kafka(
    tmp_path_factory: pytest.TempPathFactory, classpath: str
) -> Iterator[ReferenceKafka]:
    kafka = ReferenceKafka(tmp_path_factory.mktemp("reference") / "data", classpath).start()
    try:
        yield kafka
    finally:
        kafka.stop()
