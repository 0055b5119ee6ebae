# Incremental fetch sessions (KIP-227): the partitions a consumer fetches, remembered between
# requests so that an incremental request only names what changed, and an incremental
# response only carries partitions with data or changed offsets. Least recently used
# sessions are evicted when max.incremental.fetch.session.cache.slots is reached.
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

PartitionKey = tuple[str, int]  # (topic name or topic id string, partition)


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's (what it tells its leader), -1 from a consumer
    # what the last response told the client; a change makes the partition appear again
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[PartitionKey, SessionPartition] = field(default_factory=dict)


class FetchSessionCache:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(1)

    def create(self) -> FetchSession | None:
        if self.slots <= 0:
            return None
        while len(self.sessions) >= self.slots:
            self.sessions.popitem(last=False)
        session_id = 0
        while session_id == 0 or session_id in self.sessions:  # ids are int32 and > 0
            session_id = next(self._ids) & 0x7FFFFFFF
        session = FetchSession(session_id, 1)
        self.sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1
