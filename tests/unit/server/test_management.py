"""The $management dispatcher: every failure becomes a response with the right status and condition."""

from __future__ import annotations

import asyncio
import uuid

from sodalite.amqp.types import Array
from sodalite.server import management
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef


def _run(operation: str, body: object) -> management.Response:
    async def run() -> management.Response:
        store = MemoryStore()
        store.open()
        worker = StoreWorker(store, "m")
        await worker.open()
        actor = CoreActor(PartitionRef("q"), EntitySettings(60_000, None, 262144), worker)
        await actor.load()
        try:
            return await management.execute(management.Context(actor, SubQueue.MAIN, object(), 262144),
                                            operation, body)
        finally:
            await actor.close()
            await worker.close()

    return asyncio.run(run())


def test_unknown_operation_is_501_not_implemented() -> None:
    response = _run("com.microsoft:delete-messages", {})
    assert (response.status, response.condition) == (501, "amqp:not-implemented")


def test_body_that_is_not_a_map_is_an_argument_error() -> None:
    response = _run("com.microsoft:peek-message", [1, 2])
    assert (response.status, response.condition) == (400, "com.microsoft:argument-error")


def test_renew_of_an_unknown_lock_is_410_lock_lost() -> None:
    response = _run("com.microsoft:renew-lock", {"lock-tokens": Array("uuid", (uuid.uuid4(),))})
    assert (response.status, response.condition) == (410, "com.microsoft:message-lock-lost")


def test_peek_of_an_empty_queue_is_204() -> None:
    response = _run("com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 10})
    assert response.status == 204 and response.body is None


def test_receiving_an_unknown_sequence_number_is_404_message_not_found() -> None:
    response = _run("com.microsoft:receive-by-sequence-number",
                    {"sequence-numbers": Array("long", (42,)), "receiver-settle-mode": 1})
    assert (response.status, response.condition) == (404, "com.microsoft:message-not-found")


def test_cancelling_an_unknown_schedule_is_404() -> None:
    response = _run("com.microsoft:cancel-scheduled-message", {"sequence-numbers": Array("long", (7,))})
    assert (response.status, response.condition) == (404, "com.microsoft:message-not-found")


def test_unknown_disposition_status_is_an_argument_error() -> None:
    response = _run("com.microsoft:update-disposition",
                    {"disposition-status": "vanished", "lock-tokens": Array("uuid", (uuid.uuid4(),))})
    assert response.status in (400, 410)
