"""The suite's loadfile scheduler (tests/support/scheduling.py) on a made-up collection and two
stand-in workers: a module is a unit of work, the modules sharing the Spark session and the
reference brokers are one unit on one worker, and with --no-loadscope-reorder the units go out
in collection order."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from tests.support.scheduling import SHARED_SESSIONS, SharedSessionFileScheduling

COLLECTION = [
    "tests/spark/test_cluster.py::test_demo",
    "tests/spark/test_connector.py::test_read",
    "tests/spark/test_connector.py::test_write",
    "tests/reference/test_java_client.py::test_client",
    "tests/compat/test_groups.py::test_a",
    "tests/compat/test_groups.py::test_b",
    "tests/compat/test_groups.py::test_c",
    "tests/reference/test_kafka_tools.py::TestTools::test_topics",
    "tests/spark/test_security.py::test_ssl",
    "tests/unit/test_x.py::test_x",
]


@dataclass
class Worker:
    """What the scheduler uses of xdist's WorkerController."""

    name: str
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> SimpleNamespace:
        return SimpleNamespace(id=self.name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __hash__(self) -> int:
        return hash(self.name)


class Config:
    def __init__(self, reorder: bool) -> None:
        self.option = SimpleNamespace(loadscopereorder=reorder)

    def getvalue(self, name: str) -> object:
        assert name == "tx"
        return ["2*popen"]


def scheduled(reorder: bool) -> tuple[SharedSessionFileScheduling, list[Worker]]:
    scheduler = SharedSessionFileScheduling(Config(reorder))
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler, workers


def test_the_shared_session_modules_are_one_unit_and_the_others_one_unit_each() -> None:
    scheduler = SharedSessionFileScheduling(Config(False))
    assert scheduler._split_scope("tests/spark/test_connector.py::test_read") == SHARED_SESSIONS
    assert scheduler._split_scope("tests/spark/test_security.py::test_ssl") == SHARED_SESSIONS
    assert scheduler._split_scope("tests/reference/test_x.py::TestX::test_y") == SHARED_SESSIONS
    assert scheduler._split_scope("tests/spark/test_cluster.py::test_demo") == (
        "tests/spark/test_cluster.py"
    )
    assert scheduler._split_scope("tests/compat/test_groups.py::TestA::test_b") == (
        "tests/compat/test_groups.py"
    )


def test_units_go_out_in_collection_order_and_a_unit_stays_on_one_worker() -> None:
    scheduler, (first, second) = scheduled(reorder=False)
    # each worker takes a unit, then one more while it has two tests or fewer pending
    assert [COLLECTION[i] for i in first.sent] == [
        "tests/spark/test_cluster.py::test_demo",
        "tests/compat/test_groups.py::test_a",
        "tests/compat/test_groups.py::test_b",
        "tests/compat/test_groups.py::test_c",
    ]
    assert [COLLECTION[i] for i in second.sent] == [
        "tests/spark/test_connector.py::test_read",
        "tests/spark/test_connector.py::test_write",
        "tests/reference/test_java_client.py::test_client",
        "tests/reference/test_kafka_tools.py::TestTools::test_topics",
        "tests/spark/test_security.py::test_ssl",
    ]
    assert list(scheduler.workqueue) == ["tests/unit/test_x.py"]


def test_xdists_own_order_puts_the_largest_unit_first() -> None:
    _, (first, second) = scheduled(reorder=True)
    assert COLLECTION[first.sent[0]] == "tests/spark/test_connector.py::test_read"
    assert COLLECTION[second.sent[0]] == "tests/compat/test_groups.py::test_a"
