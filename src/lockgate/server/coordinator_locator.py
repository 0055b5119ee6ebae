# FindCoordinator's answer: which broker coordinates a group or a transactional id. A single
# node coordinates everything. In a cluster it is the leader of the key's partition of
# __consumer_offsets / __transaction_state (Kafka's placement: the key's Java hash modulo the
# partition count). The first lookup creates the internal topic, as Kafka does, once as many
# brokers are registered as its replication factor asks for; until then, and while a
# partition has no leader, the answer is COORDINATOR_NOT_AVAILABLE, which clients retry.
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lockgate.cluster.metadata import BrokerRegistration
from lockgate.coordinator.group.service import CONSUMER_OFFSETS_TOPIC
from lockgate.coordinator.txn.log import partition_for
from lockgate.coordinator.txn.service import TRANSACTION_STATE_TOPIC
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

log = logging.getLogger(__name__)

GROUP = 0
TRANSACTION = 1


class CoordinatorLocator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._creating: dict[str, asyncio.Task[None]] = {}

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
        topic = CONSUMER_OFFSETS_TOPIC
        view = broker.cluster.view
        record = view.topics.get(topic)
        if record is None:
            self._create(topic)
            return ErrorCode.coordinator_not_available
        state = broker.membership.partition(topic, partition_for(key, record.value.partitions))
        registration = None if state is None else view.brokers.get(state.leader)
        return ErrorCode.coordinator_not_available if registration is None else registration

    def _create(self, topic: str) -> None:
        task = self._creating.get(topic)
        if task is None or task.done():
            self._creating[topic] = asyncio.get_running_loop().create_task(self._create_now(topic))

    async def _create_now(self, topic: str) -> None:
        config = self.broker.config
        if topic == TRANSACTION_STATE_TOPIC:
            partitions = config.integer("transaction.state.log.num.partitions")
            factor = config.integer("transaction.state.log.replication.factor")
            configs = {"min.insync.replicas": config.get("transaction.state.log.min.isr")}
        else:
            partitions = config.integer("offsets.topic.num.partitions")
            factor = config.integer("offsets.topic.replication.factor")
            configs = {}
        try:
            await self.broker.admin.create(topic, partitions, factor, configs, internal=True)
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                log.warning("cannot create %s yet (coordinators not available): %s", topic, exc)
