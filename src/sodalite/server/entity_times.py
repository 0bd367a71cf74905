"""When each entity was created and last updated (the management API's CreatedAt and UpdatedAt).

Rules:
- One record per entity, of a kind the entity loader skips, at ``$entitytimes/<lower-cased path>``
  ('$' keeps it apart from entity names), holding ``[created, updated]`` (ms) under "Times", so two
  nodes creating or updating entities at once keep both.
- An entity first seen without times (created before times were kept) was created now.
- An older release kept one record at ``$entitytimes`` for all entities (``{path: [created, updated]}``);
  the start splits it into one per entity.
- An unreadable record is logged and ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sodalite.store.port import DeleteEntity, EntityRecord, PutEntity

log = logging.getLogger(__name__)

ENTITY_TIMES_PATH, ENTITY_TIMES_KIND = "$entitytimes", "entity-times"


def times_path(path: str) -> str:
    return f"{ENTITY_TIMES_PATH}/{path.lower()}"


def stored_times(records: Sequence[EntityRecord]) -> tuple[dict[str, list[int]], bool]:
    """The entity times in ``records`` (lower-cased path -> [created, updated]) and whether they
    include the older release's one record for all entities (which the start then splits)."""
    times: dict[str, list[int]] = {}
    legacy = False
    prefix = ENTITY_TIMES_PATH.lower() + "/"
    for record in records:
        if record.kind != ENTITY_TIMES_KIND:
            continue
        try:
            if record.path.lower() == ENTITY_TIMES_PATH:
                legacy = True
                for path, pair in record.properties.items():
                    times.setdefault(str(path).lower(), [int(pair[0]), int(pair[1])])
            elif record.path.lower().startswith(prefix):
                pair = record.properties["Times"]
                times[record.path[len(prefix):].lower()] = [int(pair[0]), int(pair[1])]
        except (KeyError, IndexError, TypeError, ValueError):
            log.warning("entity times record %s is unreadable; ignored", record.path)
    return times, legacy


class EntityTimes:
    """The times of every entity this node knows (lower-cased path -> [created, updated], ms)."""

    def __init__(self) -> None:
        self.times: dict[str, list[int]] = {}

    def load(self, stored: Sequence[EntityRecord], known: Iterable[str], now: int) -> list[PutEntity | DeleteEntity]:
        """Read the stored times; the entities ``known`` (lower-cased paths) without any were created
        ``now``. The records to write: those new ones, or every one where the older release's single
        record is split (and that record deleted)."""
        self.times, legacy = stored_times(stored)
        known = set(known)
        missing = known - set(self.times)
        for path in missing:
            self.times[path] = [now, now]
        changes: list[PutEntity | DeleteEntity] = [self.record(path) for path in sorted(known if legacy else missing)]
        if legacy:
            changes.append(DeleteEntity(ENTITY_TIMES_PATH))
        return changes

    def follow(self, stored: Sequence[EntityRecord]) -> None:
        """Take up the times of entities created or changed through another node."""
        self.times.update(stored_times(stored)[0])

    def record(self, path: str) -> PutEntity:
        """The one entity's times record (only its own: another node may be writing another's)."""
        times = self.times[path.lower()]
        return PutEntity(EntityRecord(times_path(path), ENTITY_TIMES_KIND, {"Times": list(times)}))

    def touched(self, path: str, now: int, *, created: bool = False) -> PutEntity:
        """Note an entity's creation or update ``now``; the record to store with it."""
        times = self.times.setdefault(path.lower(), [now, now])
        if created:
            times[0] = now
        times[1] = now
        return self.record(path)

    def of(self, path: str) -> tuple[int, int] | None:
        """(created, updated) in ms since the epoch."""
        times = self.times.get(path.lower())
        return (times[0], times[1]) if times is not None else None

    def forget(self, path: str) -> DeleteEntity:
        """The entity is deleted: its times go; the deletion of their record."""
        self.times.pop(path.lower(), None)
        return DeleteEntity(times_path(path))
