# Generates docs/protocol-coverage.md from the handler registry, so the table can never
# disagree with what ApiVersions advertises. `python -m lockgate.handlers.coverage`.
from __future__ import annotations

import sys

from lockgate.handlers import load_all
from lockgate.handlers.registry import HANDLERS
from lockgate.protocol.api import ApiKey

HEADER = """# Protocol coverage

Generated from the handler registry by `python -m lockgate.handlers.coverage`; a test fails
when this file is out of date. Each API's full behaviour (every rule and its error code) is in
its handler module's docstring under `src/lockgate/handlers/`.

| key | API | versions | behaviour (summary) |
|---:|---|---|---|
"""

FOOTER = """
APIs not listed are not advertised: a request for one closes the connection, as Kafka does
for an unknown API key. Notable absences and why are in [deviations.md](deviations.md).
"""


def _summary(doc: str | None) -> str:
    if not doc:
        return ""
    lines = [line.strip() for line in doc.strip().splitlines()[1:]]
    text = " ".join(line for line in lines if line)
    for marker in ("Version notes:",):
        text = text.split(marker, 1)[0]
    text = text.replace("Behaviour:", "").strip()
    first = text.split("- ", 2)
    summary = first[1] if len(first) > 1 else text
    return summary.strip().rstrip(";").replace("|", "\\|")


def render() -> str:
    load_all()
    rows = []
    for key in sorted(HANDLERS):
        spec = HANDLERS[key]
        name = "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
        module = sys.modules[spec.handler.__module__]
        versions = f"{spec.min_version}–{spec.max_version}"
        rows.append(f"| {key} | {name} | {versions} | {_summary(module.__doc__)} |")
    return HEADER + "\n".join(rows) + "\n" + FOOTER


if __name__ == "__main__":
    sys.stdout.write(render())
