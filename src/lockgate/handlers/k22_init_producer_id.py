"""InitProducerId (key 22), versions 0–6.

Behaviour:
- Idempotent producers (no transactional id): a fresh producer id from the persisted allocator
  with epoch 0 (an idempotent producer may always start afresh, KIP-360).
- Transactional ids, following the transaction coordinator's rules (PROTOCOL.md): a new id
  gets a fresh producer id; ProducerId/ProducerEpoch both -1 is a new instance that bumps the
  epoch, fencing the old one; a known id/epoch bumps it (KIP-360) and a retry carrying the
  epoch from before the bump gets the same answer; an open transaction is fenced and aborted
  and the caller told CONCURRENT_TRANSACTIONS; while preparing: CONCURRENT_TRANSACTIONS;
  epoch exhaustion allocates a new producer id; an unknown producer id: PRODUCER_FENCED.
- Exactly one of ProducerId/ProducerEpoch -1: INVALID_REQUEST. Timeout ≤ 0 or above
  transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT.
- No producer id block can be persisted (disk full): COORDINATOR_LOAD_IN_PROGRESS, as Kafka
  answers while its next block is not available; clients retry.
- v6 (KIP-939): Enable2Pc marks the id's transactions two-phase (never aborted by the timeout
  task); refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless
  transaction.two.phase.commit.enable=true. KeepPreparedTxn keeps an open transaction instead
  of aborting it: the answer is a fresh id/epoch (NextProducerId/NextProducerEpoch, bumped on
  every call, a new id when the epoch would overflow) plus OngoingTxnProducerId/Epoch of the
  kept transaction, which EndTxn v5 with the fresh pair then commits or aborts. With no open
  transaction the ongoing pair is -1/-1.
- Authorization: with a transactional id, WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
  KIP-939: Enable2Pc, KeepPreparedTxn, or aborting the id's open two-phase transaction
  (force-terminate) also needs TWO_PHASE_COMMIT on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
  Without one (idempotence): IDEMPOTENT_WRITE on the cluster or, as KIP-679, WRITE on any
  topic, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v2 flexible; v3 ProducerId/ProducerEpoch (KIP-360); v4 PRODUCER_FENCED (older
versions get INVALID_PRODUCER_EPOCH); v5 may answer TRANSACTION_ABORTABLE (never needed here);
v6 Enable2Pc, KeepPreparedTxn, OngoingTxnProducerId/Epoch.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field, millis
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, authorize_any


def _answer(
    error: ErrorCode, producer_id: int = -1, epoch: int = -1, ongoing: tuple[int, int] = (-1, -1)
) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "ongoing_txn_producer_id": ongoing[0],
        "ongoing_txn_producer_epoch": ongoing[1],
    }


@handles(ApiKey.INIT_PRODUCER_ID, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    producer_id = field(request, "producer_id", -1)
    epoch = field(request, "producer_epoch", -1)
    if (producer_id == -1) != (epoch == -1):
        return _answer(ErrorCode.invalid_request)
    transactional_id = request.transactional_id
    services = ctx.services
    if transactional_id is None:
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic, allows idempotence
        if not authorize(
            ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, log_denied=False
        ) and not authorize_any(ctx, Operation.WRITE, ResourceType.TOPIC):
            authorize(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)  # logs the denial
            return _answer(ErrorCode.cluster_authorization_failed)
        try:
            return _answer(ErrorCode.none, services.producer_ids.allocate(), 0)
        except KafkaProtocolError as exc:
            return _answer(exc.code)
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _answer(ErrorCode.transactional_id_authorization_failed)
    enable_2pc = field(request, "enable2_pc", False)
    if enable_2pc and not services.config.flag("transaction.two.phase.commit.enable"):
        return _answer(ErrorCode.transactional_id_authorization_failed)
    answer = await services.transactions.init_producer_id(
        transactional_id,
        millis(request.transaction_timeout),
        producer_id,
        epoch,
        ctx.received_ms,
        enable_2pc,
        field(request, "keep_prepared_txn", False),
        lambda: authorize(
            ctx, Operation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id
        ),
    )
    if answer.error:
        return _answer(map_fenced(answer.error, ctx.api_version, 4))
    ongoing = (answer.ongoing_producer_id, answer.ongoing_producer_epoch)
    return _answer(ErrorCode.none, answer.producer_id, answer.producer_epoch, ongoing)
