"""``sodalite backup`` as the running broker carries it out: where each store's copy goes, the
configuration beside them, and the manifest (``sodalite-backup.json``) that ``sodalite restore`` reads.

The copies are made by ``server/backup.py`` (one point in time across every store). The backup
directory mirrors the data directory: ``messages.db`` and each configured store at its configured
path (a store configured by an absolute path goes to ``stores-absolute/<name>.db``), the
configuration file as ``Config.json``, and the broker's generated certificate and key when it
serves them from the data directory. The manifest is written last: a directory without it is not a
backup (``restore`` refuses it).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sodalite import __version__
from sodalite.admin.control import BackupRecord
from sodalite.admin.tls import CERT_FILE, KEY_FILE
from sodalite.cli.backup import Manifest, StoreCopy
from sodalite.errors import ArgumentError
from sodalite.server import backup
from sodalite.server.broker import Broker
from sodalite.store.sqlite import SqliteStore

MANIFEST: Final = "sodalite-backup.json"
FORMAT: Final = 1
CONFIG_NAME: Final = "Config.json"


@dataclass(frozen=True, slots=True)
class BackupSource:
    """What the composition root knows of the broker's files: its data directory and configuration."""

    data_dir: Path
    config: Path | None


def store_file(data_dir: Path, name: str, path: Path) -> str:
    """Where a store's copy goes inside a backup (and comes back to in a data directory), relative."""
    try:
        return path.resolve().relative_to(data_dir.resolve()).as_posix()
    except ValueError:
        return f"stores-absolute/{name}.db"


async def make_backup(broker: Broker, source: BackupSource, destination: str) -> BackupRecord:
    """Copy every store and the configuration into ``destination`` (a new or empty directory)."""
    target = Path(destination)
    if not target.is_absolute():
        raise ArgumentError(f"destination: '{destination}' is not an absolute path (the broker resolves it, not "
                            "the caller's working directory)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ArgumentError(f"destination: '{destination}' exists and is not an empty directory; a backup goes into "
                            "a new one")
    stores: list[StoreCopy] = []
    destinations: dict[str, Path] = {}
    for worker in broker.workers:
        store = worker.store
        if not isinstance(store, SqliteStore):
            raise ArgumentError(f"the messaging store '{worker.name}' is PostgreSQL: back it up with pg_dump or "
                                "pg_basebackup (docs/operations.md); sodalite backup copies SQLite stores")
        relative = store_file(source.data_dir, worker.name, store.path)
        destinations[worker.name] = target / relative
        entry: StoreCopy = {"name": worker.name, "file": relative}
        if relative.startswith("stores-absolute/"):
            entry["configuredPath"] = str(store.path)  # restore says where the configuration must point
        stores.append(entry)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArgumentError(f"destination: cannot create '{destination}': {exc.strerror}") from None
    taken_at = await backup.back_up(broker.workers, destinations)
    files = [entry["file"] for entry in stores]
    config_name = None
    if source.config is not None:
        shutil.copyfile(source.config, target / CONFIG_NAME)
        config_name = CONFIG_NAME
        files.append(CONFIG_NAME)
    for name in (CERT_FILE, KEY_FILE):
        if (source.data_dir / name).exists():
            shutil.copy2(source.data_dir / name, target / name)
            files.append(name)
    manifest: Manifest = {"format": FORMAT, "sodalite": __version__, "takenAt": taken_at,
                          "namespace": broker.namespace.name, "partitionCount": broker.namespace.partition_count,
                          "stores": stores, "config": config_name, "files": files}
    partial = target / (MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    partial.replace(target / MANIFEST)
    _sync_directory(target)
    size = sum((target / f).stat().st_size for f in files)
    return BackupRecord(str(target), taken_at, tuple(s["name"] for s in stores), tuple([*files, MANIFEST]), size)


def _sync_directory(path: Path) -> None:
    for directory in {path, *(p.parent for p in path.rglob("*") if p.is_file())}:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
