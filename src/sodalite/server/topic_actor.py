"""A topic on the partition core (``sodalite serve --core v2``): a send's copies for every
subscription in one store transaction.

Theory of operation. A topic stores nothing of a plain send: the message's copies go to its
subscriptions, each a queue on the core (:class:`~sodalite.server.core_actor.CoreActor`) kept in
the topic's messaging store. The broker plans the copies (``plan``: each subscription's rules and
actions, filter errors to the subscription's dead-letter queue, copies a session-enabled
subscription cannot take likewise, numbered by the subscription's partition as on version 1, so they
never meet the numbers its dead-lettered messages keep; ``server/fanout.py``), and this actor hands them to the topic's
own core as one :class:`~sodalite.model.partition_core.Publish`: the core applies the topic's
duplicate detection and emits one batch holding every copy (``AppendTo`` each subscription's
partition) and the duplicate history. The send is acknowledged when that batch committed
(:class:`~sodalite.model.partition_core.Published`); only then is each subscription's core told
that rows landed in it (:class:`~sodalite.model.partition_core.Landed`), so a receiver waiting
there gets them at once. A message no subscription takes is acknowledged and goes nowhere, as in
Service Bus.

Scheduled messages (``ScheduleMessage`` on the topic) are the exception: they wait in the topic's
own partition (the inherited queue path: numbers returned, cancel by number, the topic's
duplicate detection) until their time. When one comes due the topic's core hands it to this
actor's activator, a PeekLock receiver that never leaves; the copies are planned then, with the
rules as they are at that moment, and published with the topic's lock completed in the same batch
(``Publish(complete=token)``), so a crash publishes it once or not at all (the lock lapses and it
is handed out again). Should the topic's lock lapse while that batch waits (a store stalled for the
whole lock duration), the completion is refused but the copies in the same batch are still stored,
and the message is published again when it is handed out anew: at least once, never lost.

A message sent with a ScheduledEnqueueTimeUtc annotation is a plain send: its copies wait,
scheduled, in each subscription.

A subscription that forwards (ForwardTo) has its copies planned into where its chain of ForwardTo
leads: a queue, or another topic's subscriptions, each on the core in the topic's store, within the
hop limit (beyond it, into the transfer dead-letter queue where it was reached); all of them in the
same batch.

A partitioned topic (EnablePartitioning) is :class:`PartitionedTopicActor`: a ``TopicActor`` per
partition behind the routing of ``PartitionedCoreActor``, each subscription a ``PartitionedCoreActor``
of as many ``CoreActor`` partitions, partition i of each in messaging store i mod the stores. A send
is pinned to a topic partition as a partitioned queue's (SessionId, else PartitionKey, else MessageId
under duplicate detection; keyless ones round-robin over the available partitions) and that
partition's core publishes it as above, its copies into partition i of each subscription (and of a
partitioned entity a subscription forwards into, or a non-partitioned one that lives in the same
store): one transaction of that partition's store. Duplicate detection and scheduled messages are
each partition's own; a store that fails a publish suspends the topic's partitions in it, as a
partitioned queue's.

A transactional send to the topic (``server/core_transactions.py``) is planned the same way and its
copies stored by the core that commits the transaction, in that one batch.

A subscription that forwards its dead letters (ForwardDeadLetteredMessagesTo) has a copy that fails
its filter planned into that target (``CoreActor.dead_letter_copy``), in the same batch.

Moves into the topic (server/moves.py) put the messages into the topic's own partition, ACTIVE:
from a queue on the core in the same store in that queue's transaction, from elsewhere under move
keys (``CoreActor.append_moved``). The activator takes them like scheduled messages that came due,
so each fans out to the subscriptions with the rules as they are then, its copies and its completion
in one batch.

Not on the core yet (the broker keeps such topics on version 1): a partitioned topic joined by
forwarding to a non-partitioned entity at start; moves into a partitioned topic are refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server import wire
from sodalite.server.core_actor import Copy, CoreActor, _without_value
from sodalite.server.partition_actor import SubQueue, all_of
from sodalite.server.partitioned_actor import PartitionedCoreActor

log = logging.getLogger(__name__)

ACTIVATION_CREDIT = 64  # due scheduled messages the activator takes at a time

Plan = Callable[[Sequence[MessageDraft], int], list[list[Copy]]]
"""The broker's plan: per draft, in order, its copies (rules applied) at ``now``."""


class _Activator:
    """The topic's own receiver: scheduled messages that came due, to be published."""

    sub_queue = SubQueue.MAIN
    peek_lock = True
    session_id = None

    def __init__(self, topic: TopicActor) -> None:
        self._topic = topic

    def credit(self) -> int:
        return ACTIVATION_CREDIT

    def drain_requested(self) -> bool:
        return False

    def deliver(self, message: MessageRecord, lock: Lock | None) -> None:
        self._topic._activated(message, lock)

    def session_lost(self) -> None:
        pass


class TopicActor(CoreActor):
    """A non-partitioned topic on the core (see the module docstring)."""

    plan: Plan | None = None  # set by the broker once the topic's entity exists

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._activator = _Activator(self)
        self._activating = False

    async def load(self) -> None:
        await super().load()
        if self._activating and self._activator not in self._consumers:
            self.add_consumer(self._activator)

    def start_activation(self) -> None:
        """Publish scheduled messages as they come due, from now on. The broker calls it once the
        topic's subscriptions are loaded: a message published before would reach none of them."""
        self._activating = True
        if self.runners and self._activator not in self._consumers:
            self.add_consumer(self._activator)

    # ---- sending ----------------------------------------------------------------------------------

    def publish(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to the topic: acknowledged once every subscription's copies are durable."""
        self._check_send(drafts)
        entries = self._entries([d for d in drafts if not d.ping])  # a ping is accepted, never stored
        return _without_value(self._request(SubQueue.MAIN, lambda key: core.Publish(entries, key)))

    def _entries(self, drafts: Sequence[MessageDraft]) -> tuple[core.PublishEntry, ...]:
        if not drafts:
            return ()
        if self.plan is None:
            raise RuntimeError(f"topic {self.ref.entity}: no fan-out plan (the broker sets it when it loads the topic)")
        planned = self.plan(drafts, self.clock.now())
        return self.publish_entries([(d.message_id, copies) for d, copies in zip(drafts, planned, strict=True)])

    # ---- scheduled messages that came due ---------------------------------------------------------

    def _activated(self, message: MessageRecord, lock: Lock | None) -> None:
        self.credit_changed(self._activator)  # the activator takes the next one too
        if lock is None:  # the activator receives in PeekLock: never without a lock
            return
        token = lock.token
        try:
            entries = self._entries([wire.forwarded_draft(message)])
            future = self._request(SubQueue.MAIN, lambda key: core.Publish(entries, key, complete=token))
        except Exception:
            log.exception("topic %s: publishing scheduled message %d failed; it comes back when its lock "
                          "lapses", self.ref.entity, message.sequence_number)
            return

        def done(f: asyncio.Future[Any]) -> None:
            self._holders.pop(token, None)
            if not f.cancelled() and f.exception() is not None:
                log.warning("topic %s: scheduled message %d not published (%s); it comes back when its lock "
                            "lapses", self.ref.entity, message.sequence_number, f.exception())

        future.add_done_callback(done)

    # ---- what the broker reads --------------------------------------------------------------------

    def activity(self) -> tuple[int, int]:
        last, _ = super().activity()
        return last, sum(1 for c in self._consumers if c is not self._activator)

    def is_idle(self, now: int, idle_for: int) -> bool:
        """Idle as a queue is, the activator aside (it is the topic's own, not a receiver)."""
        runner = self.runners.get(SubQueue.MAIN)
        if runner is None or any(c is not self._activator for c in self._consumers):
            return False
        last = max(self.last_activity, runner.view.last_activity)
        return now - last >= idle_for and runner.view.counts.scheduled == 0


class PartitionedTopicActor(PartitionedCoreActor):
    """A partitioned topic on the core: one :class:`TopicActor` per partition (module docstring)."""

    def __init__(self, partitions: Sequence[TopicActor]) -> None:
        super().__init__(partitions)
        self.topics: list[TopicActor] = list(partitions)

    def publish(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to the topic: each message to the partition its key pins it to (keyless ones of a
        send together), acknowledged once every partition's copies are durable."""
        futures = []
        for partition, indexes in self.route(drafts):
            assert isinstance(partition, TopicActor)
            future = partition.publish([drafts[i] for i in indexes])
            future.add_done_callback(functools.partial(self._sent, partition))
            futures.append(future)
        return all_of(futures)

    def start_activation(self) -> None:
        for topic in self.topics:
            topic.start_activation()
