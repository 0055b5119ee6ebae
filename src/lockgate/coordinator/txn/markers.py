# The transaction coordinator's COMMIT/ABORT markers in a cluster, where other brokers lead the
# transaction's partitions (Kafka's TransactionMarkerChannelManager): one WriteTxnMarkers per
# leader broker carrying all its partitions, sent to every leader at once, over one connection
# per broker kept between calls. Each round re-reads the leaders from the view (leadership
# moves); a partition is retried until its leader has written the marker and its ISR has it,
# until an answer says it can never be written (reported to the caller), or until its topic
# is deleted (nothing is left to mark). Only the caller's cancellation ends the retries early.
# Partitions led by this broker are written in-process (replication/markers.py, what
# WriteTxnMarkers runs), on a single node every one of them: both modes take this one path.
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockgate.client.errors import KafkaError, UnsupportedVersionError
from lockgate.client.security import ClientSecurity
from lockgate.cluster.membership import Membership
from lockgate.cluster.metadata import NO_LEADER
from lockgate.cluster.peers import PeerConnections
from lockgate.coordinator.txn.metadata import TopicPartition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.replication.markers import Marker, append_marker, commit_errors
from lockgate.replication.writer import PartitionWriter
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

# Answers that may change on another try: a moved or not yet elected leader, a small ISR, a
# leader whose disk or whose followers are slow. UNKNOWN_TOPIC_OR_PARTITION joins them while
# the topic exists here (the leader's view may lag this broker's).
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 1.0
# Longer than the leader waits for its ISR (WriteTxnMarkers answers REQUEST_TIMED_OUT after
# 30 s), so that its answer arrives before the connection gives up and is closed.
REQUEST_TIMEOUT_MS = 40_000
TV1_VERSION = 1
TV2_VERSION = 2  # carries transaction_version, for the leader's stricter epoch check


@dataclass(slots=True)
class _Delivery:
    """One `write` call: the marker, what is left of it, and what was already logged."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    tv2: bool
    refused: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        kind = "COMMIT" if self.commit else "ABORT"
        return (
            f"{kind} marker of producer {self.producer_id} epoch {self.producer_epoch} "
            f"(coordinator epoch {self.coordinator_epoch})"
        )

    def report_once(self, kind: str, level: int, message: str, *args: object) -> None:
        """One log line per kind of failure, not one per round."""
        if kind not in self.reported:
            self.reported.add(kind)
            log.log(level, "%s: " + message, self, *args)


class MarkerSender:
    def __init__(
        self,
        node_id: int,
        view: Membership,
        topics: TopicManager,
        writer: PartitionWriter,
        security: ClientSecurity | None,
    ) -> None:
        self.node_id = node_id
        self.view = view  # the partitions' leaders and the brokers' addresses
        self.topics = topics  # (a deleted topic's partitions need no marker; those led here)
        self.writer = writer  # writes the markers of the partitions led here
        self.peers = PeerConnections(
            view, security, f"lockgate-markers-{node_id}", REQUEST_TIMEOUT_MS
        )

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tv2: bool,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Returns once every partition has the marker from its current leader (acknowledged
        by its ISR), or has refused it for good, or has gone with its topic. The result holds
        the refusals (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, anything not
        retriable), already logged: the transaction is complete anyway, as in Kafka."""
        delivery = _Delivery(producer_id, producer_epoch, commit, coordinator_epoch, tv2)
        remaining = list(dict.fromkeys(partitions))
        backoff = BACKOFF_INITIAL_S
        while True:
            remaining = await self._round(delivery, remaining)
            if not remaining:
                return delivery.refused
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def close(self) -> None:
        await self.peers.close()

    # -- one round ------------------------------------------------------------------------------

    async def _round(
        self, delivery: _Delivery, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Sends to every current leader at once; returns the partitions to try again."""
        retry: list[TopicPartition] = []
        by_leader: dict[int, list[TopicPartition]] = {}
        for key in partitions:
            if self._deleted(delivery, key):
                continue
            state = self.view.partition(*key)
            if state is None or state.leader == NO_LEADER:
                delivery.report_once(
                    "no leader", logging.INFO, "%s-%d has no leader; waiting for one", *key
                )
                retry.append(key)
            else:
                by_leader.setdefault(state.leader, []).append(key)
        leaders = list(by_leader)
        answers = await asyncio.gather(
            *(self._send(delivery, leader, by_leader[leader]) for leader in leaders)
        )
        for leader, answer in zip(leaders, answers, strict=True):
            if isinstance(answer, str):
                delivery.report_once(
                    f"broker {leader}",
                    logging.INFO,
                    "cannot reach broker %d (%s); retrying",
                    leader,
                    answer,
                )
                retry.extend(by_leader[leader])
                continue
            for key, code in answer.items():
                if self._must_retry(delivery, leader, key, code):
                    retry.append(key)
        return retry

    def _deleted(self, delivery: _Delivery, key: TopicPartition) -> bool:
        if key[0] in self.topics.topics:
            return False
        delivery.report_once(
            f"deleted {key[0]}",
            logging.INFO,
            "topic %s was deleted; its partitions need no marker",
            key[0],
        )
        return True

    def _must_retry(
        self, delivery: _Delivery, leader: int, key: TopicPartition, code: ErrorCode
    ) -> bool:
        """Whether the partition must be tried again after this answer."""
        if code == ErrorCode.none:
            return False
        if code in RETRIABLE or code == ErrorCode.unknown_topic_or_partition:
            if self._deleted(delivery, key):
                return False
            delivery.report_once(
                code.name,
                logging.INFO,
                "broker %d answered %s for %s-%d; retrying",
                leader,
                code.name.upper(),
                *key,
            )
            return True
        delivery.refused[key] = code
        log.warning(
            "%s: broker %d refused it for %s-%d with %s; not retried",
            delivery,
            leader,
            *key,
            code.name.upper(),
        )
        return False

    # -- the wire -------------------------------------------------------------------------------

    async def _send(
        self, delivery: _Delivery, leader: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode] | str:
        """The leader's answer per partition, or why it could not be asked."""
        if leader == self.node_id:
            return await self._write_here(delivery, partitions)
        try:
            connection = await self.peers.get(leader)
            version = connection.version_for(
                ApiKey.WRITE_TXN_MARKERS,
                min_version=TV1_VERSION,
                max_version=TV2_VERSION if delivery.tv2 else TV1_VERSION,
            )
            response = await connection.request(
                ApiKey.WRITE_TXN_MARKERS, _request(delivery, partitions, version), version=version
            )
        except UnsupportedVersionError:
            # a leader without this version will not gain it while it runs; as in Kafka, its
            # partitions could not have had the transaction's data either
            return dict.fromkeys(partitions, ErrorCode.unsupported_version)
        except (KafkaError, OSError, TimeoutError) as exc:
            return str(exc) or type(exc).__name__
        answers = {
            (str(topic.name), int(answer.partition_index)): ErrorCode(answer.error_code)
            for marker in response.markers
            for topic in marker.topics
            for answer in topic.partitions
        }
        # a partition left out of the answer is a broken peer, not a reason to loop forever
        return {key: answers.get(key, ErrorCode.unknown_server_error) for key in partitions}

    async def _write_here(
        self, delivery: _Delivery, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        marker = Marker(delivery.producer_id, delivery.producer_epoch, delivery.commit,
                        delivery.coordinator_epoch, delivery.tv2)  # fmt: skip
        now_ms = self.writer.clock()
        answers: dict[TopicPartition, ErrorCode] = {}
        waiting: dict[TopicPartition, asyncio.Future[None]] = {}
        for key in partitions:
            written = append_marker(self.writer, self.topics.get(*key), marker, now_ms)
            if isinstance(written, ErrorCode):
                answers[key] = written
            else:
                waiting[key] = written
        errors = await commit_errors(list(waiting.values()))
        answers.update(zip(waiting, errors, strict=True))
        return answers


def _request(delivery: _Delivery, partitions: list[TopicPartition], version: int) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return {
        "markers": [
            {
                "producer_id": delivery.producer_id,
                "producer_epoch": delivery.producer_epoch,
                "transaction_result": delivery.commit,
                "topics": [{"name": t, "partition_indexes": i} for t, i in by_topic.items()],
                "coordinator_epoch": delivery.coordinator_epoch,
                "transaction_version": 2 if version >= TV2_VERSION else 0,
            }
        ]
    }
