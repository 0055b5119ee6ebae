"""KIP-1251 end to end, by raw requests to a lockgate broker process: a consumer-protocol member
that has moved to a newer member epoch may still commit (OffsetCommit v10, TxnOffsetCommit v3)
with its previous epoch the partitions it held then, while a partition it was given in the
newer epoch, one it handed over, a newer epoch and an unknown member are refused, and
OffsetFetch wants the exact epoch. This is the window in which the Java consumer commits
while its heartbeat's answer with the new epoch is still on its way. The same scenario runs
against Apache Kafka 4.4 in tests/reference/test_differential.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lockgate.client.cluster import Cluster
from lockgate.protocol.api import ApiKey
from tests.support.broker import running_broker
from tests.support.clients import create_topic
from tests.support.consumer_group_raw import EXPECTED, PARTITIONS, kip1251_observations

TOPIC = "kip1251"


async def observe(bootstrap: str) -> dict[str, object]:
    async with Cluster(bootstrap) as cluster:
        [node] = cluster.metadata.brokers
        connection = await cluster.connection(node)
        response = await connection.request(
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": "kip1251-txn", "transaction_timeout": 60_000,
             "producer_id": -1, "producer_epoch": -1},
        )  # fmt: skip
        assert response.error_code == 0, response
        producer = ("kip1251-txn", int(response.producer_id), int(response.producer_epoch))
        return await kip1251_observations(connection, "kip1251-group", TOPIC, producer)


def test_an_older_member_epoch_commits_the_partitions_held_since(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker:
        create_topic(broker.bootstrap, TOPIC, len(PARTITIONS))
        assert asyncio.run(observe(broker.bootstrap)) == EXPECTED
