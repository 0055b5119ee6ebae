# One transactional id's coordinator state. Immutable: a transition builds a new value, which
# replaces the old one only after it has been durably logged.
from __future__ import annotations

from dataclasses import dataclass, field, replace

from lockgate.coordinator.txn.state import TxnState, is_legal

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch that reaches it forces a new producer id
TV2 = 2

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1  # when the current transaction began
    last_update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID  # tag 0: the id a retried EndTxn may still carry
    next_producer_id: int = NO_PRODUCER_ID  # tag 1: the id handed out on epoch exhaustion
    client_transaction_version: int = 0  # tag 2
    next_producer_epoch: int = NO_EPOCH  # tag 3 (lockgate; KIP-939's NextProducerEpoch)
    two_phase_commit: bool = False  # tag 4 (lockgate): KIP-939, exempt from the timeout aborter
    # tag 5 (lockgate): recognises a retried InitProducerId, also at the next coordinator
    last_producer_epoch: int = NO_EPOCH

    @property
    def tv2(self) -> bool:
        return self.client_transaction_version >= TV2

    def to(self, state: TxnState, **changes: object) -> TxnMetadata:
        """The metadata after a transition; refuses transitions the state table forbids."""
        if not is_legal(self.state, state):
            raise ValueError(
                f"{self.transactional_id}: illegal transition {self.state.name} → {state.name}"
            )
        return replace(self, state=state, **changes)  # type: ignore[arg-type]
