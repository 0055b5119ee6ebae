# __share_group_state's topic configs, as Kafka's share coordinator creates the topic: deleted,
# never compacted, kept forever (retention.ms=-1); the share coordinator itself deletes the
# records below those still needed (service.py). Both create it on first use, as Kafka does: a
# single node's share coordinator on the first lookup or share-state call (service.py), a
# cluster on the first FindCoordinator SHARE lookup (locator.py).
from __future__ import annotations

from lockgate.config.properties import BrokerConfig


def topic_configs(config: BrokerConfig) -> dict[str, str]:
    """__share_group_state's topic configs, as Kafka creates it (not compacted: pruned)."""
    return {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "segment.bytes": config.get("share.coordinator.state.topic.segment.bytes"),
        "min.insync.replicas": config.get("share.coordinator.state.topic.min.isr"),
        "retention.ms": "-1",
    }
