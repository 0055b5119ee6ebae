"""A simulated external transaction manager (a database, a workflow engine...) that makes three
lockgate transactional ids participants of its own two-phase commit (KIP-939), run as a child
process by test_two_phase_commit.py:

    python -m tests.integration.external_tm --bootstrap HOST:PORT --prefix P --topic T
        --decision-log FILE --round N [--crash-at POINT]

On start it recovers: every participant is initialised with keep_prepared_txn=True and
completed according to the decision log — committed when the log holds a commit decision whose
prepared state matches what the coordinator kept, aborted otherwise (presumed abort). Then it
runs round N: begin in every participant, write, prepare each, log the decision (fsync), complete
each, log "done". With --crash-at it kills itself with SIGKILL at that point of the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from lockgate.client.producer import Producer
from lockgate.client.transactions import PreparedTxnState

PARTICIPANTS = 3
RECORDS_PER_PARTICIPANT = 4
NO_STATE = PreparedTxnState(-1, -1)
CRASH_POINTS = (
    "after-write",
    "after-prepare-1",
    "after-prepare-2",
    "after-prepare-3",
    "after-decision",
    "after-complete-1",
    "after-complete-2",
    "after-complete-3",
)


def values_of(round_number: int, participant: int) -> list[bytes]:
    return [
        f"round-{round_number}-participant-{participant}-{i}".encode()
        for i in range(RECORDS_PER_PARTICIPANT)
    ]


class DecisionLog:
    """JSON lines, each fsynced before the protocol moves on: the manager's only durable state."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def append(self, entry: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def undone_commit(self) -> dict[str, Any] | None:
        """The last round decided as commit and not yet marked done."""
        entries = self.entries()
        done = {e["round"] for e in entries if e.get("done")}
        decided = [e for e in entries if e.get("decision") == "commit" and e["round"] not in done]
        return decided[-1] if decided else None


def crash_if(point: str, options: argparse.Namespace) -> None:
    if options.crash_at == point:
        print(json.dumps({"event": "crash", "at": point}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def participant(options: argparse.Namespace, index: int) -> Producer:
    return Producer(
        options.bootstrap,
        transactional_id=f"{options.prefix}-participant-{index}",
        linger_ms=0,
        transaction_timeout_ms=1_000,  # shorter than the test waits: 2PC is exempt
    )


async def recover(options: argparse.Namespace, log: DecisionLog) -> None:
    pending = log.undone_commit()
    states = pending["states"] if pending else {}
    for index in range(PARTICIPANTS):
        async with participant(options, index) as producer:
            await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
            decided = states.get(str(index))
            state = PreparedTxnState(*decided) if decided else NO_STATE
            await producer.complete_transaction(state)
    if pending:
        log.append({"round": pending["round"], "done": True})


async def run_round(options: argparse.Namespace, log: DecisionLog) -> None:
    producers = [participant(options, index) for index in range(PARTICIPANTS)]
    for producer in producers:
        await producer.start()
        await producer.init_transactions(enable_2pc=True)
    for index, producer in enumerate(producers):
        producer.begin_transaction()
        for value in values_of(options.round, index):
            await producer.send(options.topic, value, partition=index)
    crash_if("after-write", options)
    states: dict[str, list[int]] = {}
    for index, producer in enumerate(producers):
        prepared = await producer.prepare_transaction()
        states[str(index)] = [prepared.producer_id, prepared.epoch]
        crash_if(f"after-prepare-{index + 1}", options)
    log.append({"round": options.round, "decision": "commit", "states": states})
    crash_if("after-decision", options)
    for index, producer in enumerate(producers):
        await producer.complete_transaction(PreparedTxnState(*states[str(index)]))
        crash_if(f"after-complete-{index + 1}", options)
    log.append({"round": options.round, "done": True})
    for producer in producers:
        await producer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--decision-log", required=True, type=Path)
    parser.add_argument("--round", required=True, type=int)
    parser.add_argument("--crash-at", choices=CRASH_POINTS)
    parser.add_argument("--recover-only", action="store_true")
    options = parser.parse_args()
    log = DecisionLog(options.decision_log)
    async with asyncio.timeout(60):
        await recover(options, log)
        print(json.dumps({"event": "recovered"}), flush=True)
        if not options.recover_only:
            await run_round(options, log)
            print(json.dumps({"event": "round-done", "round": options.round}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
