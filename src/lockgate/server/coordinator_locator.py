# FindCoordinator's answer: which broker coordinates a group or a transactional id. A single
# node coordinates everything. In a cluster a group's coordinator is the leader of its
# partition of __consumer_offsets (Kafka's placement: the key's Java hash modulo the partition
# count). The first lookup creates the topic, as Kafka does, once as many brokers are
# registered as its replication factor asks for; until then, and while a partition has no
# leader, the answer is COORDINATOR_NOT_AVAILABLE, which clients retry. Transactions are not
# coordinated across brokers yet (below).
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lockgate.cluster.metadata import BrokerRegistration
from lockgate.coordinator.group.service import CONSUMER_OFFSETS_TOPIC
from lockgate.coordinator.txn.log import partition_for
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

log = logging.getLogger(__name__)

GROUP = 0
TRANSACTION = 1


class CoordinatorLocator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._creating: asyncio.Task[None] | None = None

    def locate(self, key_type: int, key: str) -> BrokerRegistration | ErrorCode:
        if key_type not in (GROUP, TRANSACTION):
            return ErrorCode.invalid_request
        broker = self.broker
        if broker.cluster is None:
            host, port = broker.advertised
            return BrokerRegistration(broker.node_id, host, port, incarnation="")
        if key_type == TRANSACTION:
            # Not yet: a transactional batch (and TxnOffsetCommit) is checked against the
            # coordinator's state synchronously, in the produce path; with the coordinator on
            # another broker that check must cross the network without reordering pipelined
            # produces (docs/cluster-mode.md). Clients are told to come back until then.
            return ErrorCode.coordinator_not_available
        view = broker.cluster.view
        record = view.topics.get(CONSUMER_OFFSETS_TOPIC)
        if record is None:
            if self._creating is None or self._creating.done():
                self._creating = asyncio.get_running_loop().create_task(self._create())
            return ErrorCode.coordinator_not_available
        index = partition_for(key, record.value.partitions)
        state = broker.membership.partition(CONSUMER_OFFSETS_TOPIC, index)
        registration = None if state is None else view.brokers.get(state.leader)
        return ErrorCode.coordinator_not_available if registration is None else registration

    async def _create(self) -> None:
        config = self.broker.config
        partitions = config.integer("offsets.topic.num.partitions")
        factor = config.integer("offsets.topic.replication.factor")
        try:
            await self.broker.admin.create(
                CONSUMER_OFFSETS_TOPIC, partitions, factor, {}, internal=True
            )
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                log.warning("cannot create %s yet (groups get COORDINATOR_NOT_AVAILABLE): %s",
                            CONSUMER_OFFSETS_TOPIC, exc)  # fmt: skip
