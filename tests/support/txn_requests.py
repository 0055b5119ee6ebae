# Raw transaction requests over one client connection, for tests that must send exactly the
# request they mean (a version, an epoch, a sequence) rather than what a client would.
from __future__ import annotations

from typing import Any

from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch


async def init_producer_id(
    connection: BrokerConnection, transactional_id: str, version: int = 4
) -> tuple[int, int]:
    """A new instance's InitProducerId (id and epoch -1): its producer id and epoch."""
    response = await connection.request(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": transactional_id, "transaction_timeout": 60_000,
         "producer_id": -1, "producer_epoch": -1},
        version=version,
    )  # fmt: skip
    assert response.error_code == 0, response
    return int(response.producer_id), int(response.producer_epoch)


async def produce_transactional(
    connection: BrokerConnection,
    transactional_id: str,
    topic: str,
    pid: int,
    epoch: int,
    sequence: int,
    version: int,
    timeout_ms: int = 5_000,
) -> tuple[ErrorCode, int]:
    """One transactional record to partition 0 (acks=all): its answer and base offset."""
    batch = build_batch(
        [(None, f"{epoch}-{sequence}".encode())],
        attributes=TRANSACTIONAL_BIT,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    response = await connection.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout": timeout_ms,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}
            ],
        },
        version=version,
    )
    answer = response.responses[0].partition_responses[0]
    return ErrorCode(answer.error_code), int(answer.base_offset)


async def end_txn(
    connection: BrokerConnection,
    transactional_id: str,
    pid: int,
    epoch: int,
    version: int,
    commit: bool = True,
) -> Any:
    return await connection.request(
        ApiKey.END_TXN,
        {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch,
         "committed": commit},
        version=version,
    )  # fmt: skip
