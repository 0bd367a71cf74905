"""A move from a queue on the core into a queue on the core in another store (server/moves.py), on
real CoreActors over two SQLite files: the target appends under move keys first, then the source
deletes; a repeat after a crash between the two (the target's append done, the source's delete not)
moves nothing twice, and the keys are forgotten once the source copies are gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sodalite.model.entities import QueueProperties
from sodalite.model.partition import MessageDraft
from sodalite.server import move_keys, moves
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.registry import Entity
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef
from sodalite.store.sqlite import SqliteStore

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
BODY = b"\x00\x53\x75\xa0\x01x"


def draft(message_id: str) -> MessageDraft:
    return MessageDraft(message_id, None, None, None, None, None, None, b"", 0, BODY)


async def _queue(path: Path, name: str) -> tuple[Entity, CoreActor]:
    store = SqliteStore(path, "NORMAL")
    store.open()
    actor = CoreActor(PartitionRef(name, 0), SETTINGS, StoreWorker(store, path.stem))
    await actor.load()
    return Entity(name, QueueProperties(), 262144, actor), actor


def test_a_repeat_after_a_crash_between_append_and_delete_moves_nothing_twice(tmp_path: Path) -> None:
    async def scenario() -> None:
        source, src = await _queue(tmp_path / "one.db", "src")
        target, dst = await _queue(tmp_path / "two.db", "dst")
        try:
            await src.send([draft("a"), draft("b"), draft("c")])
            numbers = [r.sequence_number for r in await src.peek(SubQueue.MAIN, 0, 10)]
            # The first attempt appended "a" under its key, then the broker died before the delete.
            first = (await src.fetch(SubQueue.MAIN, numbers[:1]))[0].record
            assert await move_keys.append_moved(dst, [moves.moved_draft(first)], [f"one/src/0/{numbers[0]}"]) == 1
            result = await moves.move(source, SubQueue.MAIN, numbers, target)
            assert (result.moved, result.skipped) == (3, 0)
            assert await src.peek(SubQueue.MAIN, 0, 10) == []
            ids = [r.message_id for r in await dst.peek(SubQueue.MAIN, 0, 10, states=ALL_STATES)]
            assert ids == ["a", "b", "c"]  # "a" once
            worker = dst.worker
            meta = await worker.call(lambda: worker.store.partition_meta(dst.refs[SubQueue.MAIN]))
            assert meta.move_keys == ()
        finally:
            await src.close()
            await dst.close()

    asyncio.run(scenario())
