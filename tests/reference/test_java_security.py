"""Apache Kafka's Java client (kafka-clients 4.4) against lockgate over SASL_SSL with SCRAM and
the ACL authorizer: a wrong password is refused with SaslAuthenticationException, a user
without ACLs is refused (topic or cluster authorization for produce, transactional id
authorization for initTransactions), and once a super user has granted it ACLs through the
Admin API the same user runs a transaction whose committed records a read_committed consumer
of its group reads once. The credentials are listed through describeUserScramCredentials."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka
from tests.support.tls import make_pki

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "SecurityChecks.java"
MECHANISM = "SCRAM-SHA-512"


def add_user(data: Path, name: str, password: str) -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        subprocess.run(
            [sys.executable, "-m", "lockgate.cli", "users", "add", name, "--password", password,
             "--mechanism", mechanism, "--data-dir", str(data)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip


def test_the_java_client_over_sasl_ssl_with_acls(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    add_user(data, "admin", "admin-secret")
    add_user(data, "carol", "carol-secret")
    settings = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        **pki.server_settings(prefix="listener.name.sasl_ssl."),
    }
    broker = BrokerProcess(data, settings, listeners=("PLAINTEXT", "SASL_SSL")).start()
    try:
        done = subprocess.run(
            [*java_program(PROGRAM, reference_kafka.classpath, "-Xmx512m"),
             broker.bootstrap_for("SASL_SSL"), pki.ca, MECHANISM,
             "admin", "admin-secret", "carol", "carol-secret"],
            capture_output=True, text=True, timeout=400, check=False,
        )  # fmt: skip
    finally:
        broker.kill()
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0 and "DONE" in done.stdout, output
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            _, check, name, value = line.split(" ", 3)
            results[f"{check}.{name}"] = value
    assert results["auth.wrong_password"] == "SaslAuthenticationException", output
    assert results["denied.produce"] in (
        "TopicAuthorizationException",
        "ClusterAuthorizationException",
    ), output
    assert results["denied.transactional"] == "TransactionalIdAuthorizationException", output
    assert results["admin.user_mechanisms"] == "[SCRAM-SHA-256, SCRAM-SHA-512]", output
    assert int(results["admin.acls_listed"]) >= 4
    assert results["allowed.read_committed"] == "10", output
    # past the 10 committed records (and maybe past the markers and the aborted record)
    assert 10 <= int(results["allowed.group_offset"]) <= 13, output
