"""``sodalite backup DEST`` and ``sodalite restore BACKUP --data-dir DIR`` (docs/operations.md).

``backup`` asks the running broker, found from its data directory's ``endpoints.json`` as the other
client commands find it, to copy every store and its configuration into DEST while it serves
(``cli/backup_service.py`` on the broker's side). ``restore`` runs with no broker: it takes the data
directory's lock as ``serve`` does (so it is refused while a broker holds it, and a broker started
meanwhile is refused until the restore ends), copies the backup's files in, and moves every partition's sequence
counter forward past anything the backup's source may have issued after the backup (``margin``),
so a number is never given to two messages.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Final, NotRequired, TypedDict, cast

from sodalite.amqpclient.connection_string import ENDPOINTS_FILE
from sodalite.cli import commands
from sodalite.cli.data_dir_lock import DataDirectoryInUse, DataDirectoryLock
from sodalite.errors import ArgumentError

MANIFEST: Final = "sodalite-backup.json"  # cli/backup_service.py writes it
PARTITION_SHIFT: Final = 48  # a sequence number's upper 16 bits name its partition (store/port.py)
# The counters move past the backup's last numbers by BASE_MARGIN plus RATE_MARGIN for every second
# between the backup and the restore: more than the source broker can have issued meanwhile in any
# one partition (a partition's numbers come from one store's commits; a million a second is well
# above what one store commits). --sequence-margin sets another.
BASE_MARGIN: Final = 1 << 32
RATE_MARGIN: Final = 1_000_000
SUB_QUEUE_SUFFIXES: Final = ("", "/$deadletterqueue", "/$transfer/$deadletterqueue")


class StoreCopy(TypedDict):
    """A store in the manifest: its name, its file in the backup (and, restored, in the data directory)."""

    name: str
    file: str
    configuredPath: NotRequired[str]  # a store configured outside the data directory: where it was


class Manifest(TypedDict):
    """``sodalite-backup.json``, written last by the broker (cli/backup_service.py)."""

    format: int
    sodalite: str  # the version that took it
    takenAt: int  # ms since the epoch
    namespace: str
    partitionCount: int
    stores: list[StoreCopy]
    config: str | None  # the configuration file's name in the backup
    files: list[str]


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = subcommands.add_parser(
        "backup", help="copy every SQLite store and the configuration of the running broker into a new "
                       "directory, as of one point in time, while it serves")
    backup.add_argument("destination", type=Path, help="a new (or empty) directory on the broker's machine")
    commands._admin_options(backup)
    backup.set_defaults(handler=_backup, timeout=3600.0)  # a large store takes a while to copy
    restore = subcommands.add_parser(
        "restore", help="put a backup into a data directory no broker is using; sequence numbers move past "
                        "anything the backed-up broker may have issued since")
    restore.add_argument("backup", type=Path, help="the directory `sodalite backup` wrote")
    restore.add_argument("--data-dir", type=Path, required=True, help="the data directory to restore into")
    restore.add_argument("--force", action="store_true",
                         help="replace store files and the configuration already in --data-dir (no broker may "
                              "be using it)")
    restore.add_argument("--sequence-margin", type=int, default=None, metavar="N",
                         help="move every partition's sequence counter N past the backup's (default: 2^32 plus "
                              "a million per second since the backup was taken)")
    restore.set_defaults(handler=_restore)


def _backup(args: argparse.Namespace) -> None:
    destination = args.destination.expanduser().resolve()
    api = commands._api(args)
    answer = api.call("POST", "/backup", {"destination": str(destination)})
    if args.json:
        print(json.dumps(answer, indent=2))
        return
    taken = datetime.datetime.fromtimestamp(answer["takenAt"] / 1000, datetime.UTC)
    stores = ", ".join(answer["stores"])
    print(f"backed up {len(answer['stores'])} store(s) ({stores}) and the configuration into {answer['destination']} "
          f"as of {taken.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} "
          f"({answer['sizeInBytes'] / 1024 / 1024:.1f} MiB)")


# ---- restore -------------------------------------------------------------------------------------------


def older_broker_serving(data_dir: Path) -> str | None:
    """Why a broker of a release that held no lock may be serving ``data_dir`` (None when none is):
    the process its ``endpoints.json`` names, alive. Today's brokers hold the directory's lock."""
    path = data_dir / ENDPOINTS_FILE
    try:
        noted = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return f"{path} is there but unreadable: a broker may be serving it"
    pid = noted.get("pid") if isinstance(noted, dict) else None
    if not isinstance(pid, int) or pid <= 0:
        return f"{path} says a broker serves it (an older broker, which notes no process id)"
    if _alive(pid):
        return f"the broker process {pid} serves it ({path})"
    return None  # a broker that died without removing its endpoints.json


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _manifest(backup: Path) -> Manifest:
    try:
        manifest = json.loads((backup / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArgumentError(f"{backup}: not a complete backup (no {MANIFEST}; `sodalite backup` writes it "
                            "last)") from None
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"{backup / MANIFEST}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != 1:
        raise ArgumentError(f"{backup / MANIFEST}: not a backup this version of Sodalite reads")
    return cast("Manifest", manifest)


def _restore(args: argparse.Namespace) -> None:
    backup: Path = args.backup
    data_dir: Path = args.data_dir
    manifest = _manifest(backup)
    if data_dir.exists() and not data_dir.is_dir():
        raise ArgumentError(f"--data-dir: {data_dir} is a file, not a directory")
    if data_dir.exists() and (data_dir / ENDPOINTS_FILE).exists():
        holder = older_broker_serving(data_dir)
        if holder is not None:
            raise ArgumentError(f"--data-dir: {data_dir} is in use: {holder}; stop that broker first")
    lock = DataDirectoryLock(data_dir)
    try:
        lock.acquire()
    except DataDirectoryInUse as exc:
        raise ArgumentError(f"--data-dir: {exc}") from None
    try:
        _restore_into(args, manifest, data_dir)
    finally:
        lock.release()


def _restore_into(args: argparse.Namespace, manifest: Manifest, data_dir: Path) -> None:
    backup: Path = args.backup
    files: list[str] = list(manifest["files"])
    present = [f for f in files if (data_dir / f).exists()]
    if present and not args.force:
        raise ArgumentError(f"--data-dir: {data_dir} already has {', '.join(present)}; restore into a new "
                            "directory, or pass --force to replace them")
    elapsed_s = max(0.0, time.time() - manifest["takenAt"] / 1000)
    margin = args.sequence_margin if args.sequence_margin is not None else BASE_MARGIN + int(elapsed_s * RATE_MARGIN)
    if margin < 1:
        raise ArgumentError(f"--sequence-margin: must be at least 1, got {margin}")
    stores = [str(s["file"]) for s in manifest["stores"]]
    for name in files:
        target = data_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(backup / name, partial)
        with open(partial, "rb") as copied:
            os.fsync(copied.fileno())
        if name in stores:
            for stale in (target.with_name(target.name + "-wal"), target.with_name(target.name + "-shm")):
                stale.unlink(missing_ok=True)  # a replaced store's journal must not be replayed onto the copy
        partial.replace(target)
    entities = _entity_paths([data_dir / f for f in stores])
    partitions = max(1, int(manifest.get("partitionCount") or 1))
    moved = sum(_move_counters(data_dir / f, entities, partitions, margin) for f in stores)
    print(f"restored {len(stores)} store(s) into {data_dir} from the backup of "
          f"{_when(manifest['takenAt'])}; {moved} partition counters moved {margin} numbers past the backup's")
    for store in manifest["stores"]:
        if "configuredPath" in store:  # configured outside the data directory: the configuration still says so
            print(f"note: the store '{store['name']}' was configured at {store['configuredPath']}; its copy is "
                  f"{data_dir / store['file']}: set its Path in the configuration to that before starting",
                  file=sys.stderr)
    config = manifest.get("config")
    if config:
        print(f"start it with: sodalite serve --data-dir {data_dir} --config {data_dir / config}")
    else:
        print(f"start it with: sodalite serve --data-dir {data_dir}")
    print("messages settled after the backup was taken are back; messages sent after it are not", file=sys.stderr)


def _when(ms: int) -> str:
    taken = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return taken.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _entity_paths(stores: list[Path]) -> set[str]:
    """Every entity any store of the backup names (the first store keeps the entity records)."""
    paths: set[str] = set()
    for path in stores:
        conn = sqlite3.connect(path)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "entities" in tables:
                paths.update(p.lower() for (p,) in conn.execute("SELECT path FROM entities"))
        finally:
            conn.close()
    return paths


def _move_counters(path: Path, entities: set[str], partitions: int, margin: int) -> int:
    """Set every partition's counter in the store at ``path`` ``margin`` past the greater of its own
    and its numbering base, for the partitions it counts and for every sub-queue and partition an
    entity of the backup may have (a partition the source first numbered after the backup, too);
    one transaction. Returns how many counters it wrote."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        existing = {(e.lower(), p): last for e, p, last in
                    conn.execute("SELECT entity, partition, last_sequence_number FROM partitions")}
        wanted = set(existing)
        wanted.update((entity + suffix, p) for entity in entities for suffix in SUB_QUEUE_SUFFIXES
                      for p in range(partitions))
        rows = []
        for entity, partition in sorted(wanted):
            base = partition << PARTITION_SHIFT
            last = max(existing.get((entity, partition), 0), base) + margin
            if last >= (partition + 1) << PARTITION_SHIFT:
                raise ArgumentError(f"--sequence-margin: {margin} takes the counter of {entity} (partition "
                                    f"{partition}) out of its partition's range; pass a smaller margin")
            rows.append((entity, partition, last))
        conn.executemany(
            "INSERT INTO partitions (entity, partition, last_sequence_number) VALUES (?, ?, ?) "
            "ON CONFLICT (entity, partition) DO UPDATE SET last_sequence_number = excluded.last_sequence_number",
            rows)
        conn.execute("COMMIT")
        return len(rows)
    finally:
        conn.close()
