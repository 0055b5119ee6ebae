"""Coverage-guided fuzzing of the request decoder with atheris (libFuzzer):
`python -m tests.faults.fuzz_decoder [-runs=100000] [libFuzzer flags...]`.

Each input picks one supported (API key, version) by its first two bytes and becomes the rest
of a frame after a valid fixed header prefix, so that libFuzzer's mutations reach every
decoder's body. The seed corpus is real traffic: the requests of a scripted client session
against a broker started for the purpose (the corpus of the mutation fuzzer, tests/faults/fuzz.py).
Inputs go through the broker's own path (`HandlerSpec.decode`, with the length guard before kio);
MalformedFrame and BodyDecodeError are the clean answers (the connection is closed). Any other
exception, a crash or a memory blow-up past -rss_limit_mb is a finding.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["lockgate", "kio"]):
    from lockgate.handlers import load_all
    from lockgate.handlers.registry import HANDLERS
    from lockgate.protocol.api import BodyDecodeError
    from lockgate.protocol.frame import MalformedFrame, peek_api

    load_all()  # the handler modules, with their hand-written decoders
VERSIONS = sorted(
    (int(key), version)
    for key, spec in HANDLERS.items()
    for version in range(spec.min_version, spec.max_version + 1)
)
_PREFIX = struct.Struct(">hhi")


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    key, version = VERSIONS[int.from_bytes(data[:2], "big") % len(VERSIONS)]
    payload = _PREFIX.pack(key, version, 1) + data[2:]
    try:
        api_key, api_version, _ = peek_api(payload)
        HANDLERS[api_key].decode(payload, api_version)
    except (MalformedFrame, BodyDecodeError):
        pass


def as_input(frame: bytes) -> bytes:
    """A captured request (header + body) in the input format of one_input."""
    key, version, _ = peek_api(frame)
    return VERSIONS.index((key, version)).to_bytes(2, "big") + frame[_PREFIX.size :]


def capture_seeds(folder: Path) -> int:
    from tests.faults.fuzz import capture_corpus  # after the instrumented imports
    from tests.support.broker import BrokerProcess

    broker = BrokerProcess(folder.parent / "data").start()
    try:
        frames = asyncio.run(capture_corpus(broker.bootstrap))
    finally:
        broker.kill()
    for number, frame in enumerate(frames):
        (folder / f"real-{number}").write_bytes(as_input(frame))
    return len(frames)


def main() -> int:
    """Captures the seeds into a temporary folder, then fuzzes in a child process (libFuzzer
    exits without unwinding, and adds what it finds to that folder)."""
    if sys.argv[1:2] == ["--fuzz"]:
        atheris.Setup([sys.argv[0], *sys.argv[2:]], one_input)
        atheris.Fuzz()
    with tempfile.TemporaryDirectory(prefix="lockgate-atheris-") as scratch:
        seeds = Path(scratch) / "corpus"
        seeds.mkdir()
        print(f"{capture_seeds(seeds)} captured requests as seeds", flush=True)
        command = [sys.executable, "-m", "tests.faults.fuzz_decoder", "--fuzz", *sys.argv[1:]]
        return subprocess.run([*command, str(seeds)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
