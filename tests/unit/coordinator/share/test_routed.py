"""The routed persister: a share partition whose coordinator is another broker is reached
through that broker's share-state API (each request and answer through kio, served by the real
handlers of a second broker in this process), this broker's own in-process; passing answers
are retried until the timeout, the others answered at once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.cluster.metadata import BrokerRegistration
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.share.records import StateBatch
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.coordinator.share.routed import RoutedPersister
from lockgate.handlers.registry import HANDLERS, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "share.coordinator.state.topic.num.partitions": "3",
}
PEER = BrokerRegistration(2, "127.0.0.1", 1)
SESSION = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:ANONYMOUS")


class _Connection:
    """A connection to `broker` whose requests its own handlers answer."""

    def __init__(self, broker: Broker, sent: list[tuple[int, int]]) -> None:
        self.broker = broker
        self.sent = sent

    async def request(self, api: int, body: dict[str, Any], *, version: int) -> Any:
        self.sent.append((api, version))
        request = build(request_class(api, version), body)  # type: ignore[arg-type]
        ctx = RequestContext(self.broker.services, ApiKey(api), version, 1, "t", "127.0.0.1:1",
                             1, SESSION)  # fmt: skip
        result = await HANDLERS[api].handler(ctx, request)
        response = build(response_class(api, version), result)
        encode(response)
        return response


class _Peers:
    def __init__(self, broker: Broker, failures: int = 0) -> None:
        self.sent: list[tuple[int, int]] = []
        self.connection = _Connection(broker, self.sent)
        self.failures = failures

    async def get(self, node_id: int) -> _Connection:
        assert node_id == PEER.node_id
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("refused")
        return self.connection

    async def close(self) -> None:
        pass


@pytest.fixture
async def brokers() -> AsyncIterator[tuple[Broker, Broker]]:
    here, there = Broker(BrokerConfig(SETTINGS), MemoryEngine()), None
    await here.start()
    try:
        there = Broker(BrokerConfig(SETTINGS), MemoryEngine())
        await there.start()
        await there.admin.create("t", 2, 1, {})
        yield here, there
    finally:
        await here.stop()
        if there is not None:
            await there.stop()


def routed(here: Broker, locate: Any, peers: _Peers, timeout_ms: int = 2_000) -> RoutedPersister:
    return RoutedPersister(here.shares, 1, locate, peers, timeout_ms)  # type: ignore[arg-type]


async def test_another_brokers_coordinator_is_asked_over_the_share_state_api(
    brokers: tuple[Broker, Broker],
) -> None:
    here, there = brokers
    peers = _Peers(there)
    persister = routed(here, lambda key: PEER, peers)
    topic = there.topics.topics["t"].topic_id
    assert await persister.initialize("g", topic, 1, 3, 10) == StateResult()
    batches = [StateBatch(10, 12, 2, 1), StateBatch(13, 13, 0, 2)]
    assert await persister.write("g", topic, 1, 3, 5, 10, 3, batches) == StateResult()
    read = await persister.read("g", topic, 1, 5)
    assert read == ReadResult(state_epoch=3, start_offset=10, state_batches=tuple(batches))
    # the same state as the coordinator's own answer
    assert read == await there.shares.read("g", topic, 1, 5)
    assert await persister.read_summary("g", topic, 1, 5) == SummaryResult(
        state_epoch=3, leader_epoch=5, start_offset=10, delivery_complete_count=3
    )
    fenced = await persister.write("g", topic, 1, 3, 4, 10, 3, batches)
    assert fenced.error == ErrorCode.fenced_leader_epoch
    assert (await persister.read("g", topic, 0, 5)).error == ErrorCode.invalid_request
    assert await persister.delete("g", topic, 1) == StateResult()
    assert [api for api, _ in peers.sent] == [83, 85, 84, 87, 85, 84, 86]
    assert dict(peers.sent)[85] == 1 and dict(peers.sent)[87] == 1  # (delivery complete count)


async def test_passing_answers_are_retried_until_the_coordinator_answers(
    brokers: tuple[Broker, Broker],
) -> None:
    here, there = brokers
    answers: list[BrokerRegistration | ErrorCode] = [
        ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, PEER, PEER,
    ]  # fmt: skip
    peers = _Peers(there, failures=1)  # the third try cannot connect, the fourth gets through
    persister = routed(here, lambda key: answers.pop(0), peers)
    topic = there.topics.topics["t"].topic_id
    assert await persister.initialize("g", topic, 0, 1, 0) == StateResult()
    assert not answers and peers.sent == [(83, 0)]


async def test_a_coordinator_unavailable_past_the_timeout_is_the_answer(
    brokers: tuple[Broker, Broker],
) -> None:
    here, there = brokers
    peers = _Peers(there, failures=1_000)
    persister = routed(here, lambda key: PEER, peers, timeout_ms=200)
    answer = await persister.read("g", uuid.uuid4(), 0, 0)
    assert answer.error == ErrorCode.coordinator_not_available and not peers.sent
    persister = routed(here, lambda key: ErrorCode.coordinator_load_in_progress, peers, 200)
    assert (await persister.delete("g", uuid.uuid4(), 0)).error == (
        ErrorCode.coordinator_load_in_progress
    )


async def test_this_brokers_own_coordinator_is_called_in_process(
    brokers: tuple[Broker, Broker],
) -> None:
    here, there = brokers
    await here.admin.create("t", 2, 1, {})
    peers = _Peers(there)
    mine = BrokerRegistration(1, "127.0.0.1", 1)
    persister = routed(here, lambda key: mine, peers)
    topic = here.topics.topics["t"].topic_id
    assert await persister.initialize("g", topic, 0, 1, 0) == StateResult()
    assert (await here.shares.read("g", topic, 0, 0)).state_epoch == 1 and not peers.sent


async def test_a_single_node_waits_for_its_topic_to_be_made(
    brokers: tuple[Broker, Broker],
) -> None:
    here, _ = brokers
    await here.admin.create("t", 1, 1, {})
    topic = here.topics.topics["t"].topic_id
    answer = await here.share_persister.initialize("g", topic, 0, 1, -1)
    assert answer == StateResult() and here.shares.runtime.loaded
