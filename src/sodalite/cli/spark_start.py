"""A faster start for the CLI's finite Spark runs (``sodalite pipeline ... --available-now``).

Most of a small run's time is the driver JVM starting and loading Spark's classes. Two things cut it,
and only where the user has not set driver Java options of their own:

- the C1 compiler alone and the serial collector (a short run never pays back the C2 compiler);
- a class-data-sharing archive of the classes the driver loaded: the first run writes one as its JVM
  exits (``-XX:ArchiveClassesAtExit``), into the cache directory; later runs map it
  (``-XX:SharedArchiveFile``) instead of loading and verifying thousands of classes from Spark's jars.

The archive is named after what it depends on (the Java executable, Spark's jars, the JVM options), so
a different Java or Spark writes a new one; the JVM also checks the archive itself and, when it does
not match, starts without it (``-Xshare:auto``, the default), silently. ``$SODALITE_SPARK_CLASS_CACHE``
names the cache directory (default ``~/.cache/sodalite/spark-classes``), or ``off`` for none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: The C1 compiler alone and the serial collector: about half a short run's JVM start and warm-up.
QUICK_START_JVM_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The JVM's notes about the archive (classes it skips, an archive that does not match) stay quiet.
QUIET_ARCHIVE: Final = "-Xlog:cds=off -Xlog:cds+dynamic=off"
CACHE_VARIABLE: Final = "SODALITE_SPARK_CLASS_CACHE"
#: Waiting for the first run's JVM to write the archive, at most (it takes seconds; more on a busy machine).
WRITE_WAIT_S: Final = 300.0
#: An unfinished archive older than this is left over from a run that died: removed.
STALE_PART_S: Final = 3600.0


@dataclass(frozen=True)
class ClassArchive:
    """The archive a run uses (``path`` exists) or writes (into ``part``, renamed to ``path`` once whole)."""

    path: Path
    part: Path | None

    def java_options(self) -> str:
        if self.part is None:
            return f"-XX:SharedArchiveFile={self.path} {QUIET_ARCHIVE}"
        return f"-XX:ArchiveClassesAtExit={self.part} {QUIET_ARCHIVE}"


def cache_directory() -> Path | None:
    chosen = os.environ.get(CACHE_VARIABLE, "")
    if chosen.strip().lower() in ("off", "0", "no", "false", "none"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sodalite" / "spark-classes"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found else None


def _spark_jars() -> Path | None:
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:
        return None
    return Path(_find_spark_home()) / "jars"


def archive_key(java: Path, jars: Path, options: str) -> str:
    """What the archive depends on: the Java executable, Spark's jars (names, sizes, times) and the options."""
    digest = hashlib.sha256(options.encode())
    for path in (java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"\0{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def class_archive(options: str) -> ClassArchive | None:
    """The archive for a driver JVM started with ``options``: one to use, else one to write; None when
    there is no cache directory (or it cannot be written), no Java or no Spark jars to name it after."""
    directory, java, jars = cache_directory(), _java(), _spark_jars()
    if directory is None or java is None or jars is None:
        return None
    try:
        key = archive_key(java, jars, options)
        path = directory / f"{key}.jsa"
        if path.is_file():
            return ClassArchive(path, None)
        directory.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(directory)
        return ClassArchive(path, directory / f"{key}.{uuid.uuid4().hex[:12]}.part")
    except OSError:
        return None


def _remove_leftovers(directory: Path) -> None:
    now = time.time()
    for part in directory.glob("*.part"):
        try:
            if now - part.stat().st_mtime > STALE_PART_S:
                part.unlink()
        except OSError:
            pass


def finish_archive(archive: ClassArchive | None, gateway_process: Any, wait_s: float = WRITE_WAIT_S) -> bool:
    """After the session stopped: when this run writes the archive, end its JVM (closing its input is how
    PySpark's gateway is told to exit), wait for it to write the archive, and put the archive in place
    (replacing archives written for another Java or Spark). True when a new archive is in place."""
    if archive is None or archive.part is None or gateway_process is None:
        return False
    try:
        if gateway_process.stdin is not None:
            gateway_process.stdin.close()
        code = gateway_process.wait(wait_s)
    except Exception:  # still writing after the wait, or gone: the next run writes one
        return False
    try:
        if code != 0 or not archive.part.is_file() or archive.part.stat().st_size == 0:
            archive.part.unlink(missing_ok=True)
            return False
        os.replace(archive.part, archive.path)
        for other in archive.path.parent.glob("*.jsa"):
            if other != archive.path:
                other.unlink(missing_ok=True)
    except OSError:
        return False
    return True
