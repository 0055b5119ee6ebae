# The single-node engine of the metadata interface (MetadataStore): this node is the only
# registered broker and always the controller, and it leads every partition whose log it has
# open, at that log's own leader epoch, with itself as the only replica and the ISR. What lasts
# (cluster id, topics, their ids, partition counts and config overrides) is one JSON document,
# in the same format since the first release so that any data directory opens unchanged, and a
# journal of the changes since it was written: each change is one JSON line appended and
# fsynced before it returns, and once the journal has as many lines as there are topics (at
# least COMPACT_AT) the document is rewritten and the journal emptied. Rewriting the document
# at every change cost O(topics) each: 10,000 topics took minutes to create. A crash leaves at
# most a torn last line (appends land whole), dropped at the next start; a journal older than
# its document (a crash between the rewrite and the emptying) replays to the same state. The
# producer id counter is its own small document. Partition states are not stored: they follow
# from the logs (TopicManager reports each one it opens).
#
# Every write applies to the view before it returns, and listeners hear of it as from the etcd
# engine, so the code above reads a single node as it reads a cluster.
from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from lockgate.cluster.metadata import (
    BrokerRegistration,
    Controller,
    MetadataView,
    PartitionState,
    TopicRecord,
    Versioned,
)
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

# the one controller term of a single node: nobody else can be elected
CONTROLLER_EPOCH = 1
COMPACT_AT = 256  # the fewest journal lines that rewrite the document


class LocalMetadataStore:
    PATH = "cluster-metadata.json"
    JOURNAL_PATH = "cluster-metadata.journal"  # the changes since PATH was written
    PRODUCER_IDS_PATH = "producer-id-block"  # the end of the last reserved block of ids

    def __init__(self, storage: StorageEngine, node_id: int) -> None:
        self.storage = storage
        self.node_id = node_id
        self.view = MetadataView()
        self.lease_listeners: list[Callable[[bool], None]] = []  # a local node never expires
        self.view.controller = Controller(node_id, CONTROLLER_EPOCH)
        raw = storage.read_all(self.PATH)
        self._journal = storage.open_append(self.JOURNAL_PATH)
        self._journal_lines = 0
        self._journal_failed = False  # an append failed: the next change rewrites the document
        if raw is None:
            self._cluster_id = _new_cluster_id()
            self._compact()
        else:
            document = json.loads(raw)
            self._cluster_id = document["cluster_id"]
            for name, entry in document["topics"].items():
                self._apply({"topic": {"name": name, **entry}})
            self._replay_journal()
        block = storage.read_all(self.PRODUCER_IDS_PATH)
        self._producer_id_end = int(block.decode().strip()) if block else 0

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def live(self) -> bool:
        return True  # no lease to lose: this node's registration cannot expire

    # -- the topic catalog, as TopicManager writes it (synchronously, after the logs exist) ---

    def topics(self) -> dict[str, TopicRecord]:
        return {name: versioned.value for name, versioned in self.view.topics.items()}

    def put_topic(self, record: TopicRecord) -> None:
        """Records the topic (new, grown or reconfigured). Raises OSError when the document
        cannot be written; the view has the change either way (TopicManager undoes it)."""
        self.view.topics[record.name] = Versioned(record, self._next_revision())
        self.view.notify(("topic", record.name))
        self._record({"topic": _topic_entry(record)})

    def remove_topic(self, name: str) -> None:
        self.view.topics.pop(name, None)
        for key in [key for key in self.view.partitions if key[0] == name]:
            del self.view.partitions[key]
        self._next_revision()
        self.view.notify(("topic", name))
        self._record({"removed": name})

    def lead(self, topic: str, index: int, leader_epoch: int) -> None:
        """This node leads the partition at `leader_epoch`: its log is open."""
        node = self.node_id
        state = PartitionState((node,), node, leader_epoch, (node,))
        self.view.partitions[(topic, index)] = Versioned(state, self._next_revision())
        self.view.notify(("partition", f"{topic}/{index}"))

    def reserve_producer_ids(self, size: int) -> int:
        """Moves the producer id counter on by `size`, persisted before it returns where the
        counter was (OSError, nothing reserved, when it cannot be written)."""
        start = self._producer_id_end
        self.storage.write_atomic(self.PRODUCER_IDS_PATH, f"{start + size}\n".encode())
        self._producer_id_end = start + size
        return start

    # -- the rest of the metadata interface ---------------------------------------------------

    async def start(self) -> None:
        pass  # everything was read at construction

    async def close(self) -> None:
        self._journal.close()  # (every write was already durable when it returned)

    async def register(self, broker: BrokerRegistration) -> None:
        self.view.brokers = {broker.node_id: broker}
        self._next_revision()
        self.view.notify(("broker", str(broker.node_id)))

    async def campaign(self) -> Controller:
        assert self.view.controller is not None  # (set at construction, never taken away)
        return self.view.controller

    async def resign(self) -> None:
        pass  # a single node stays its own controller: nobody else could take over

    async def create_topic(self, spec: TopicRecord, states: dict[int, PartitionState]) -> bool:
        if spec.name in self.view.topics:
            return False
        self.put_topic(spec)
        self._put_states(spec.name, states)
        return True

    async def delete_topic(self, name: str) -> bool:
        if name not in self.view.topics:
            return False
        self.remove_topic(name)
        return True

    async def update_topic(
        self, record: TopicRecord, revision: int, states: dict[int, PartitionState] | None = None
    ) -> bool:
        current = self.view.topics.get(record.name)
        if current is None or current.revision != revision:
            return False
        self.put_topic(record)
        self._put_states(record.name, states or {})
        return True

    async def allocate_producer_ids(self, size: int) -> int:
        return self.reserve_producer_ids(size)

    async def compare_and_set(
        self,
        topic: str,
        index: int,
        state: PartitionState,
        revision: int,
        controller_epoch: int | None = None,
    ) -> Versioned[PartitionState] | None:
        current = self.view.partitions.get((topic, index))
        if (0 if current is None else current.revision) != revision:
            return None
        if controller_epoch is not None and controller_epoch != CONTROLLER_EPOCH:
            return None
        written = Versioned(state, self._next_revision())
        self.view.partitions[(topic, index)] = written
        self.view.notify(("partition", f"{topic}/{index}"))
        return written

    def _put_states(self, topic: str, states: dict[int, PartitionState]) -> None:
        for index, state in states.items():
            self.view.partitions[(topic, index)] = Versioned(state, self._next_revision())
            self.view.notify(("partition", f"{topic}/{index}"))

    def _next_revision(self) -> int:
        self.view.revision += 1
        return self.view.revision

    # -- what lasts: the document and the journal --------------------------------------------

    def _apply(self, change: dict[str, Any]) -> None:
        """A change as the document or the journal has it, to the view (at load)."""
        if "removed" in change:
            self.view.topics.pop(change["removed"], None)
            return
        entry = change["topic"]
        record = TopicRecord(
            name=entry["name"],
            topic_id=uuid.UUID(entry["id"]),
            partitions=entry["partitions"],
            configs=dict(entry.get("configs", {})),
            internal=entry.get("internal", False),
        )
        self.view.topics[record.name] = Versioned(record, self._next_revision())

    def _replay_journal(self) -> None:
        """Applies the journal's whole lines; a torn last line (a crash amid its append, so
        never acknowledged) is cut off."""
        raw = self._journal.read(0, self._journal.size)
        valid = 0
        for line in raw.split(b"\n")[:-1]:  # (the part after the last newline is torn)
            try:
                change = json.loads(line)
            except ValueError:
                break
            self._apply(change)
            self._journal_lines += 1
            valid += len(line) + 1
        if valid < len(raw):
            log.warning("%s: a torn last change (%d bytes) dropped", self.JOURNAL_PATH,
                        len(raw) - valid)  # fmt: skip
            self._journal.truncate(valid)

    def _record(self, change: dict[str, Any]) -> None:
        """Makes a change of the view durable before it returns (OSError if it cannot)."""
        if self._journal_failed or self._journal_lines >= max(COMPACT_AT, len(self.view.topics)):
            self._compact()
            return
        try:
            self._journal.append((json.dumps(change, separators=(",", ":")) + "\n").encode())
            self._journal.sync()
        except OSError:
            self._journal_failed = True
            raise
        self._journal_lines += 1

    def _compact(self) -> None:
        """Rewrites the document from the view and empties the journal (a fresh file: the old
        one may refuse appends after a failed one). Cut short by an error, it is done again
        at the next change."""
        self._journal_failed = True
        document = {
            "version": 1,
            "cluster_id": self._cluster_id,
            "topics": {
                name: {k: v for k, v in _topic_entry(versioned.value).items() if k != "name"}
                for name, versioned in self.view.topics.items()
            },
        }
        self.storage.write_atomic(self.PATH, json.dumps(document, indent=1).encode())
        self._journal.close()
        self.storage.remove(self.JOURNAL_PATH)
        self._journal = self.storage.open_append(self.JOURNAL_PATH)
        self._journal_lines = 0
        self._journal_failed = False


def _topic_entry(record: TopicRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "id": str(record.topic_id),
        "partitions": record.partitions,
        "configs": record.configs,
        "internal": record.internal,
    }


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
