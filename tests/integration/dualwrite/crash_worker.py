"""An order-service worker run as a child process by test_crashes.py: it recovers, then writes
orders FIRST..FIRST+COUNT-1 one unit each with lockgate.dualwrite, and with --crash-at kills
itself with SIGKILL at that step of the last unit:

    python -m tests.integration.dualwrite.crash_worker --database CONNINFO --bootstrap HOST:PORT
        --transactional-id ID --topic T --first N --count K [--crash-at STEP]

STEP is a lockgate.dualwrite.Step value, or `during-complete`: the EndTxn that completes the
Kafka transaction is written to the socket and the process dies before its answer.
Prints one JSON line per event: recovered (with the outcome), committed (per order), crash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from typing import Any

from lockgate.client.connection import BrokerConnection
from lockgate.dualwrite import AsyncDualWriter, Step
from lockgate.protocol.api import ApiKey
from tests.integration.dualwrite.orders import INSERT_ORDER

DURING_COMPLETE = "during-complete"
CRASH_POINTS = (*(step.value for step in Step), DURING_COMPLETE)


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def die(at: str) -> None:
    emit(event="crash", at=at)
    os.kill(os.getpid(), signal.SIGKILL)


def die_once_end_txn_is_written() -> None:
    original = BrokerConnection._write

    def write(
        self: BrokerConnection, api_key: int, version: int, correlation_id: int, body: bytes
    ) -> None:
        original(self, api_key, version, correlation_id, body)
        if api_key == ApiKey.END_TXN:  # on loopback the bytes are with the broker already
            die(DURING_COMPLETE)

    BrokerConnection._write = write  # type: ignore[method-assign]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--crash-at", choices=CRASH_POINTS)
    options = parser.parse_args()
    last = options.first + options.count - 1
    current = {"order": -1}

    def on_step(step: Step) -> None:
        if current["order"] != last or options.crash_at is None:
            return
        if step.value == options.crash_at:
            die(step.value)
        if options.crash_at == DURING_COMPLETE and step is Step.AFTER_DB_COMMIT:
            die_once_end_txn_is_written()

    writer = AsyncDualWriter(
        options.database,
        options.bootstrap,
        options.transactional_id,
        producer_options={"linger_ms": 0, "max_block_ms": 10_000},
        on_step=on_step,
    )
    async with asyncio.timeout(60):
        emit(event="recovered", outcome=(await writer.recover()).value)
        for order in range(options.first, last + 1):
            current["order"] = order
            order_id = f"{options.transactional_id}-{order}"
            async with writer.transaction() as unit:
                await unit.execute(INSERT_ORDER, (order_id, options.transactional_id, order))
                await unit.send(
                    options.topic, json.dumps({"order": order}).encode(), order_id.encode()
                )
            emit(event="committed", order=order)
        await writer.close()


if __name__ == "__main__":
    asyncio.run(main())
