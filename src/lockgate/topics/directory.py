# Topics and their partitions: creation, deletion, partition growth, config changes, and the
# partitions' logs. Owns every Partition object; handlers reach partitions only through here.
#
# Invariant: a topic (or a partition count) is recorded in the metadata store only after all
# its partitions' directories and files exist. When storage refuses one of them, the ones
# already made are removed and the request gets KAFKA_STORAGE_ERROR: nothing is half-recorded,
# and a restart finds either the whole topic or none of it (orphan directories of a crash in
# between are removed at load).
#
# A topic that leaves (deleted here, or learnt from the cluster metadata) is announced to the
# deletion listeners with its id and name as soon as it is unknown here, before its logs are
# set aside: the coordinators drop what they hold of it (committed offsets, share state), as
# Kafka's do on a metadata update that deletes a topic.
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from lockgate.cluster.metadata import TopicCatalog, TopicRecord
from lockgate.config.log import LogConfig
from lockgate.config.properties import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    check_remote_change,
    check_topic,
    check_value,
)
from lockgate.log.epochs import LeaderEpochCache
from lockgate.log.partition import EPOCH_CHECKPOINT, Partition, partition_dir
from lockgate.log.steps import STEP_S, Pace, Steps, run
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.engine import StorageEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC

log = logging.getLogger(__name__)

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def validate_topic_name(name: str) -> None:
    if name in (".", "..") or not _LEGAL_NAME.match(name):
        raise KafkaProtocolError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-] and not '.' or '..'",
        )


TERM_FILE = "leader-term"  # how many times this single node has started (see _next_term)


class TopicDeletionListener(Protocol):
    """Told of a topic that is gone (its id and name), synchronously, once it is unknown
    here; it must not raise (what it writes, it writes in the background)."""

    def __call__(self, topic_id: uuid.UUID, name: str) -> object: ...


class TopicManager:
    def __init__(
        self,
        storage: StorageEngine,
        store: TopicCatalog,
        config: BrokerConfig,
        clock_ms: Callable[[], int],
    ) -> None:
        self.storage = storage
        self.store = store
        self.config = config
        self.clock_ms = clock_ms
        self.topics: dict[str, TopicRecord] = {}
        self.by_id: dict[uuid.UUID, TopicRecord] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}  # those open
        # registered and led at start, opened by `opening` or on first use: key -> leader epoch
        self._pending: dict[tuple[str, int], int] = {}
        self._log_configs: dict[str, LogConfig] = {}
        self._busy: set[str] = set()  # topics whose partitions are being created or deleted
        # deleted topics with a directory that could be neither set aside nor removed: their
        # names stay taken (the old records must not come back as a new topic's) until the
        # next start removes the directories as orphans
        self._stuck: set[str] = set()
        self.clean_start = False  # the broker's last stop was a clean shutdown
        self.step_s = STEP_S  # what opening, creating or deleting partitions holds the loop for
        self.deletion_listeners: list[TopicDeletionListener] = []

    def load(self, clean: bool = False) -> None:
        """Registers every partition and leads it at once, in the epoch after the last one its
        checkpoint holds; its log opens later, in `opening`'s background steps or at its first
        use (get), so that a broker with thousands of partitions serves within a second of its
        start. `clean`: the broker's last stop was a clean shutdown."""
        self.clean_start = clean
        term = self._next_term()
        for record in self.store.topics().values():
            self._register(record)
            for index in range(record.partitions):
                path = f"{partition_dir(record.name, index)}/{EPOCH_CHECKPOINT}"
                epoch = max(LeaderEpochCache(self.storage, path).latest_epoch + 1, term)
                self._pending[(record.name, index)] = epoch
                self.store.lead(record.name, index, epoch)
        self._remove_orphans()

    def _next_term(self) -> int:
        """This start's number, one more than the last start's, written (one fsync) before any
        partition is led in it. Every partition's epoch at a start is at least the term: a
        partition writes a term's epoch only with its first append there (Partition.load), and
        the term keeps its epochs growing from start to start all the same."""
        raw = self.storage.read_all(TERM_FILE)
        term = int(raw) + 1 if raw is not None and raw.strip().isdigit() else 1
        try:
            self.storage.write_atomic(TERM_FILE, f"{term}\n".encode())
        except OSError as exc:  # a full disk: the next start may take this number again
            log.warning("%s not written (%s): leader epochs may repeat after a restart",
                        TERM_FILE, exc)  # fmt: skip
        return term

    @property
    def pending(self) -> int:
        """Partitions led whose logs are not open yet."""
        return len(self._pending)

    @property
    def unverified(self) -> bool:
        """Whether logs left by a crash are still unopened (their tails not checked yet): a
        clean-shutdown mark written now would vouch for them."""
        return not self.clean_start and bool(self._pending)

    def opening(self) -> Steps[int]:
        """Opens the pending partitions in steps of `step_s` (first uses open others
        meanwhile); how many it opened."""
        pace = Pace(self.step_s)
        opened = 0
        for key in list(self._pending):
            if key in self._pending:  # (not opened by its first use meanwhile)
                self._open_pending(key)
                opened += 1
                yield from pace.pause()
        return opened

    def _open_pending(self, key: tuple[str, int]) -> Partition:
        epoch = self._pending.pop(key)
        name, index = key
        try:
            partition = self._load_partition(
                self.topics[name], index, self.clock_ms(), self.clean_start, epoch=epoch
            )
        except OSError as exc:
            self._pending[key] = epoch  # the next use tries again
            raise _storage_error(f"opening {name}-{index}", exc) from exc
        self.partitions[key] = partition
        return partition

    def _remove_orphans(self) -> None:
        """Removes partition directories no topic owns: leftovers of a crash during DeleteTopics
        (the metadata change is made first) or of a partially deleted directory."""
        for name in self.storage.list_dir(""):
            match = _PARTITION_DIR.match(name)
            owned = match is not None and (
                (key := (match.group(1), int(match.group(2)))) in self.partitions
                or key in self._pending
            )
            if name.endswith(".deleted") or (match and not owned):
                log.warning("removing %s: no topic owns it", name)
                self.storage.remove_tree(name)

    def _register(self, record: TopicRecord) -> None:
        self.topics[record.name] = record
        self.by_id[record.topic_id] = record
        self._log_configs[record.name] = self._log_config(record, record.configs)

    def _log_config(self, record: TopicRecord, configs: Mapping[str, str]) -> LogConfig:
        config = self.config.log_config(configs)
        if not record.internal:
            return config
        if record.name == SHARE_GROUP_STATE_TOPIC:
            # Kafka's: deleted, never compacted, kept forever; the share coordinator deletes
            # the records below those still needed (DeleteRecords)
            segment_bytes = self.config.integer("share.coordinator.state.topic.segment.bytes")
            return replace(config, delete_policy=True, compact=False, retention_ms=-1,
                           retention_bytes=-1, segment_bytes=segment_bytes)  # fmt: skip
        # compacted, never trimmed, with Kafka's smaller segments so that cleaning can start
        segment_bytes = self.config.integer(
            "offsets.topic.segment.bytes"
            if record.name == CONSUMER_OFFSETS_TOPIC
            else "transaction.state.log.segment.bytes"
        )
        return replace(config, delete_policy=False, compact=True, segment_bytes=segment_bytes)

    def _load_partition(
        self,
        record: TopicRecord,
        index: int,
        now_ms: int,
        clean: bool = False,
        new_epoch: bool = True,
        epoch: int | None = None,
    ) -> Partition:
        name = record.name
        partition = Partition(
            self.storage, name, index, record.topic_id, lambda: self._log_configs[name]
        )
        try:
            partition.load(now_ms, clean, new_epoch, epoch)
        except OSError:
            for segment in partition.segments:
                segment.close()
            raise
        return partition

    def _create_partitions(
        self, record: TopicRecord, indexes: range, now_ms: int
    ) -> Steps[list[Partition]]:
        """Creates the partitions' files, or none of them: on a storage error (or when the
        creation is abandoned at a step) the directories made so far are removed, and a storage
        error is KAFKA_STORAGE_ERROR."""
        created: list[Partition] = []
        pace = Pace(self.step_s)
        try:
            for index in indexes:
                created.append(self._load_partition(record, index, now_ms))
                yield from pace.pause()
        except OSError as exc:
            self._discard(record.name, created, indexes.start + len(created) + 1, indexes.start)
            raise _storage_error(f"creating partitions of {record.name}", exc) from None
        except GeneratorExit:  # abandoned (the broker stops): as if never begun
            self._discard(record.name, created, indexes.start + len(created), indexes.start)
            raise
        return created

    def _discard(self, name: str, created: list[Partition], end: int, start: int) -> None:
        for partition in created:
            for segment in partition.segments:
                segment.close()
        for index in range(start, end):
            self.storage.remove_tree(partition_dir(name, index))

    # -- cluster mode: the metadata store decides, this broker follows --------------------------

    def apply_record(self, record: TopicRecord) -> None:
        """A topic as the cluster metadata has it now (new, or its configs changed)."""
        known = self.topics.get(record.name)
        if known is None or known.topic_id != record.topic_id:
            if known is not None:  # deleted and created again meanwhile
                self.forget(known)
            self._register(replace(record, configs=dict(record.configs)))  # not the view's
        elif known.configs != record.configs or known.partitions != record.partitions:
            known.configs, known.partitions = dict(record.configs), record.partitions
            self._log_configs[record.name] = self._log_config(known, known.configs)

    def open_replica(self, name: str, index: int) -> Partition:
        """This broker's replica of a partition: its log as on disk, in no epoch of its own
        (the leader epoch comes from the cluster metadata)."""
        partition = self.partitions.get((name, index))
        if partition is None:
            record = self.topics[name]
            partition = self._load_partition(
                record, index, self.clock_ms(), self.clean_start, new_epoch=False
            )
            self.partitions[(name, index)] = partition
        return partition

    # -- queries -------------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        return self._log_configs[topic]

    def refresh_log_configs(self) -> None:
        """Re-resolves every topic's log settings: a broker default changed at run time."""
        for name, record in self.topics.items():
            self._log_configs[name] = self._log_config(record, record.configs)

    def get(self, topic: str, index: int) -> Partition | None:
        """The partition's log, if this broker has a replica of it (opened now if it was
        still pending: KAFKA_STORAGE_ERROR if storage refuses)."""
        partition = self.partitions.get((topic, index))
        if partition is None and (topic, index) in self._pending:
            partition = self._open_pending((topic, index))
        return partition

    def compacted(self) -> list[Partition]:
        """The open partitions of compacted topics (what the log cleaner looks at: a walk of
        every partition's config took ~50 ms at 10,000 partitions, each cleaner round)."""
        found = []
        for name, config in self._log_configs.items():
            record = self.topics.get(name)  # (none yet while its partitions are created)
            if config.compact and record is not None:
                for index in range(record.partitions):
                    partition = self.partitions.get((name, index))
                    if partition is not None:
                        found.append(partition)
        return found

    def exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists (in a cluster: anywhere, not only here)."""
        record = self.topics.get(topic)
        return record is not None and 0 <= index < record.partitions

    def resolved_configs(self, topic: str) -> dict[str, str]:
        return self.config.resolve_topic(self.topics[topic].configs)

    # -- changes -------------------------------------------------------------------------------

    def check_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        """A topic's overrides normalised, or INVALID_CONFIG with Kafka's message: unknown
        names, values, then the rules across the topic's effective configs."""
        unknown = [name for name in configs if name not in TOPIC_CONFIGS]
        if unknown:
            raise KafkaProtocolError(
                ErrorCode.invalid_config, f"Unknown topic config name: {unknown[0]}"
            )
        checked = {}
        for name, value in configs.items():
            if value is None:
                raise KafkaProtocolError(ErrorCode.invalid_config, f"{name} has a null value")
            try:
                checked[name] = check_value(TOPIC_CONFIGS[name], value)
            except ConfigError as exc:
                raise KafkaProtocolError(ErrorCode.invalid_config, str(exc)) from None
        try:
            check_topic(
                self.config.resolve_topic(checked),
                self.config.flag("remote.log.storage.system.enable"),
            )
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.invalid_config, str(exc)) from None
        return checked

    def new_record(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str | None],
        internal: bool = False,
    ) -> TopicRecord:
        """A new topic's record, every part of the request checked (-1: num.partitions)."""
        validate_topic_name(name)
        if name in self.topics or name in self._busy or name in self._stuck:
            if name in self._stuck:
                being = (" was deleted but a directory of it could not be removed: the name is"
                         " free again after the next start")  # fmt: skip
            elif name in self._busy:
                being = " is being created or deleted"
            else:
                being = " already exists"
            raise KafkaProtocolError(ErrorCode.topic_already_exists, f"topic {name!r}{being}")
        if partitions == -1:
            partitions = self.config.integer("num.partitions")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise KafkaProtocolError(
                ErrorCode.invalid_partitions,
                f"partition count {partitions} is not in 1..{MAX_PARTITIONS}",
            )
        return TopicRecord(name, uuid.uuid4(), partitions, self.check_configs(configs), internal)

    def replication_factor(self, requested: int) -> int:
        return self.config.integer("default.replication.factor") if requested == -1 else requested

    def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicRecord:
        """Creates a topic at once (auto-creation and internal topics: callers that must not
        yield to the event loop meanwhile)."""
        return run(
            self.creating(name, partitions, replication_factor, configs, validate_only, internal)
        )

    def creating(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        internal: bool = False,
    ) -> Steps[TopicRecord]:
        """Creates a topic in steps of `step_s` each (an admin request gives the event
        loop back between them: a topic of 1,000 partitions held it for most of a second). Its
        name is taken from the first step, so a second creation of it meanwhile is refused."""
        record = self.new_record(name, partitions, configs, internal)
        replication_factor = self.replication_factor(replication_factor)
        if replication_factor != 1:
            raise KafkaProtocolError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        if validate_only:
            return record
        partitions, checked = record.partitions, record.configs
        now = self.clock_ms()
        self._log_configs[name] = self._log_config(record, record.configs)
        self._busy.add(name)
        try:
            created = yield from self._create_partitions(record, range(partitions), now)
            try:
                self.store.put_topic(record)
            except OSError as exc:
                with contextlib.suppress(OSError):  # the in-memory store forgets it either way
                    self.store.remove_topic(name)
                self._discard(name, created, partitions, 0)
                raise _storage_error(f"recording topic {name}", exc) from None
        except BaseException:  # refused, or abandoned at a step
            del self._log_configs[name]
            raise
        finally:
            self._busy.discard(name)
        self._register(record)
        for index, partition in enumerate(created):
            self.partitions[(name, index)] = partition
            self.store.lead(name, index, partition.leader_epoch)
        log.info("created topic %s with %d partitions %s", name, partitions, checked or "")
        return record

    def deletable(self, name: str) -> TopicRecord:
        record = self.topics.get(name)
        if record is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if record.internal:
            raise KafkaProtocolError(ErrorCode.invalid_topic_exception, f"{name} is internal")
        return record

    def deleting(self, name: str) -> Steps[tuple[TopicRecord, list[str]]]:
        """Deletes a topic in steps of `step_s` each: at once its record and every
        partition (from then on unknown to requests), then their logs closed and directories
        renamed aside, which are returned for the caller to remove off the event loop
        (removing 1,000 of them held it for seconds). Until the last is renamed, no topic of
        that name can be created in their place."""
        record = self.deletable(name)
        self.store.remove_topic(name)
        self._busy.add(name)
        try:
            trash = yield from self._forgetting(record)
        finally:
            self._busy.discard(name)
        log.info("deleted topic %s", name)
        return record, trash

    def forget(self, record: TopicRecord) -> None:
        """Drops a deleted topic and its partitions held here at once, their directories
        renamed aside and removed in a worker thread when an event loop runs (a crash's
        renamed ones are removed at the next start)."""
        trash = run(self._forgetting(record))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a tool, or a test)
            self.remove(trash)
            return
        loop.run_in_executor(None, self._remove_logged, trash)

    def _remove_logged(self, trash: list[str]) -> None:
        try:
            self.remove(trash)
        except OSError as exc:
            log.warning("removing %d deleted partition directories: %s", len(trash), exc)

    def _forgetting(self, record: TopicRecord) -> Steps[list[str]]:
        name = record.name
        del self.topics[name]
        del self.by_id[record.topic_id]
        del self._log_configs[name]
        self._announce_deletion(record)
        held = []
        for index in range(record.partitions):
            partition = self.partitions.pop((name, index), None)
            if partition is not None or self._pending.pop((name, index), None) is not None:
                held.append((index, partition))  # (else cluster mode: no replica of it here)
        trash: list[str] = []
        left = iter(held)
        pace = Pace(self.step_s)
        try:
            for index, partition in left:
                self._set_aside(record, index, partition, trash)
                yield from pace.pause()
        finally:  # stopped meanwhile: the rest at once, no partition is left half deleted
            for index, partition in left:
                self._set_aside(record, index, partition, trash)
        return trash

    def _announce_deletion(self, record: TopicRecord) -> None:
        for listener in self.deletion_listeners:
            try:
                listener(record.topic_id, record.name)
            except Exception:  # (a listener's bug must not leave the topic half forgotten)
                log.exception("topic %s: a deletion listener failed", record.name)

    def _set_aside(
        self, record: TopicRecord, index: int, partition: Partition | None, trash: list[str]
    ) -> None:
        if partition is not None:
            partition.close(snapshot=False)  # (its producer state goes with it)
        directory = partition_dir(record.name, index)
        aside = f"{directory}.{record.topic_id.hex}.deleted"
        try:
            self.storage.rename(directory, aside)
        except OSError as exc:  # the deletion is recorded already: it stands
            try:
                self.storage.remove_tree(directory)
            except OSError as again:
                self._stuck.add(record.name)
                log.error("deleted topic %s: %s could not be set aside (%s) nor removed (%s); "
                          "it stays until the next start, and so does the name", record.name,
                          directory, exc, again)  # fmt: skip
            else:
                log.error("deleted topic %s: %s could not be set aside (%s): removed in place",
                          record.name, directory, exc)  # fmt: skip
            return
        trash.append(aside)

    def remove(self, trash: list[str]) -> None:
        """Removes directories a deletion renamed aside (thread-safe: nothing else uses them)."""
        for directory in trash:
            self.storage.remove_tree(directory)

    def growable(self, name: str, count: int) -> TopicRecord:
        record = self.topics.get(name)
        if record is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if count <= record.partitions:
            raise KafkaProtocolError(
                ErrorCode.invalid_partitions,
                f"topic {name} has {record.partitions} partitions; the new count must be larger",
            )
        if count > MAX_PARTITIONS:
            raise KafkaProtocolError(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS}")
        return record

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        record = self.growable(name, count)
        if validate_only:
            return
        old = record.partitions
        now = self.clock_ms()
        created = run(self._create_partitions(record, range(old, count), now))
        record.partitions = count
        try:
            self.store.put_topic(record)
        except OSError as exc:
            record.partitions = old
            with contextlib.suppress(OSError):  # the in-memory store is right either way
                self.store.put_topic(record)
            self._discard(name, created, count, old)
            raise _storage_error(f"recording {count} partitions of {name}", exc) from None
        for index, partition in enumerate(created, start=old):
            self.partitions[(name, index)] = partition
            self.store.lead(name, index, partition.leader_epoch)
        log.info("topic %s grew from %d to %d partitions", name, old, count)

    def altered_configs(
        self, name: str, set_values: Mapping[str, str], delete: list[str]
    ) -> tuple[TopicRecord, dict[str, str]]:
        """The topic and its configs after the change, every part of it checked."""
        record = self.topics.get(name)
        if record is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        for key in delete:
            if key not in TOPIC_CONFIGS:
                raise KafkaProtocolError(
                    ErrorCode.invalid_config, f"Unknown topic config name: {key}"
                )
        configs = {k: v for k, v in record.configs.items() if k not in delete}
        configs.update(set_values)
        checked = self.check_configs(configs)
        try:
            check_remote_change(
                self.config.resolve_topic(record.configs), self.config.resolve_topic(checked)
            )
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.invalid_config, str(exc)) from None
        return record, checked

    def alter_configs(
        self, name: str, set_values: Mapping[str, str], delete: list[str], validate_only: bool
    ) -> None:
        record, configs = self.altered_configs(name, set_values, delete)
        if validate_only:
            return
        record.configs = configs
        self.store.put_topic(record)
        self._log_configs[name] = self._log_config(record, configs)
        log.info("topic %s configs are now %s", name, configs)

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.close()


def _storage_error(what: str, exc: OSError) -> KafkaProtocolError:
    """Kafka answers a log directory failure during topic creation with KAFKA_STORAGE_ERROR."""
    log.error("%s failed, nothing recorded: %s", what, exc)
    return KafkaProtocolError(ErrorCode.kafka_storage_error, f"{what}: {exc}")
