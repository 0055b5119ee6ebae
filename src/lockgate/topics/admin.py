# Topic changes as the handlers ask for them (CreateTopics, DeleteTopics, CreatePartitions,
# config changes, auto-creation), in one interface with two engines: the single node changes
# its own files and metadata document (TopicManager does it all), a cluster broker writes the
# change to the metadata store and every broker holding a replica follows it (the
# ReplicaManager opens or removes the logs). Every check is TopicManager's, so both answer
# the same errors.
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import Protocol

from lockgate.cluster.controller import (
    AssignmentError,
    UsableBroker,
    initial_state,
    place_replicas,
)
from lockgate.cluster.metadata import MetadataStore, TopicRecord
from lockgate.log.steps import run_yielding
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

# partition index → replica broker ids, as CreateTopics / CreatePartitions name them
Assignments = Mapping[int, tuple[int, ...]]


class TopicCreator(Protocol):
    """Topic creation alone: what the coordinator locator needs to create an internal topic
    on first use."""

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        assignments: Assignments | None = None,
        internal: bool = False,
    ) -> TopicRecord: ...


class TopicAdmin(TopicCreator, Protocol):
    async def delete(self, name: str) -> TopicRecord: ...

    async def add_partitions(
        self, name: str, count: int, validate_only: bool, assignments: Assignments | None = None
    ) -> None: ...

    async def alter_configs(
        self, name: str, set_values: Mapping[str, str], delete: list[str], validate_only: bool
    ) -> None: ...


class LocalTopicAdmin:
    def __init__(self, topics: TopicManager, node_id: int) -> None:
        self.topics = topics
        self.node_id = node_id

    def _check_local(self, assignments: Assignments | None) -> None:
        if assignments and any(tuple(r) != (self.node_id,) for r in assignments.values()):
            raise KafkaProtocolError(
                ErrorCode.invalid_replica_assignment,
                f"every partition must be on broker {self.node_id} alone",
            )

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        assignments: Assignments | None = None,
        internal: bool = False,
    ) -> TopicRecord:
        self._check_local(assignments)
        # the event loop serves others between the steps; cancelled, what was made is removed
        steps = self.topics.creating(
            name, partitions, replication_factor, configs, validate_only, internal
        )
        return await run_yielding(steps)

    async def delete(self, name: str) -> TopicRecord:
        record, trash = await run_yielding(self.topics.deleting(name))
        await asyncio.to_thread(self.topics.remove, trash)
        return record

    async def add_partitions(
        self, name: str, count: int, validate_only: bool, assignments: Assignments | None = None
    ) -> None:
        self._check_local(assignments)
        self.topics.add_partitions(name, count, validate_only)

    async def alter_configs(
        self, name: str, set_values: Mapping[str, str], delete: list[str], validate_only: bool
    ) -> None:
        self.topics.alter_configs(name, set_values, delete, validate_only)


class ClusterTopicAdmin:
    """Writes topic changes to the metadata store. Replicas are placed over the registered
    brokers as Kafka's controller places them (rack-aware, by broker.rack), unless the request
    names them."""

    def __init__(self, topics: TopicManager, store: MetadataStore) -> None:
        self.topics = topics
        self.store = store

    def _placement(
        self,
        first: int,
        count: int,
        replication_factor: int,
        assignments: Assignments | None,
    ) -> dict[int, tuple[int, ...]]:
        brokers = sorted(self.store.view.brokers)
        if assignments:
            sizes = {len(r) for r in assignments.values()}
            for index, replicas in assignments.items():
                if (
                    not replicas
                    or len(set(replicas)) != len(replicas)
                    or any(r not in self.store.view.brokers for r in replicas)
                    or len(sizes) != 1
                ):
                    raise KafkaProtocolError(
                        ErrorCode.invalid_replica_assignment,
                        f"partition {index}: replicas {list(replicas)} must be distinct "
                        f"registered brokers ({brokers}), as many for every partition",
                    )
            return {first + i: tuple(r) for i, r in enumerate(assignments.values())}
        # every registered broker holds a live lease: none is fenced
        usable = [UsableBroker(b.node_id, b.rack) for b in self.store.view.brokers.values()]
        try:
            return place_replicas(usable, count, replication_factor, random.Random(), first)
        except AssignmentError as exc:
            raise KafkaProtocolError(ErrorCode.invalid_replication_factor, str(exc)) from None

    @staticmethod
    async def _write(what: str, change: Awaitable[bool]) -> bool:
        """A store write; a store that does not answer (an etcd election, a lost quorum) is
        REQUEST_TIMED_OUT, which clients retry (the change may or may not have been made,
        as with Kafka's controller)."""
        try:
            return await change
        except Exception as exc:
            log.warning("%s: the metadata store did not answer: %r", what, exc)
            raise KafkaProtocolError(ErrorCode.request_timed_out, f"{what}: {exc!r}") from None

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        assignments: Assignments | None = None,
        internal: bool = False,
    ) -> TopicRecord:
        record = self.topics.new_record(name, len(assignments) if assignments else partitions,
                                        configs, internal)  # fmt: skip
        placement = self._placement(
            0, record.partitions, self.topics.replication_factor(replication_factor), assignments
        )
        if validate_only:
            return record
        states = {index: initial_state(replicas) for index, replicas in placement.items()}
        if not await self._write(f"creating {name}", self.store.create_topic(record, states)):
            raise KafkaProtocolError(ErrorCode.topic_already_exists, f"topic {name!r} exists")
        log.info("created topic %s: %s", name,
                 {i: list(r) for i, r in placement.items()})  # fmt: skip
        return record

    async def delete(self, name: str) -> TopicRecord:
        record = self.topics.deletable(name)
        if not await self._write(f"deleting {name}", self.store.delete_topic(name)):
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        log.info("deleted topic %s", name)
        return record

    async def add_partitions(
        self, name: str, count: int, validate_only: bool, assignments: Assignments | None = None
    ) -> None:
        record = self.topics.growable(name, count)
        current = self.store.view.topics.get(name)
        if current is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        existing = self.store.view.partitions.get((name, 0))
        factor = len(existing.value.replicas) if existing else 1
        if assignments is not None and len(assignments) != count - record.partitions:
            raise KafkaProtocolError(
                ErrorCode.invalid_replica_assignment,
                f"{len(assignments)} assignments for {count - record.partitions} new partitions",
            )
        placement = self._placement(record.partitions, count - record.partitions, factor,
                                    assignments)  # fmt: skip
        if validate_only:
            return
        states = {index: initial_state(replicas) for index, replicas in placement.items()}
        grown = replace(current.value, partitions=count)
        if not await self._write(
            f"growing {name}", self.store.update_topic(grown, current.revision, states)
        ):
            raise KafkaProtocolError(
                ErrorCode.reassignment_in_progress, f"topic {name} changed meanwhile: retry"
            )

    async def alter_configs(
        self, name: str, set_values: Mapping[str, str], delete: list[str], validate_only: bool
    ) -> None:
        _record, configs = self.topics.altered_configs(name, set_values, delete)
        current = self.store.view.topics.get(name)
        if validate_only or current is None:
            return
        changed = replace(current.value, configs=configs)
        if not await self._write(
            f"changing {name}'s configs", self.store.update_topic(changed, current.revision)
        ):
            raise KafkaProtocolError(
                ErrorCode.reassignment_in_progress, f"topic {name} changed meanwhile: retry"
            )
