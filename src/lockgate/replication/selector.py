# KIP-392, the leader's choice of the replica a consumer should read from (Kafka's
# replica.selector.class), pure: the leader describes the partition's replicas that could serve
# the consumer's fetch offset (their racks, log ends and time since they were last caught up;
# itself among them), the selector names one, and the leader sends the consumer there (Fetch's
# preferred_read_replica) unless it named the leader. Kafka 4.4 ships one selector,
# RackAwareReplicaSelector; without replica.selector.class every consumer reads from the leader.
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from lockgate.config.properties import ConfigError

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica as the leader sees it: the leader has time_since_caught_up_ms 0."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(
        self, client_rack: str | None, leader: ReplicaView, replicas: Collection[ReplicaView]
    ) -> ReplicaView | None:
        """The replica the consumer in `client_rack` should read from, among `replicas` (the
        leader included); None: no preference."""
        ...


def most_caught_up(replica: ReplicaView) -> tuple[int, int, int]:
    """Kafka's order of ReplicaView ("most caught up" last): the larger log end offset, then
    the shorter time since last caught up, then the larger broker id."""
    return (replica.log_end_offset, -replica.time_since_caught_up_ms, replica.node_id)


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: a consumer that names no rack, or whose rack holds no
    replica or holds the leader, reads from the leader; otherwise from the most caught-up
    replica in its rack."""

    def select(
        self, client_rack: str | None, leader: ReplicaView, replicas: Collection[ReplicaView]
    ) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [replica for replica in replicas if replica.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=most_caught_up)


SELECTORS: dict[str, type[RackAwareReplicaSelector]] = {
    RACK_AWARE_REPLICA_SELECTOR: RackAwareReplicaSelector,
}


def replica_selector(class_name: str) -> ReplicaSelector | None:
    """The selector replica.selector.class names: None when it is empty (Kafka's default, the
    leader serves every consumer); ConfigError for a class lockgate does not have."""
    name = class_name.strip()
    if not name:
        return None
    selector = SELECTORS.get(name)
    if selector is None:
        raise ConfigError(
            f"replica.selector.class={name!r} is not served: lockgate has Kafka's "
            f"{RACK_AWARE_REPLICA_SELECTOR} (fetch from a replica in the consumer's rack), or "
            "leave it empty (consumers read from the leader)"
        )
    return selector()
