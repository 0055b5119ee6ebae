# The single-node engine of cluster metadata (cluster id, topics, their ids, partition counts
# and config overrides): one JSON document replaced atomically on every change.
from __future__ import annotations

import json
import uuid

from lockgate.cluster.metadata import TopicRecord
from lockgate.storage.engine import StorageEngine


class LocalMetadataStore:
    PATH = "cluster-metadata.json"

    def __init__(self, storage: StorageEngine) -> None:
        self.storage = storage
        raw = storage.read_all(self.PATH)
        if raw is None:
            self._cluster_id = _new_cluster_id()
            self._topics: dict[str, TopicRecord] = {}
            self._save()
            return
        document = json.loads(raw)
        self._cluster_id = document["cluster_id"]
        self._topics = {
            name: TopicRecord(
                name=name,
                topic_id=uuid.UUID(entry["id"]),
                partitions=entry["partitions"],
                configs=dict(entry.get("configs", {})),
                internal=entry.get("internal", False),
            )
            for name, entry in document["topics"].items()
        }

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def topics(self) -> dict[str, TopicRecord]:
        return dict(self._topics)

    def put_topic(self, record: TopicRecord) -> None:
        self._topics[record.name] = record
        self._save()

    def remove_topic(self, name: str) -> None:
        self._topics.pop(name, None)
        self._save()

    def _save(self) -> None:
        document = {
            "version": 1,
            "cluster_id": self._cluster_id,
            "topics": {
                t.name: {
                    "id": str(t.topic_id),
                    "partitions": t.partitions,
                    "configs": t.configs,
                    "internal": t.internal,
                }
                for t in self._topics.values()
            },
        }
        self.storage.write_atomic(self.PATH, json.dumps(document, indent=1).encode())


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
