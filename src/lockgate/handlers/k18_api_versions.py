"""ApiVersions (key 18), versions 0–4.

Behaviour:
- Lists every API in the handler registry with the versions lockgate serves.
- A version lockgate does not know is answered by the connection with a v0 response,
  UNSUPPORTED_VERSION and the supported ranges (KIP-511), so clients can downgrade.
- v3+: feature `transaction.version` supported 0–2 and finalized at 2: transaction version 2
  (KIP-890: epoch bump per transaction, EndTxn v5, implicit partition add on Produce v12+ and
  TxnOffsetCommit v5) works end to end, proven by tests/integration/test_transaction_version_2.py.
- v3+: feature `group.version` supported 0–1 and finalized at 1, as Kafka 4: the consumer group
  protocol (KIP-848, ConsumerGroupHeartbeat/ConsumerGroupDescribe) is served.
- v3+: feature `share.version` supported 0–1 and finalized at 1: share groups (KIP-932) are
  served. Kafka 4.4 finalizes 2, which adds the dead-letter queue (KIP-1191) that lockgate does
  not have (docs/deviations.md); clients read neither level, only the share APIs' answers.
Version notes: v3+ carries client software name/version (logged) and tagged feature fields.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HANDLERS, HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey


def supported_versions() -> list[dict[str, int]]:
    return [
        {"api_key": spec.api_key, "min_version": spec.min_version, "max_version": spec.max_version}
        for spec in sorted(HANDLERS.values(), key=lambda s: s.api_key)
    ]


TRANSACTION_VERSION = "transaction.version"
TRANSACTION_VERSION_LEVEL = 2
GROUP_VERSION = "group.version"
GROUP_VERSION_LEVEL = 1
SHARE_VERSION = "share.version"
SHARE_VERSION_LEVEL = 1
FEATURES_EPOCH = 1  # the finalized features never change while lockgate runs


@handles(ApiKey.API_VERSIONS, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    return {
        "error_code": 0,
        "api_keys": supported_versions(),
        "throttle_time": 0,
        "supported_features": [
            {
                "name": TRANSACTION_VERSION,
                "min_version": 0,
                "max_version": TRANSACTION_VERSION_LEVEL,
            },
            {"name": GROUP_VERSION, "min_version": 0, "max_version": GROUP_VERSION_LEVEL},
            {"name": SHARE_VERSION, "min_version": 0, "max_version": SHARE_VERSION_LEVEL},
        ],
        "finalized_features_epoch": FEATURES_EPOCH,
        "finalized_features": [
            {
                "name": TRANSACTION_VERSION,
                "min_version_level": TRANSACTION_VERSION_LEVEL,
                "max_version_level": TRANSACTION_VERSION_LEVEL,
            },
            {
                "name": GROUP_VERSION,
                "min_version_level": GROUP_VERSION_LEVEL,
                "max_version_level": GROUP_VERSION_LEVEL,
            },
            {
                "name": SHARE_VERSION,
                "min_version_level": SHARE_VERSION_LEVEL,
                "max_version_level": SHARE_VERSION_LEVEL,
            },
        ],
    }
