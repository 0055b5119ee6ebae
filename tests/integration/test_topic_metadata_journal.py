"""A single node's topic metadata (cluster-metadata.json and its journal) through real clients:
hundreds of topics created and half of them deleted with confluent-kafka (the deletions
rewrite the document once the journal has as many lines as topics), a config altered, then a
kill -9: the restarted broker lists exactly the topics that were left, with their partition
counts and config, as kcat and confluent-kafka see them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic

from lockgate.cluster.local import COMPACT_AT
from tests.support.broker import running_broker

CREATED = COMPACT_AT + 44


def wait_all(futures: Mapping[Any, Future[Any]]) -> None:
    for future in futures.values():
        future.result(60)


def user_topics(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if not name.startswith("__")
    }


def test_topics_survive_a_crash_after_many_changes(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_all(admin.create_topics(
            [NewTopic(f"j{i:03d}", 1 + i % 3, 1) for i in range(CREATED)], operation_timeout=60
        ))  # fmt: skip
        wait_all(admin.delete_topics([f"j{i:03d}" for i in range(0, CREATED, 2)]))
        retention = ConfigEntry("retention.ms", "123456",
                                incremental_operation=AlterConfigOpType.SET)  # fmt: skip
        resource = ConfigResource(
            ConfigResource.Type.TOPIC, "j001", incremental_configs=[retention]
        )
        wait_all(admin.incremental_alter_configs([resource]))
        expected = {f"j{i:03d}": 1 + i % 3 for i in range(1, CREATED, 2)}
        assert user_topics(broker.bootstrap) == expected
        broker.restart(clean=False)  # kill -9
        assert user_topics(broker.bootstrap) == expected
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # (kept until answered)
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "j001")])
        [configs] = [future.result(30) for future in described.values()]
        assert configs["retention.ms"].value == "123456"
        if shutil.which("kcat") is None:
            pytest.fail("kcat is not installed: `make test` installs it")
        listing = subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-L"], capture_output=True, text=True, timeout=60,
            check=True,
        ).stdout  # fmt: skip
        listed = {line.split('"')[1] for line in listing.splitlines() if 'topic "j' in line}
        assert listed == set(expected)
