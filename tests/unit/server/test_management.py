"""The $management dispatcher: every failure becomes a response with the right status and condition."""

from __future__ import annotations

import asyncio
import uuid

from sodalite.amqp.types import Array
from sodalite.server import management
from sodalite.server.partition_actor import EntitySettings, PartitionActor
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef


def _actor() -> PartitionActor:
    store = MemoryStore()
    store.open()
    return PartitionActor(PartitionRef("q"), EntitySettings(60_000, None, 262144), StoreWorker(store, "m"))


def test_unknown_operation_is_501_not_implemented() -> None:
    response = management.execute(_actor(), "com.microsoft:schedule-message", {})
    assert (response.status, response.condition) == (501, "amqp:not-implemented")


def test_body_that_is_not_a_map_is_an_argument_error() -> None:
    response = management.execute(_actor(), "com.microsoft:peek-message", [1, 2])
    assert (response.status, response.condition) == (400, "com.microsoft:argument-error")


def test_renew_of_an_unknown_lock_is_410_lock_lost() -> None:
    body = {"lock-tokens": Array("uuid", (uuid.uuid4(),))}
    response = management.execute(_actor(), "com.microsoft:renew-lock", body)
    assert (response.status, response.condition) == (410, "com.microsoft:message-lock-lost")


def test_peek_of_an_empty_queue_is_204() -> None:
    async def run() -> None:
        actor = _actor()
        await actor.load()
        response = management.execute(actor, "com.microsoft:peek-message",
                                      {"from-sequence-number": 1, "message-count": 10})
        assert response.status == 204 and response.body is None

    asyncio.run(run())
