"""The dead-letter relay (``server/dead_letter_relay.py``) on real CoreActors over two SQLite stores.

The source's core forwards its dead letters into its own dead-letter queue, marked with its name
(``CoreActor.relay_dead_letters``); the relay appends them to the target in the other store under
move keys, then deletes them from the source. Dead letters come from a receiver's dead-lettering
(the receiver is a plain object with credit, as a link would be to the actor).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from peek_lock_taker import Taker
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.server import dead_letter_relay, move_keys
from sodalite.server.core_actor import CoreActor
from sodalite.server.dead_letter_relay import DeadLetterRelay, dead_letter_source
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef
from sodalite.store.sqlite import SqliteStore

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
BODY = b"\x00\x53\x75\xa0\x01x"


def draft(message_id: str) -> MessageDraft:
    return MessageDraft(message_id, None, None, 60_000, None, None, None, b"", 0, BODY)


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(300):  # within 30 s
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("not within 30 s")


async def rows(actor: CoreActor, sub: SubQueue = SubQueue.MAIN) -> list[MessageRecord]:
    return await actor.peek(sub, 0, 100)


Body = Callable[[CoreActor, CoreActor, list[StoreWorker]], Awaitable[None]]


def run(tmp_path: Path, body: Body) -> None:
    async def main() -> None:
        workers = []
        for name in ("a", "b"):
            store = SqliteStore(tmp_path / f"{name}.db", "NORMAL")
            store.open()
            workers.append(StoreWorker(store, name))
        source = CoreActor(PartitionRef("src", 3), SETTINGS, workers[0])
        target = CoreActor(PartitionRef("dst", 0), SETTINGS, workers[1])
        await source.load()
        await target.load()
        try:
            await body(source, target, workers)
        finally:
            await source.close()
            await target.close()

    asyncio.run(main())


async def _dead_letter(source: CoreActor, message_id: str) -> None:
    """Send a message, receive it and dead-letter it."""
    await source.send([draft(message_id)])
    receiver = Taker(1)
    source.add_consumer(receiver)

    async def received() -> bool:
        return bool(receiver.got)

    await eventually(received)
    source.remove_consumer(receiver)
    [(_, lock)] = receiver.got
    assert lock is not None
    await source.dead_letter(lock.token, "tired", "of it")


async def _dead_lettered(source: CoreActor, message_id: str) -> MessageRecord:
    """Dead-letter a message; its row, once in the dead-letter queue."""
    await _dead_letter(source, message_id)
    found: list[MessageRecord] = []

    async def dead() -> bool:
        found[:] = [r for r in await rows(source, SubQueue.DEAD_LETTER) if r.message_id == message_id]
        return bool(found)

    await eventually(dead)
    return found[0]


def test_a_dead_letter_is_carried_into_the_other_store_and_leaves_the_source(tmp_path: Path) -> None:
    async def body(source: CoreActor, target: CoreActor, workers: list[StoreWorker]) -> None:
        source.relay_dead_letters("src", None)
        relay = DeadLetterRelay(source, "src", target, SubQueue.MAIN)
        relay.start()
        await _dead_letter(source, "m1")

        async def arrived() -> bool:
            return [r.message_id for r in await rows(target)] == ["m1"]

        await eventually(arrived)
        [copy] = await rows(target)
        assert dead_letter_source(copy) == "src" and copy.delivery_count == 0
        assert b"tired" in copy.tail and b"of it" in copy.tail  # the dead-letter reason and description
        assert copy.expires_at == copy.enqueued_time + 60_000  # its time-to-live, from the forwarding
        await relay.idle()
        assert await rows(source, SubQueue.DEAD_LETTER) == []
        relay.stop()

    run(tmp_path, body)


def test_a_copy_an_earlier_run_appended_is_not_appended_again(tmp_path: Path) -> None:
    """A crash after the target's commit and before the source's delete: the key is in the target,
    so the relay (at the next start) only deletes the source's row: one copy, not two."""
    async def body(source: CoreActor, target: CoreActor, workers: list[StoreWorker]) -> None:
        source.relay_dead_letters("src", None)  # no relay yet: the marked row waits in the DLQ
        row = await _dead_lettered(source, "m2")
        ref = source.refs[SubQueue.DEAD_LETTER]
        key = f"a/{ref.entity}/{ref.partition}/{row.sequence_number}"
        assert await move_keys.append_keyed(target, SubQueue.MAIN, [replace(row, sequence_number=0)], [key]) == 1
        relay = DeadLetterRelay(source, "src", target, SubQueue.MAIN)
        relay.start()
        await relay.idle()
        assert [r.message_id for r in await rows(target)] == ["m2"]
        assert await rows(source, SubQueue.DEAD_LETTER) == []
        assert workers[1].store.partition_meta(target.refs[SubQueue.MAIN]).move_keys == ()  # forgotten
        relay.stop()

    run(tmp_path, body)


def test_with_the_target_store_offline_the_dead_letter_waits_then_arrives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dead_letter_relay, "RETRY_SECONDS", 0.2)

    async def body(source: CoreActor, target: CoreActor, workers: list[StoreWorker]) -> None:
        source.relay_dead_letters("src", None)
        relay = DeadLetterRelay(source, "src", target, SubQueue.MAIN)
        relay.start()
        workers[1].offline = True
        await _dead_lettered(source, "m3")
        await relay.idle()
        assert [r.message_id for r in await rows(source, SubQueue.DEAD_LETTER)] == ["m3"]  # kept, not lost
        workers[1].offline = False

        async def arrived() -> bool:
            return [r.message_id for r in await rows(target)] == ["m3"]

        await eventually(arrived)
        await relay.idle()
        assert await rows(source, SubQueue.DEAD_LETTER) == []
        relay.stop()

    run(tmp_path, body)


def test_dead_letters_from_before_the_forwarding_stay_where_they_are(tmp_path: Path) -> None:
    async def body(source: CoreActor, target: CoreActor, workers: list[StoreWorker]) -> None:
        await _dead_lettered(source, "old")  # no forwarding yet: an ordinary dead letter
        source.relay_dead_letters("src", None)
        relay = DeadLetterRelay(source, "src", target, SubQueue.MAIN)
        relay.start()
        await _dead_lettered(source, "new")

        async def arrived() -> bool:
            return [r.message_id for r in await rows(target)] == ["new"]

        await eventually(arrived)
        await relay.idle()
        assert [r.message_id for r in await rows(source, SubQueue.DEAD_LETTER)] == ["old"]
        relay.stop()

    run(tmp_path, body)
