"""A transactional writer on confluent-kafka (librdkafka), run as a child process by the fault run
so that the nemesis can kill it with SIGKILL (a client process crash) and start it again:

    python -m tests.faults.confluent_writer --bootstrap HOST:PORT --name ID --history FILE
        --seed N --stop-file FILE

Same transactions as workload.Writer (unique values over both topics, 80% committed). The new
incarnation's init_transactions fences the old one and aborts its open transaction; the old one's
last transaction stays "pending" in the history, which the checker treats as all-or-nothing.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from tests.faults.history import History
from tests.faults.workload import TOPICS, TXN_TIMEOUT_MS

TIMEOUT_S = 10.0


def new_producer(options: argparse.Namespace) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": options.bootstrap,
            "transactional.id": options.name,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "socket.timeout.ms": 5_000,
            "message.timeout.ms": TXN_TIMEOUT_MS,
            "linger.ms": 1,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def offset_recorder(offsets: list[int], index: int) -> Callable[[KafkaError | None, Message], None]:
    """A delivery callback writing one value's offset (librdkafka serves them during the
    commit's flush); -1 stays where delivery failed or answered none."""

    def delivered(error: KafkaError | None, message: Message) -> None:
        offset = message.offset()
        if error is None and offset is not None and offset >= 0:
            offsets[index] = offset

    return delivered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--history", required=True, type=Path)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--stop-file", required=True, type=Path)
    parser.add_argument("--first-txn", type=int, default=0)
    options = parser.parse_args()
    history = History(options.history)
    rng = random.Random(f"{options.seed}-{options.name}-{options.first_txn}")
    producer: Producer | None = None
    number = options.first_txn
    while not options.stop_file.exists():
        values = [
            [f"{options.name}-{number}-{i}", rng.choice(TOPICS), rng.randrange(3)]
            for i in range(rng.randint(1, 8))
        ]
        commit = rng.random() < 0.8
        outcome = "unknown"
        offsets = [-1] * len(values)
        times: dict[str, float] = {}  # commit_started, once the commit is invoked
        try:
            if producer is None:
                producer = new_producer(options)
            producer.begin_transaction()
            history.record(
                "txn", producer=options.name, txn=number, values=values, outcome="pending"
            )
            for index, (value, topic, partition) in enumerate(values):
                producer.produce(
                    str(topic),
                    str(value).encode(),
                    partition=int(str(partition)),
                    on_delivery=offset_recorder(offsets, index),
                )
            if commit:
                times["commit_started"] = time.time()
                history.record(
                    "txn", producer=options.name, txn=number, values=values, outcome="pending",
                    **times,
                )  # fmt: skip
                producer.commit_transaction(TIMEOUT_S)
                outcome = "committed"
            else:
                producer.abort_transaction(TIMEOUT_S)
                outcome = "aborted"
        except KafkaException as exc:
            error = exc.args[0]
            if producer is not None and error.txn_requires_abort():
                try:
                    producer.abort_transaction(TIMEOUT_S)
                    outcome = "aborted"
                except KafkaException:
                    producer = None
            else:
                producer = None  # fatal, or an unknown commit outcome: a new instance
            time.sleep(0.2)
        history.record(
            "txn", producer=options.name, txn=number, values=values, outcome=outcome, **times,
            **({"offsets": offsets} if outcome == "committed" else {}),
        )  # fmt: skip
        number += 1
    history.close()


if __name__ == "__main__":
    main()
