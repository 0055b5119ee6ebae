# How `pytest -n N --dist loadfile` hands the test modules to its workers (tests/conftest.py
# installs it through pytest-xdist's scheduler hook): a module is one unit of work, as with
# xdist's own loadfile, except the modules that share per-worker session fixtures slow to start,
# which form a single unit: one worker runs them all, so those fixtures start once per run
# rather than once on each worker.
from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

# The Spark session (spark-submit of a local[2] JVM, ~25 s) and its broker: tests/spark's
# modules that use them and Spark's own connector in tests/reference; Apache Kafka's reference
# brokers (a JVM each, ~15 s: reference_kafka, share_kafka) and share_lockgate: tests/reference.
SHARED_SESSIONS = "modules sharing the Spark session and the reference brokers"
SHARED_SESSION_MODULES = (
    "tests/reference/",
    "tests/spark/test_connector.py",
    "tests/spark/test_security.py",
    "tests/spark/test_tiered.py",
)


class SharedSessionFileScheduling(LoadFileScheduling):  # type: ignore[misc]  # untyped xdist
    """loadfile, with the modules of SHARED_SESSION_MODULES as one unit. The unit takes the
    place of its first module in the queue (with --no-loadscope-reorder, the collection order)."""

    def _split_scope(self, nodeid: str) -> str:
        module = super()._split_scope(nodeid)
        return SHARED_SESSIONS if module.startswith(SHARED_SESSION_MODULES) else module
