# Share sessions (KIP-932; Kafka's ShareSessionCache): the partitions a share consumer
# fetches, remembered between its ShareFetch requests. Like KIP-227 fetch sessions
# (handlers/fetch_sessions.py) but keyed by (group id, member id), with no session id:
# - epoch 0 opens a session (dropping any earlier one of the key, whose records are not
#   released by this path); the server then expects epoch 1;
# - epoch N > 0 must equal the expected epoch, which then moves to N + 1 (after 2^31 - 1: 1);
#   ShareAcknowledge takes its epochs from the same sequence;
# - epoch -1 closes it (after its piggy-backed acknowledgements): the manager releases the
#   member's records.
# The cache holds at most group.share.max.share.sessions sessions: a new one past that is
# refused (SHARE_SESSION_LIMIT_REACHED), nothing is evicted. Each session remembers the
# connection that last used it: when that connection closes the session ends (its records
# are released).
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

SessionKey = tuple[str, str]  # (group id, member id)
TopicPartitionKey = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    connection: int
    # partition -> whether the next incremental answer must carry it (e.g. an error cleared)
    partitions: dict[TopicPartitionKey, bool] = field(default_factory=dict)
    # ShareFetches served: where the next one starts among the partitions (not the epoch,
    # which ShareAcknowledge moves too: a client alternating fetch and acknowledgement would
    # always start at the same partition, and a busy first one would starve the others)
    fetches: int = 0

    @property
    def key(self) -> SessionKey:
        return (self.group_id, self.member_id)


class SessionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(
        self,
        group_id: str,
        member_id: str,
        connection: int,
        partitions: list[TopicPartitionKey],
    ) -> ShareSession | None:
        """A new session (epoch 0) replacing the key's earlier one; None when the cache is
        full of other keys' sessions."""
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            return None
        session = ShareSession(group_id, member_id, 1, connection)
        session.partitions = dict.fromkeys(partitions, False)
        self.sessions[key] = session
        return session

    def remove(self, session: ShareSession) -> None:
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]

    def of_connection(self, connection: int) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection == connection]
