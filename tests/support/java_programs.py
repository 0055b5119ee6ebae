# The single-file Java programs of tests/reference/java, compiled once per classpath instead of
# at every launch: `java Program.java` compiles the source in memory each time it starts (2-4 s
# of CPU per launch, more than most of the programs then run), and the suite launches them
# about twenty times. All of them are compiled by one javac into a directory of the system's
# temp dir named after what went into it (the sources, the classpath, the compiler), so the
# pytest workers of a run, and later runs, share it; a worker that finds it missing compiles
# into a directory of its own and renames that into place, and the first rename wins.
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parents[1] / "reference" / "java"


def java_program(program: Path, classpath: str, *options: str) -> list[str]:
    """The command that runs `program` (a file of tests/reference/java, whose public class is
    named after it) with `classpath`: java, the JVM `options`, then the program's arguments
    follow."""
    classes = compiled_programs(classpath)
    return ["java", *options, "-cp", f"{classes}{os.pathsep}{classpath}", program.stem]


_compiled: dict[str, Path] = {}


def compiled_programs(classpath: str) -> Path:
    """The directory of the programs' classes compiled against `classpath`."""
    if classpath in _compiled:
        return _compiled[classpath]
    sources = sorted(PROGRAMS.glob("*.java"))
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not installed: the Java test programs need a JDK")
    digest = hashlib.sha256(os.path.realpath(javac).encode() + b"\0" + classpath.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    target = Path(tempfile.gettempdir()) / f"lockgate-java-{os.getuid()}-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        building = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=target.parent))
        done = subprocess.run(
            [javac, "-proc:none", "-encoding", "UTF-8", "-d", str(building), "-cp", classpath,
             *map(str, sources)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise RuntimeError(f"javac failed on tests/reference/java:\n{done.stdout}{done.stderr}")
        try:
            building.rename(target)  # atomic; another worker's may have landed first
        except OSError:
            shutil.rmtree(building, ignore_errors=True)
            if not target.is_dir():
                raise
    _compiled[classpath] = target
    return target
