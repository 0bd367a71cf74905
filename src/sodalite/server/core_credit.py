"""A core actor's receivers: their credit, their deliveries, their drains.

Rules:

1. A receiver's credit reaches its sub-queue's core as ``Receive`` commands: the difference
   between the link's credit and what the core was given so far (:meth:`Credit.changed`). A
   session receiver asking with no more credit renews its session.
2. Each delivery uses one credit given. A delivery the receiver can no longer take (its credit was
   lowered, or it left) goes back at once: a PeekLock one is released, which gives the delivery
   count back; a ReceiveAndDelete one (deleted already, its transfer never written) is put back in
   place (``core.Unsent``).
3. A drain is answered once the runner carried out everything decided so far: whatever was ready
   was delivered by then, and the rest of the credit is spent.
4. A receiver that leaves ends its credit; its locks live on in the store until they lapse.
5. A partitioned queue splits a receiver's credit over its partitions with :meth:`Credit.ready`,
   :meth:`Credit.given_to`, :meth:`Credit.withdraw` and :meth:`Credit.caught_up`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Protocol, cast

from sodalite.model import partition_core as core
from sodalite.model.copies import as_delivered
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock
from sodalite.model.store_ops import Outcome
from sodalite.server.entity_settings import SubQueue

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor
    from sodalite.server.partition_runner import PartitionRunner


class Receiver(Hashable, Protocol):
    """A receiver as a core actor sees it: a client's receiver link (``links.LinkConsumer``), one
    partition's share of one (``partitioned_actor._Share``) or a topic's own activator. The actor
    hands it to the core as the core's opaque consumer id, and the core hands it back with each
    delivery."""

    @property
    def sub_queue(self) -> SubQueue: ...

    @property
    def peek_lock(self) -> bool: ...

    @property
    def session_id(self) -> str | None: ...  # the session it holds, on a session entity

    def credit(self) -> int: ...

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None: ...

    def drain_requested(self) -> bool: ...

    def drained(self) -> None: ...

    def session_lost(self) -> None: ...


def mode_of(receiver: Receiver) -> core.ReceiveMode:
    return core.ReceiveMode.PEEK_LOCK if receiver.peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE


def _selects(receiver: object) -> Callable[[MessageRecord], bool] | None:
    """A JMS consumer's selector (``links.LinkConsumer.selects``), if it has one."""
    selects = getattr(receiver, "selects", None)
    return selects if callable(selects) else None


class Credit:
    """The receivers attached to one core actor and the credit each handed to its core."""

    __slots__ = ("_actor", "_draining", "_given", "receivers")

    def __init__(self, actor: CoreActor) -> None:
        self._actor = actor
        self.receivers: set[Receiver] = set()
        self._given: dict[Receiver, int] = {}  # credit handed to the core, per receiver
        self._draining: set[Receiver] = set()

    def add(self, receiver: Receiver) -> None:
        self.receivers.add(receiver)
        self._given.setdefault(receiver, 0)
        self.changed(receiver)

    def remove(self, receiver: Receiver) -> None:
        """Rule 4 (a session receiver's session is released, and the messages riding on it with it)."""
        self.receivers.discard(receiver)
        self._given.pop(receiver, None)
        self._draining.discard(receiver)
        actor = self._actor
        runner = actor.runners.get(receiver.sub_queue if hasattr(receiver, "sub_queue") else SubQueue.MAIN)
        if runner is not None and actor.available:
            runner.submit(core.CloseConsumer(receiver))

    def changed(self, receiver: Receiver) -> None:
        """Rules 1 and 3: the receiver's credit (or its drain flag) changed."""
        actor = self._actor
        if receiver not in self.receivers or not actor.available:
            return
        runner = actor.runners[receiver.sub_queue]
        given = self._given.get(receiver, 0)
        more = receiver.credit() - given
        if more > 0:
            self._given[receiver] = given + more
            runner.submit(core.Receive(receiver, more, mode_of(receiver), _selects(receiver)))
        elif receiver.session_id is not None:
            runner.submit(core.Receive(receiver, 0, mode_of(receiver)))  # asking renews the session
        if receiver.drain_requested() and receiver not in self._draining:
            self._draining.add(receiver)
            asyncio.get_running_loop().create_task(self._drain(receiver, runner))

    def deliver(self, sub: SubQueue, reply: core.Delivered) -> None:
        """Rule 2: hand a delivery to its receiver, or give it back."""
        receiver = cast(Receiver, reply.consumer)  # as the actor gave it to the core
        given = self._given.get(receiver)
        if given is not None:
            self._given[receiver] = max(given - 1, 0)
        token = reply.lock_token
        actor = self._actor
        if receiver not in self.receivers or receiver.credit() <= 0:
            if token is not None:
                actor.runners[sub].submit(core.Settle(token, Outcome.RELEASE))
            else:
                actor.unsent(sub, (reply.message,))
            return
        message = as_delivered(reply.message)
        if token is None:
            receiver.deliver(message, None)
            return
        actor.holders[token] = sub
        locked_until = reply.locked_until if reply.locked_until is not None else 0
        receiver.deliver(message, Lock(token, message.sequence_number, locked_until, receiver))

    async def _drain(self, receiver: Receiver, runner: PartitionRunner) -> None:
        try:
            await runner.drained()
        finally:
            self._draining.discard(receiver)
        if receiver in self.receivers and receiver.drain_requested():
            self._given[receiver] = 0
            if receiver.session_id is None:
                runner.submit(core.CloseConsumer(receiver))  # no credit left with the core
            receiver.drained()

    def waiting(self) -> set[SubQueue]:
        """The sub-queues where a receiver waits with credit given."""
        return {r.sub_queue for r in self.receivers if self._given.get(r, 0) > 0}

    # ---- a partitioned queue's split of a receiver's credit (rule 5) -----------------------------------

    def ready(self, sub: SubQueue) -> int:
        """How many messages the core could hand out now (its window of ready ones)."""
        runner = self._actor.runners.get(sub)
        return len(runner.view.window.order) if runner is not None and self._actor.available else 0

    def given_to(self, receiver: Receiver) -> int:
        """The credit ``receiver`` gave the core that it has not delivered on yet, claimed or not."""
        return self._given.get(receiver, 0)

    def withdraw(self, receiver: Receiver) -> int:
        """Take back the credit ``receiver`` (not a session receiver) gave and the core has not used
        for a claim yet; claims already in flight still deliver. Returns how much."""
        actor = self._actor
        runner = actor.runners.get(receiver.sub_queue)
        if runner is None or receiver not in self.receivers or not actor.available:
            return 0
        held = runner.view.credit.get(receiver)
        unclaimed = held.count if held is not None else 0
        if unclaimed <= 0:
            return 0
        runner.submit(core.CloseConsumer(receiver))  # its credit goes ...
        runner.submit(core.Receive(receiver, 0, mode_of(receiver), _selects(receiver)))  # ... and it is known again
        self._given[receiver] = max(self._given.get(receiver, 0) - unclaimed, 0)
        return unclaimed

    async def caught_up(self, sub: SubQueue) -> None:
        """Wait until ``sub``'s runner has carried out everything decided so far (claims delivered)."""
        runner = self._actor.runners.get(sub)
        if runner is not None:
            await runner.drained()
