# Crash-safe replacement of a partition's segments by the cleaner's output.
#
# The cleaner writes each new segment aside (files ending ".cleaned", synced), then commits by
# writing a manifest atomically: one line per group of replaced segments, "<new base> <old
# base>...", -1 as the new base when the group's output was empty and the group is dropped.
# After the commit the old files go and the ".cleaned" ones take their names; a crash at any
# point after the commit is finished by the next load (the steps are idempotent), a crash
# before it only leaves ".cleaned" files, which the load removes.
from __future__ import annotations

import logging

from lockgate.log.segment import SUFFIXES, segment_name
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

MANIFEST = "cleaner-swap"
CLEANED = ".cleaned"

Group = tuple[int, list[int]]  # (new base or -1, replaced bases)


def commit(storage: StorageEngine, directory: str, groups: list[Group]) -> None:
    lines = "".join(f"{new} {' '.join(map(str, old))}\n" for new, old in groups)
    storage.write_atomic(f"{directory}/{MANIFEST}", lines.encode())
    _finish(storage, directory, groups)


def done(storage: StorageEngine, directory: str) -> None:
    """After the new state is recorded elsewhere (the cleaner's checkpoint, whose atomic write
    also syncs the directory's renames): the manifest is no longer needed."""
    storage.remove(f"{directory}/{MANIFEST}")


def recover(storage: StorageEngine, directory: str) -> None:
    """At load, before the segments are opened: finishes a committed swap, drops the output
    of one that never committed."""
    raw = storage.read_all(f"{directory}/{MANIFEST}")
    if raw is not None:
        groups: list[Group] = []
        for line in raw.decode(errors="replace").splitlines():
            fields = line.split()
            if len(fields) >= 2 and all(f.lstrip("-").isdigit() for f in fields):
                groups.append((int(fields[0]), [int(f) for f in fields[1:]]))
        log.warning("%s: finishing a cleaner swap interrupted by a crash", directory)
        _finish(storage, directory, groups)
        done(storage, directory)
    for name in storage.list_dir(directory):
        if name.endswith(CLEANED):
            storage.remove(f"{directory}/{name}")


def _finish(storage: StorageEngine, directory: str, groups: list[Group]) -> None:
    for new, old in groups:
        for base in old:
            if base != new:
                for kind in SUFFIXES:
                    storage.remove(f"{directory}/{segment_name(base)}{kind}")
        if new < 0:
            continue
        stem = f"{directory}/{segment_name(new)}"
        for kind in SUFFIXES:  # every kind is written aside, so a missing one is already moved
            if storage.exists(stem + kind + CLEANED):
                storage.rename(stem + kind + CLEANED, stem + kind)
