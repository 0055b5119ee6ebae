"""The admin's group requests go to the group's coordinator and are sent again, to the
coordinator found anew, while it answers COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
or NOT_COORDINATOR (a new offsets topic loading, a coordinator that moved), as Kafka's Admin
does, for up to request_timeout_ms; any other error at once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.client import admin_groups
from lockgate.client.errors import ErrorCode, KafkaError, error_for
from lockgate.protocol.api import ApiKey


class Coordinators:
    """A cluster whose group coordinator is found at the nodes given, one lookup each."""

    def __init__(self, nodes: list[int], request_timeout_ms: int = 30_000) -> None:
        self.nodes = nodes
        self.looked_up = 0
        self.request_timeout_ms = request_timeout_ms

    async def find_coordinator(self, key_type: int, key: str) -> int:
        assert key_type == admin_groups.GROUP_KEY_TYPE and key == "g"
        node = self.nodes[min(self.looked_up, len(self.nodes) - 1)]
        self.looked_up += 1
        return node

    async def connection(self, node_id: int) -> int:
        return node_id  # (what `send` is given: the node, here)

    def backoff_s(self, attempt: int) -> float:
        return 0.001


def answers(*codes: ErrorCode) -> tuple[list[int], Any]:
    asked: list[int] = []
    left = list(codes)

    async def send(node: int) -> str:
        asked.append(node)
        code = left.pop(0)
        if code:
            raise error_for(code, None, "g")
        return f"answered by {node}"

    return asked, send


async def test_a_loading_or_moved_coordinator_is_asked_again_anew() -> None:
    cluster = Coordinators([1, 1, 2])
    asked, send = answers(
        ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.none
    )
    assert await admin_groups.at_coordinator(cluster, "g", send) == "answered by 2"  # type: ignore[arg-type]
    assert asked == [1, 1, 2] and cluster.looked_up == 3


@pytest.mark.parametrize("code", [ErrorCode.non_empty_group, ErrorCode.group_id_not_found])
async def test_other_errors_are_raised_at_once(code: ErrorCode) -> None:
    asked, send = answers(code)
    with pytest.raises(KafkaError) as raised:
        await admin_groups.at_coordinator(Coordinators([1]), "g", send)  # type: ignore[arg-type]
    assert raised.value.code == code and asked == [1]


async def test_a_coordinator_loading_for_longer_than_the_request_timeout_is_an_error() -> None:
    asked, send = answers(*[ErrorCode.coordinator_load_in_progress] * 1000)
    cluster = Coordinators([1], request_timeout_ms=50)
    with pytest.raises(KafkaError) as raised:
        await admin_groups.at_coordinator(cluster, "g", send)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.coordinator_load_in_progress and 1 < len(asked) < 1000


class Describing:
    """A coordinator connection that answers ConsumerGroupDescribe and then DescribeGroups
    with the error codes given, one per request, for every group asked."""

    def __init__(self, node: int, codes: list[ErrorCode], log: list[tuple[int, int]]) -> None:
        self.node, self.codes, self.log = node, codes, log

    def version_for(self, api_key: int) -> int:
        return 0

    async def request(self, api_key: int, body: dict[str, Any], version: int = -1) -> Any:
        self.log.append((self.node, api_key))
        code = self.codes.pop(0)
        if api_key == admin_groups.CONSUMER_GROUP_DESCRIBE:  # (a classic group: not one here)
            ids = body["group_ids"]
            code = ErrorCode.group_id_not_found if code == ErrorCode.none else code
            groups = [SimpleNamespace(group_id=g, error_code=code, error_message=None) for g in ids]
            return SimpleNamespace(groups=groups)
        groups = [
            SimpleNamespace(
                group_id=g,
                error_code=code,
                group_state="Empty",
                protocol_type="consumer",
                protocol_data="",
                members=[],
            )
            for g in body["groups"]
        ]
        return SimpleNamespace(groups=groups)


async def test_describe_groups_asks_a_loading_or_moved_coordinator_again() -> None:
    log: list[tuple[int, int]] = []
    loading, moved = ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator
    connections = {
        1: Describing(1, [loading, ErrorCode.none, moved], log),  # KIP-848 side, then classic
        2: Describing(2, [ErrorCode.none, ErrorCode.none], log),
    }
    cluster = Coordinators([1, 1, 2])

    async def connection(node_id: int) -> Describing:
        return connections[node_id]

    cluster.connection = connection  # type: ignore[method-assign, assignment]
    described = await admin_groups.describe_groups(cluster, ["g"])  # type: ignore[arg-type]
    assert described["g"].state == "Empty" and described["g"].coordinator_id == 2
    classic = int(ApiKey.DESCRIBE_GROUPS)
    kip848 = admin_groups.CONSUMER_GROUP_DESCRIBE
    assert log == [(1, kip848), (1, kip848), (1, classic), (2, kip848), (2, classic)]
