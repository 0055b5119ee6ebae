# Small helpers shared by handlers: request field access across versions, partition lookup,
# and the long-poll wait of the fetch APIs.
from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable
from typing import Any

from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

NO_EPOCH = -1


def millis(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def field(request: Any, name: str, default: Any) -> Any:
    """A request field that older versions lack."""
    return getattr(request, name, default)


def check_leader(partition: Partition, current_leader_epoch: int) -> None:
    """KIP-320/KIP-359: a client that names the leader epoch it knows must be current; then
    (in Kafka's order) this replica must be the partition's leader."""
    check_epoch(partition, current_leader_epoch)
    if not partition.is_leader:
        raise KafkaProtocolError(
            ErrorCode.not_leader_or_follower,
            f"{partition.topic}-{partition.index} is not led by this broker",
        )


def check_epoch(partition: Partition, current_leader_epoch: int) -> None:
    """The leader epoch a client names (if any) must be the one this replica knows, on a
    leader or a follower: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH."""
    if current_leader_epoch != NO_EPOCH:
        if current_leader_epoch < partition.leader_epoch:
            raise KafkaProtocolError(
                ErrorCode.fenced_leader_epoch,
                f"epoch {current_leader_epoch} is older than the leader's {partition.leader_epoch}",
            )
        if current_leader_epoch > partition.leader_epoch:
            raise KafkaProtocolError(
                ErrorCode.unknown_leader_epoch,
                f"epoch {current_leader_epoch} is newer than the leader's {partition.leader_epoch}",
            )


async def wait_for_any(watched: Iterable[set[Callable[[], None]]], timeout_s: float) -> None:
    """Long polling: returns when a callback is called from any of the `watched` listener sets
    (a high watermark moved, records were released, ...), or on timeout."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    watched = list(watched)
    for listeners in watched:
        listeners.add(wake)
    try:
        await asyncio.wait_for(woken, timeout_s)
    except TimeoutError:
        pass
    finally:
        for listeners in watched:
            listeners.discard(wake)
