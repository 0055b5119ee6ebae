"""The Grafana dashboards under deploy/grafana use only metrics a broker exports: every
metric name in their PromQL (panels and template variables) is a sample name of a family in
a scrape of a broker (counters as _total, histograms as _bucket/_sum/_count)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

DASHBOARDS = sorted((Path(__file__).parents[2] / "deploy" / "grafana").glob("*.json"))
METRIC = re.compile(r"\b(?:lockgate|process|python)_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_sample_names() -> set[str]:
    # tiered storage on (its client connects at its first request, never here): its metrics too
    settings = {
        "listeners": "127.0.0.1:0",
        "lockgate.metrics.port": "0",
        "remote.log.storage.system.enable": "true",
        "rsm.config.s3.bucket": "dashboards",
        "rsm.config.s3.endpoint": "http://127.0.0.1:9",
    }
    broker = Broker(BrokerConfig(settings), MemoryEngine())
    names: set[str] = set()
    for family in text_string_to_metric_families(broker.metrics.render().decode()):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    broker.topics.close()
    return names


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    for variable in dashboard.get("templating", {}).get("list", ()):
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def test_there_are_dashboards() -> None:
    names = {path.name for path in DASHBOARDS}
    assert {"lockgate-transactions.json", "lockgate-broker.json"} <= names


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_every_metric_name_is_exported(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    exported = exported_sample_names()
    queries = expressions(dashboard)
    assert len(queries) >= len(dashboard["panels"])
    for query in queries:
        used = METRIC.findall(query)
        assert used, f"no lockgate metric in {query!r}"
        unknown = set(used) - exported
        assert not unknown, f"{path.name}: {sorted(unknown)} not exported (in {query!r})"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
