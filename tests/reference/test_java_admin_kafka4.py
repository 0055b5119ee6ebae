"""Kafka 4.4's Java AdminClient against lockgate: describeTopics goes through
DescribeTopicPartitions (paged two partitions at a time: three requests for the five partitions,
as the broker's request counter showed when this was written; with authorized operations), then
describeLogDirs, and a dynamic broker config set on the cluster-wide default resource (which
librdkafka cannot name) read back on broker 0 with its source, and a static one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reference.test_java_client import run_checks
from tests.support.broker import running_broker

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "AdminKafka4Checks.java"


class _Classpath:
    def __init__(self, classpath: str) -> None:
        self.classpath = classpath


def test_java_admin_kafka4_apis(tmp_path: Path, classpath: str) -> None:
    with running_broker(tmp_path / "data") as lockgate:
        results = run_checks(_Classpath(classpath), lockgate.bootstrap, PROGRAM)  # type: ignore[arg-type]
    assert results["dtp.partitions"] == "0:0:1:0,1:0:1:0,2:0:1:0,3:0:1:0,4:0:1:0"
    # every topic operation (no authorizer), in the AclOperation enum's order
    assert results["dtp.operations"] == (
        "[READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]"
    )
    assert results["dtp.internal"] == "false"
    assert results["logdirs.count"] == "1" and results["logdirs.error"] == "none"
    assert results["logdirs.has_dtp"] == "5" and results["logdirs.usable_known"] == "true"
    assert results["broker.retention"] == "3600000:DYNAMIC_DEFAULT_BROKER_CONFIG:false:2"
    assert results["broker.static_refused"] == "InvalidRequestException"
