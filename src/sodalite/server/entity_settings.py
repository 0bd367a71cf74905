"""What every entity actor shares: its settings, its sub-queues, the receiver it delivers to, the clock.

These are the small types the partition cores (``server/core_actor.py``), their partitioned face
(``server/partitioned_actor.py``), the links and the management operations all use; they hold no
state of their own.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock

Clock = Callable[[], int]  # ms since the epoch


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class SubQueue(enum.Enum):
    """An entity's sub-queues and the path suffix that names each (sdk-wire-contract.md 1.2)."""

    MAIN = ""
    DEAD_LETTER = "/$deadletterqueue"
    TRANSFER_DEAD_LETTER = "/$transfer/$deadletterqueue"

    @classmethod
    def split(cls, path: str) -> tuple[str, SubQueue]:
        """``queue1/$deadletterqueue`` -> (``queue1``, DEAD_LETTER); paths are lower-cased already."""
        for sub in (cls.TRANSFER_DEAD_LETTER, cls.DEAD_LETTER):
            if path.endswith(sub.value):
                return path[: -len(sub.value)], sub
        return path, cls.MAIN


class Consumer(Hashable, Protocol):
    """A receiver link as the actor sees it (hashable: it is the core's consumer id too)."""

    peek_lock: bool
    sub_queue: SubQueue
    session_id: str | None  # the session this receiver holds, on a session entity
    reserved: int  # ReceiveAndDelete deliveries waiting for their delete to commit

    def credit(self) -> int: ...

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None: ...

    def drain_requested(self) -> bool: ...

    def drained(self) -> None: ...

    def session_lost(self) -> None: ...


def all_of(futures: Sequence[asyncio.Future[Any]]) -> asyncio.Future[None]:
    """One future for several: done when every one is, failed with the first failure."""
    combined: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if not futures:
        combined.set_result(None)
        return combined
    remaining = [len(futures)]

    def one_done(future: asyncio.Future[Any]) -> None:
        remaining[0] -= 1
        if not combined.done() and not future.cancelled() and future.exception() is not None:
            combined.set_exception(future.exception())  # type: ignore[arg-type]
        elif remaining[0] == 0 and not combined.done():
            combined.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return combined


@dataclass(frozen=True, slots=True)
class EntitySettings:
    """What the actor needs of its entity's properties, in milliseconds and bytes."""

    lock_duration: int
    default_ttl: int | None
    max_message_size: int
    max_delivery_count: int | None = None
    dead_lettering_on_message_expiration: bool = False
    requires_session: bool = False
    max_size_in_bytes: int | None = None  # MaxSizeInMegabytes
    duplicate_detection_window: int | None = None  # ms, when RequiresDuplicateDetection is on
