# A small tmpfs mounted for a test (a real file system that fills up), unmounted afterwards.
# Mounting needs root: without it the test is skipped with the reason.
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a {size} tmpfs here (needs root): {done.stderr.decode().strip()}"
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
