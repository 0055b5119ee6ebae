# FindCoordinator's answer: which broker coordinates a group or a transactional id. A single
# node coordinates everything. In a cluster a group's coordinator is the leader of its
# partition of __consumer_offsets (Kafka's placement: the key's Java hash modulo the partition
# count). The first lookup creates the topic, as Kafka does, once as many brokers are
# registered as its replication factor asks for; until then, and while a partition has no
# leader, the answer is COORDINATOR_NOT_AVAILABLE, which clients retry. A transactional id's
# coordinator is found the same way in __transaction_state.
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lockgate.cluster.metadata import BrokerRegistration
from lockgate.coordinator.txn.log import partition_for
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

log = logging.getLogger(__name__)

GROUP = 0
TRANSACTION = 1


# key type → (internal topic, its partition-count, replication-factor and min-ISR keys)
_TOPICS = {
    GROUP: (
        CONSUMER_OFFSETS_TOPIC,
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        None,  # Kafka's offsets topic takes the broker's min.insync.replicas
    ),
    TRANSACTION: (
        TRANSACTION_STATE_TOPIC,
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ),
}


class CoordinatorLocator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._creating: dict[str, asyncio.Task[None]] = {}

    def locate(self, key_type: int, key: str) -> BrokerRegistration | ErrorCode:
        if key_type not in _TOPICS:
            return ErrorCode.invalid_request
        broker = self.broker
        if broker.replicas is None:
            return broker.registration(incarnation="")
        topic = _TOPICS[key_type][0]
        record = broker.topics.topics.get(topic)
        if record is None:
            creating = self._creating.get(topic)
            if creating is None or creating.done():
                self._creating[topic] = asyncio.get_running_loop().create_task(
                    self._create(key_type)
                )
            return ErrorCode.coordinator_not_available
        state = broker.membership.partition(topic, partition_for(key, record.partitions))
        leader = None if state is None else state.leader
        registration = next((b for b in broker.membership.brokers() if b.node_id == leader), None)
        return ErrorCode.coordinator_not_available if registration is None else registration

    async def _create(self, key_type: int) -> None:
        topic, partitions_key, factor_key, min_isr_key = _TOPICS[key_type]
        config = self.broker.config
        configs = {} if min_isr_key is None else {"min.insync.replicas": config.get(min_isr_key)}
        try:
            await self.broker.admin.create(
                topic,
                config.integer(partitions_key),
                config.integer(factor_key),
                configs,
                internal=True,
            )
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                log.warning("cannot create %s yet (its coordinators are not available): %s",
                            topic, exc)  # fmt: skip
