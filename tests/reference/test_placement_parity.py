"""lockgate's replica placement (cluster/controller.py) against Kafka 4.4's own placer: the
reference jars' StripedReplicaPlacer, run by java/PlacementParity.java on 2,000 random clusters
(up to 12 brokers in up to 5 racks or none, some fenced, factors from -1 to two past the broker
count, up to 100 partitions: many reshuffles) with the same random draws (JavaRandom, the
generator of Kafka's tests, in both). Every placement, and every refusal's message, must be the
same. Rack names are single letters, so that the order in which Kafka's hash map visits the
racks (for their random starts) is their name order, the order lockgate draws in."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from lockgate.cluster.controller import AssignmentError, UsableBroker, place_replicas
from tests.support.java_programs import java_program
from tests.support.java_random import JavaRandom

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "PlacementParity.java"
CASES = 2000

Case = tuple[int, int, int, list[UsableBroker]]


def _cases() -> list[Case]:
    draw = random.Random(392)
    cases = []
    for _ in range(CASES):
        count = draw.randint(1, 12)
        nodes = draw.sample(range(40), count)
        cluster = [
            UsableBroker(node, draw.choice([None, "a", "b", "c", "d", "e"]), draw.random() < 0.15)
            for node in nodes
        ]
        factor = draw.randint(-1, count + 2)
        cases.append((draw.randrange(2**40), draw.randint(1, 100), factor, cluster))
    return cases


def _line(case: Case) -> str:
    seed, partitions, factor, cluster = case
    brokers = ",".join(f"{b.node_id}:{b.rack or '-'}:{int(b.fenced)}" for b in cluster)
    return f"{seed} {partitions} {factor} {brokers}"


def _lockgate(case: Case) -> str:
    seed, partitions, factor, cluster = case
    try:
        placement = place_replicas(cluster, partitions, factor, JavaRandom(seed))
    except AssignmentError as exc:
        return f"ERROR {exc}"
    return ";".join(",".join(map(str, placement[p])) for p in range(partitions))


def test_placements_are_kafkas(classpath: str) -> None:
    cases = _cases()
    done = subprocess.run(
        java_program(PROGRAM, classpath, "-Xmx256m"),
        input="".join(_line(case) + "\n" for case in cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1:] == ["DONE"], done.stderr[-3000:]
    kafka = lines[:-1]
    assert len(kafka) == len(cases)
    differing = [
        (_line(case), theirs, ours)
        for case, theirs in zip(cases, kafka, strict=True)
        if (ours := _lockgate(case)) != theirs
    ]
    assert not differing, differing[:5]
    assert sum(line.startswith("ERROR") for line in kafka) > 0  # the refusals were compared too
    assert sum(not line.startswith("ERROR") for line in kafka) > CASES // 2
