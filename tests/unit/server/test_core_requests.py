"""server/core_requests.py: requests to a core typed by their answer; the core's refusals as the client's errors."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sodalite.errors import (
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    OperationTimeout,
    SessionCannotBeLocked,
    SessionLockLost,
    StoreFull,
    StoreUnavailable,
)
from sodalite.model import partition_core as core
from sodalite.server.core_requests import Done, Numbers, Pending, Refusal, Until, refusal


def test_a_reply_answers_only_a_request_of_its_class_and_only_once() -> None:
    async def run() -> None:
        pending = Pending()
        numbers = pending.add(Numbers())
        pending.answer(numbers, Done, None)  # not the answer a schedule waits for
        assert not numbers.done()
        pending.answer(numbers, Numbers, [5, 6])
        pending.fail(numbers, StoreUnavailable("late"))  # answered already: stays so
        assert numbers.result() == [5, 6]
        assert not pending
        pending.answer(("sodalite.partition_core", "no reply"), Done, None)  # the core's own: no request

    asyncio.run(run())


def test_closing_fails_every_request_still_waiting() -> None:
    async def run() -> None:
        pending = Pending()
        done, until = pending.add(Done()), pending.add(Until())
        pending.answer(done, Done, None)
        pending.fail_all(StoreUnavailable("closing"))
        assert done.result() is None
        with pytest.raises(StoreUnavailable):
            until.result()
        assert not pending

    asyncio.run(run())


@pytest.mark.parametrize(("reply", "store_full", "error", "condition"), [
    (core.LockLost(1, uuid.UUID(int=1)), False, MessageLockLost, "com.microsoft:message-lock-lost"),
    (core.ServerBusy(1), False, StoreUnavailable, "com.microsoft:server-busy"),
    (core.ServerBusy(1), True, StoreFull, "amqp:resource-limit-exceeded"),
    (core.Refused(1, "no SessionId"), False, InvalidOperation, "amqp:not-allowed"),
    (core.SessionCannotBeLocked(1, "s"), False, SessionCannotBeLocked, "com.microsoft:session-cannot-be-locked"),
    (core.NoSessionAvailable(1), False, OperationTimeout, "com.microsoft:timeout"),
    (core.SessionLockLost(1, "s"), False, SessionLockLost, "com.microsoft:session-lock-lost"),
    (core.MessageNotFound(1, (3, 4)), False, MessageNotFound, "com.microsoft:message-not-found"),
])
def test_each_refusal_is_the_error_with_its_service_bus_condition(reply: Refusal, store_full: bool,
                                                                  error: type[Exception], condition: str) -> None:
    found = refusal(reply, "main", store_full)
    assert type(found) is error
    assert found.condition == condition


def test_a_cancel_of_unknown_numbers_names_them_in_service_bus_words() -> None:
    found = refusal(core.MessageNotFound(1, (3, 4)), "main", False)
    assert found.description.startswith("Messages not found. Missing sequence numbers: 3, 4")
