# A partition leader's questions to the transaction coordinator of a transactional id when
# that coordinator is another broker (Kafka's AddPartitionsToTxnManager, KIP-890): before a
# producer's first transactional batch of a transaction is appended to a partition, the leader
# asks whether the partition is in the open transaction (AddPartitionsToTxn v4+, VerifyOnly),
# or with TV2 (Produce v12+) has it added. Questions asked in one turn of the event loop go
# to each coordinator in one request. A batch behind a question waits for it
# (log/append_order.py).
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from lockgate.client.errors import KafkaError
from lockgate.client.security import ClientSecurity
from lockgate.cluster.membership import Membership
from lockgate.cluster.peers import PeerConnections
from lockgate.coordinator.txn.log import partition_for
from lockgate.coordinator.txn.metadata import TopicPartition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

FIRST_BATCHED_VERSION = 4  # v4+: sent by brokers, several transactions, VerifyOnly
# A transaction check that may pass on another try (the coordinator is busy, loading, moving
# or away): Produce answers NOT_ENOUGH_REPLICAS, TxnOffsetCommit COORDINATOR_NOT_AVAILABLE,
# both retried by every client version.
RETRIABLE_VERIFICATION = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.request_timed_out,
    }
)
REQUEST_TIMEOUT_MS = 30_000
LOG_INTERVAL_S = 10.0

# (transactional id, producer id, epoch, add) → the partitions asked about, with their askers
_Question = tuple[str, int, int, bool]


@dataclass(slots=True)
class _Pending:
    questions: dict[_Question, dict[TopicPartition, list[asyncio.Future[ErrorCode]]]] = field(
        default_factory=dict
    )


class TxnVerifier:
    def __init__(
        self,
        node_id: int,
        view: Membership,
        topics: TopicManager,
        security: ClientSecurity | None,
    ) -> None:
        self.node_id = node_id
        self.view = view  # who leads each __transaction_state partition, and where they are
        self.topics = topics  # (__transaction_state's partition count places an id)
        self.peers = PeerConnections(
            view, security, f"lockgate-txn-verify-{node_id}", REQUEST_TIMEOUT_MS
        )
        self._pending: dict[int, _Pending] = {}
        self._sends: set[asyncio.Task[None]] = set()
        self._last_log = -LOG_INTERVAL_S

    def coordinator(self, transactional_id: str) -> int | None:
        """The broker leading the id's partition of __transaction_state, per the view."""
        record = self.topics.topics.get(TRANSACTION_STATE_TOPIC)
        if record is None:
            return None
        state = self.view.partition(
            TRANSACTION_STATE_TOPIC, partition_for(transactional_id, record.partitions)
        )
        return None if state is None or state.leader < 0 else state.leader

    async def ask(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
        add: bool,
        timeout_s: float,
    ) -> ErrorCode:
        """The coordinator's answer for the partition: NONE, its error, or the retriable
        COORDINATOR_NOT_AVAILABLE (no coordinator, unreachable) / REQUEST_TIMED_OUT."""
        node = self.coordinator(transactional_id)
        if node is None:
            return ErrorCode.coordinator_not_available
        if node == self.node_id:  # ours by the view, not loaded here yet
            return ErrorCode.not_coordinator
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        pending = self._pending.get(node)
        if pending is None:
            pending = self._pending[node] = _Pending()
            asyncio.get_running_loop().call_soon(self._flush, node)
        question = (transactional_id, producer_id, producer_epoch, add)
        pending.questions.setdefault(question, {}).setdefault(partition, []).append(future)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            return ErrorCode.request_timed_out

    def _flush(self, node: int) -> None:
        pending = self._pending.pop(node, None)
        if pending is None:
            return
        # a request names each transactional id once: a second question about an id (another
        # epoch, or verify and add) goes in a second request
        requests: list[dict[str, _Question]] = []
        for question in pending.questions:
            slot = next((r for r in requests if question[0] not in r), None)
            if slot is None:
                requests.append(slot := {})
            slot[question[0]] = question
        for request in requests:
            task = asyncio.get_running_loop().create_task(
                self._send(node, {q: pending.questions[q] for q in request.values()})
            )
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(
        self,
        node: int,
        questions: dict[_Question, dict[TopicPartition, list[asyncio.Future[ErrorCode]]]],
    ) -> None:
        try:
            answers = await self._request(node, questions)
        except (KafkaError, OSError, TimeoutError) as exc:
            self._report(node, str(exc) or type(exc).__name__)
            answers = {}
            failure = ErrorCode.coordinator_not_available
        else:
            failure = ErrorCode.unknown_server_error  # an answer that left a partition out
        for question, partitions in questions.items():
            for partition, futures in partitions.items():
                code = answers.get((question[0], partition), failure)
                for future in futures:
                    if not future.done():
                        future.set_result(code)

    async def _request(
        self,
        node: int,
        questions: dict[_Question, dict[TopicPartition, list[asyncio.Future[ErrorCode]]]],
    ) -> dict[tuple[str, TopicPartition], ErrorCode]:
        connection = await self.peers.get(node)
        version = connection.version_for(
            ApiKey.ADD_PARTITIONS_TO_TXN, min_version=FIRST_BATCHED_VERSION
        )
        transactions = []
        for (transactional_id, producer_id, epoch, add), partitions in questions.items():
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            transactions.append(
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "verify_only": not add,
                    "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
                }
            )
        response = await connection.request(
            ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": transactions}, version=version
        )
        if response.error_code:
            code = ErrorCode(response.error_code)
            return {
                (q[0], partition): code for q, partitions in questions.items()
                for partition in partitions
            }  # fmt: skip
        return {
            (str(txn.transactional_id), (str(topic.name), int(p.partition_index))): ErrorCode(
                p.partition_error_code
            )
            for txn in response.results_by_transaction
            for topic in txn.topic_results
            for p in topic.results_by_partition
        }

    def _report(self, node: int, reason: str) -> None:
        """One line per interval: every produce of a new transaction asks while it is away."""
        now = asyncio.get_running_loop().time()
        if now - self._last_log >= LOG_INTERVAL_S:
            self._last_log = now
            log.warning("cannot ask transaction coordinator %d (%s); producers retry", node, reason)

    async def close(self) -> None:
        for task in list(self._sends):
            task.cancel()
        await self.peers.close()
