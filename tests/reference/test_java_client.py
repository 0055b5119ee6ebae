"""Apache Kafka's Java client (kafka-clients 4.4) against lockgate, and the same program
against Apache Kafka: idempotent producer, transactional producer (transaction version 2 on
both), read_committed consumer, consume-transform-produce with sendOffsetsToTransaction(group
metadata) (KIP-447), a classic group with the cooperative-sticky assignor, and the
AdminClient (cluster, topics, configs, listTransactions with a duration filter,
describeTransactions, describeProducers, abortTransaction, fenceProducers, a group's
offsets). Each check's results must be the same on both brokers. The Java client of that
version exposes none of KIP-939's API (prepareTransaction / completeTransaction), so there is
nothing of it to test here (docs/deviations.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.broker import running_broker
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "ClientChecks.java"


def run_checks(kafka: ReferenceKafka, bootstrap: str, program: Path = PROGRAM) -> dict[str, str]:
    done = subprocess.run(
        [*java_program(program, kafka.classpath, "-Xmx512m"), bootstrap],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            _, check, name, value = line.split(" ", 3)
            results[f"{check}.{name}"] = value
    return results


def test_the_java_client_gets_the_same_results_from_both(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    with running_broker(tmp_path / "data") as lockgate:
        ours = run_checks(reference_kafka, lockgate.bootstrap)
    theirs = run_checks(reference_kafka, reference_kafka.bootstrap)
    # the one known difference (docs/deviations.md): Kafka's duration filter also lists ids
    # whose last transaction, long completed, began before the cut-off; lockgate lists only
    # transactions still running
    # (the reference broker is shared with other tests: other ids may be listed there too)
    known = "admin.running_over_1s"
    listed = set(theirs[known].strip("[]").split(", "))
    assert {"java-hang", "java-in", "java-txn", "java-eos"} <= listed
    assert {k: v for k, v in ours.items() if k != known} == {
        k: v for k, v in theirs.items() if k != known
    }
    assert ours["idempotent.records"] == ours["idempotent.distinct"] == "500"
    assert ours["transactions.read_committed"] == "20"
    assert ours["eos.output"] == "10" and ours["admin.eos_group_offset"] == "10"
    assert ours["cooperative.assignment"] == "2+2"
    assert ours["admin.running_over_1s"] == "[java-hang]"
    assert ours["admin.after_abort_txn_start"] == "-1"
