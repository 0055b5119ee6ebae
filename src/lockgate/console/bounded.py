# console/bounded.py — asking every broker (or every partition leader) at once, each answer
# bounded by BROKER_ANSWER_S. A broker that hangs (frozen, overloaded, cut off while still
# registered) then costs a page the rows it owns, shown with why, instead of the whole page
# after the client's 30 s request timeout: the moment an operator opens the console is often
# the moment a broker is in trouble.
from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Collection, Mapping
from typing import TypeVar

from lockgate.client.admin import Admin
from lockgate.client.admin_log_dirs import LogDirDescription
from lockgate.client.admin_records import ListedOffset
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError, KafkaTimeoutError

BROKER_ANSWER_S = 5.0
T = TypeVar("T")


async def answer(call: Awaitable[T], who: str) -> T | KafkaError:
    """The answer, or why there is none (a KafkaError) when `who` fails or is silent."""
    try:
        return await asyncio.wait_for(call, BROKER_ANSWER_S)
    except TimeoutError:
        return KafkaTimeoutError(f"{who} did not answer within {BROKER_ANSWER_S:g} s")
    except KafkaError as exc:
        return exc


async def log_dirs(
    admin: Admin, brokers: Collection[int], topics: Mapping[str, list[int]] | None = None
) -> tuple[dict[int, list[LogDirDescription]], dict[int, KafkaError]]:
    """Each broker's log directories (`topics` narrows the replicas listed), and the brokers
    that gave none, with why."""
    order = sorted(brokers)
    answers = await asyncio.gather(
        *(answer(admin.describe_log_dirs([b], topics), f"broker {b}") for b in order)
    )
    found: dict[int, list[LogDirDescription]] = {}
    failed: dict[int, KafkaError] = {}
    for broker, got in zip(order, answers, strict=True):
        if isinstance(got, KafkaError):
            failed[broker] = got
        else:
            found.update(got)
    return found, failed


async def offsets(
    admin: Admin,
    leaders: Mapping[TopicPartition, int],
    timestamp: int,
    isolation_level: int = 0,
) -> dict[TopicPartition, ListedOffset | KafkaError]:
    """ListOffsets of each partition at `timestamp`, asked of every leader at once; the
    partitions of a leader that fails or is silent get its error."""
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp, leader in leaders.items():
        by_leader[leader].append(tp)
    order = sorted(by_leader)
    answers = await asyncio.gather(
        *(
            answer(
                admin.list_offsets(
                    dict.fromkeys(by_leader[leader], timestamp), isolation_level=isolation_level
                ),
                f"broker {leader}",
            )
            for leader in order
        )
    )
    results: dict[TopicPartition, ListedOffset | KafkaError] = {}
    for leader, got in zip(order, answers, strict=True):
        if isinstance(got, KafkaError):
            results.update(dict.fromkeys(by_leader[leader], got))
        else:
            results.update(got)
    return results
