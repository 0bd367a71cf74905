"""Moves and purges with a partitioned queue on the core as the source (server/moves.py), on real
CoreActors over two SQLite files: each partition's core moves its own rows (the numbers name the
partition), a number naming no partition is counted as skipped, the progress is told over all
partitions, and the selection reads every partition in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sodalite.model.entities import QueueProperties
from sodalite.model.partition import MessageDraft
from sodalite.server import moves
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partitioned_actor import PartitionedCoreActor
from sodalite.server.registry import Entity
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef
from sodalite.store.sqlite import SqliteStore

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
BODY = b"\x00\x53\x75\xa0\x01x"
COUNT = 3


def draft(message_id: str, key: str) -> MessageDraft:
    return MessageDraft(message_id, None, key, None, None, None, None, b"", 0, BODY)


def _workers(tmp_path: Path) -> list[StoreWorker]:
    workers = []
    for name in ("one", "two"):
        store = SqliteStore(tmp_path / f"{name}.db", "NORMAL")
        store.open()
        workers.append(StoreWorker(store, name))
    return workers


def test_a_move_from_every_partition_and_a_purge(tmp_path: Path) -> None:
    async def scenario() -> None:
        workers = _workers(tmp_path)
        partitioned = PartitionedCoreActor([CoreActor(PartitionRef("pq", i), SETTINGS, workers[i % 2])
                                            for i in range(COUNT)])
        single = CoreActor(PartitionRef("single", 0), SETTINGS, workers[1])
        await partitioned.load()
        await single.load()
        source = Entity("pq", QueueProperties(enable_partitioning=True), 262144, partitioned)
        target = Entity("single", QueueProperties(), 262144, single)
        try:
            await partitioned.send([draft(f"m{i}", f"key-{i}") for i in range(9)])
            numbers = await moves.select_messages(source, SubQueue.MAIN)
            assert len(numbers) == 9 and numbers == sorted(numbers)
            assert len({n >> 48 for n in numbers}) > 1  # spread over partitions
            told: list[tuple[int, int]] = []
            picked = numbers[:6]
            result = await moves.move(source, SubQueue.MAIN, [*picked, (7 << 48) + 1], target,
                                      chunk=2,
                                      progress=lambda done, total: told.append((done, total)))
            assert (result.moved, result.skipped) == (6, 1)  # the last number names no partition
            assert told[-1] == (6, 7) and [d for d, _ in told] == sorted(d for d, _ in told)
            moved = sorted(r.message_id or "" for r in await single.peek(SubQueue.MAIN, 0, 20, states=ALL_STATES))
            left = await moves.select_messages(source, SubQueue.MAIN)
            assert left == numbers[6:] and len(moved) == 6
            purged = await moves.purge(source, SubQueue.MAIN)
            assert (purged.moved, purged.skipped) == (3, 0)
            assert await moves.select_messages(source, SubQueue.MAIN) == []
        finally:
            await partitioned.close()
            await single.close()

    asyncio.run(scenario())
