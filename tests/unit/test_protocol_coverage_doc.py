from __future__ import annotations

from pathlib import Path

from lockgate.handlers.coverage import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol-coverage.md"


def test_protocol_coverage_doc_matches_the_handler_registry() -> None:
    regenerate = "python -m lockgate.handlers.coverage > docs/protocol-coverage.md"
    assert DOC.read_text() == render(), f"docs/protocol-coverage.md is stale: run `{regenerate}`"
