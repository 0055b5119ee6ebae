# FindCoordinator's answer: which broker coordinates a group or a transactional id, in both
# modes the same way (a single node leads every partition, so it coordinates everything): a
# group's coordinator is the leader of its partition of __consumer_offsets (Kafka's
# placement: the key's Java hash modulo the partition count). The first lookup creates the
# topic, as Kafka does, once as many brokers are registered as its replication factor asks
# for; until then, and while a partition has no leader, the answer is
# COORDINATOR_NOT_AVAILABLE, which clients retry. A transactional id's coordinator is found
# the same way in __transaction_state, and a share partition's share coordinator (key type 2,
# "groupId:topicId:partition", coordinator/share/routing.py) in __share_group_state, which is
# created with Kafka's topic configs for it (not compacted: pruned).
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from lockgate.cluster.membership import Membership
from lockgate.cluster.metadata import BrokerRegistration, TopicRecord
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.share.topic import topic_configs
from lockgate.coordinator.txn.log import partition_for
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.topics.admin import TopicCreator
from lockgate.topics.internal import (
    CONSUMER_OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)

log = logging.getLogger(__name__)

GROUP = 0
TRANSACTION = 1
SHARE = 2


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
    SHARE: (
        SHARE_GROUP_STATE_TOPIC,
        "share.coordinator.state.topic.num.partitions",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    ),
}


class _Topics(Protocol):
    """The cluster's topics, as this broker knows them."""

    @property
    def topics(self) -> Mapping[str, TopicRecord]: ...


class CoordinatorLocator:
    def __init__(
        self,
        topics: _Topics,
        view: Membership,
        admin: TopicCreator,
        config: BrokerConfig,
        opens: Mapping[int, Callable[[], Coroutine[Any, Any, None]]] | None = None,
    ) -> None:
        """`opens`: key types whose topic a coordinator of this broker makes itself on first
        use (a single node's share coordinator) rather than `admin`."""
        self.topics = topics
        self.opens = dict(opens or {})
        self.view = view
        self.admin = admin
        self.config = config
        self._creating: dict[str, asyncio.Task[None]] = {}

    def locate(self, key_type: int, key: str) -> BrokerRegistration | ErrorCode:
        """The coordinator of `key`; for a SHARE key the caller has checked its form
        (routing.parse_coordinator_key) and passes its normal form (routing.coordinator_key)."""
        if key_type not in _TOPICS:
            return ErrorCode.invalid_request
        topic = _TOPICS[key_type][0]
        record = self.topics.topics.get(topic)
        if record is None:
            creating = self._creating.get(topic)
            if creating is None or creating.done():
                opens = self.opens.get(key_type)
                self._creating[topic] = asyncio.get_running_loop().create_task(
                    self._create(key_type) if opens is None else self._open(topic, opens())
                )
            return ErrorCode.coordinator_not_available
        state = self.view.partition(topic, partition_for(key, record.partitions))
        leader = None if state is None else state.leader
        registration = next((b for b in self.view.brokers() if b.node_id == leader), None)
        return ErrorCode.coordinator_not_available if registration is None else registration

    async def _open(self, topic: str, opening: Coroutine[Any, Any, None]) -> None:
        try:
            await opening
        except (OSError, KafkaProtocolError) as exc:
            log.warning("cannot make %s yet (its coordinators are not available): %s", topic, exc)

    async def _create(self, key_type: int) -> None:
        topic, partitions_key, factor_key, min_isr_key = _TOPICS[key_type]
        config = self.config
        configs = {} if min_isr_key is None else {"min.insync.replicas": config.get(min_isr_key)}
        if key_type == SHARE:
            configs = topic_configs(config)
        try:
            await self.admin.create(
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
