"""Fuzzing in the suite: property-based (hypothesis) over the request decoders, a short
mutation run against a live broker (the long one is `make fuzz`) and a short coverage-guided
run over the decoder (the long one is `make fuzz-decoder`)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.handlers import load_all
from lockgate.handlers.registry import HANDLERS
from lockgate.protocol.api import BodyDecodeError
from lockgate.protocol.frame import MalformedFrame
from tests.faults.fuzz import FAILURES, fuzz

load_all()
VERSIONS = sorted(
    (int(key), version)
    for key, spec in HANDLERS.items()
    for version in range(spec.min_version, spec.max_version + 1)
)


@settings(max_examples=3_000, deadline=None)
@given(api=st.sampled_from(VERSIONS), payload=st.binary(max_size=200))
def test_any_body_decodes_or_is_rejected_cleanly(api: tuple[int, int], payload: bytes) -> None:
    key, version = api
    # Either is a clean answer: the connection is closed with one log line.
    with contextlib.suppress(BodyDecodeError, MalformedFrame):
        HANDLERS[key].decode_body(payload, 0, version)


async def test_mutated_frames_against_a_live_broker(tmp_path: Path) -> None:
    results = await fuzz(5_000, seed=7, scratch=tmp_path)
    assert results["frames"] >= 5_000
    assert results["well_behaved_written"] > 0
    assert results["sasl_connections"] > 0  # the SASL exchange was fuzzed too
    assert not {name: results[name] for name in FAILURES if results[name]}, results


def test_coverage_guided_fuzzing_of_the_decoder_finds_nothing() -> None:
    """A short atheris run from real traffic seeds (the long one is `make fuzz-decoder`)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.fuzz_decoder", "-runs=10000", "-max_len=4096",
         "-seed=7"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    assert "captured requests as seeds" in done.stdout, tail
    # libFuzzer stops at the end of a mutation round, so it may pass -runs by a few
    finished = re.search(r"Done (\d+) runs", done.stderr)
    assert finished is not None and int(finished.group(1)) >= 10_000, tail
