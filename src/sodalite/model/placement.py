"""Which groups of entities joined by auto-forwarding can run on the version-2 core (``--core v2``).

Theory of operation. A topic on the core stores a send's copies (its subscriptions', and those its
subscriptions forward into queues or other topics' subscriptions) in ONE transaction of one
messaging store, so every entity a send can reach from a topic must be on the core and in that
store. Entities joined by forwarding (ForwardTo, ForwardDeadLetteredMessagesTo, a subscription
and its topic) therefore move together: the broker gathers them into groups at start and asks
:func:`group_on_core` of each; a group that cannot run on the core stays on the version-1 path.

Where a member lives: a non-partitioned entity in its home store (a subscription in its topic's);
a partitioned one has N partitions, partition i in store i mod the stores, for every partitioned
entity alike. So partition i of a partitioned topic and partition i of each of its subscriptions,
and of a partitioned queue or topic they forward into, share one store: copies from topic
partition i go to partition i of each destination. A group runs on the core when:

* it holds no partitioned member and all members share one home store; or
* every member is partitioned (a partitioned queue alone; a partitioned topic, its subscriptions
  and the partitioned queues and topics they forward into; partitioned queues joined by a queue's
  ForwardTo, which the broker routes when a send arrives).

A group mixing partitioned and non-partitioned members stays on version 1: a non-partitioned
topic's copy would need a partition picked for it, and a non-partitioned destination of a
partitioned topic lies in one store, not in each partition's.

ForwardDeadLetteredMessagesTo joins a group like ForwardTo, and is no reason of its own to stay on
version 1: partition i of a partitioned member forwards into partition i of a partitioned target
(the same store). (The broker forwards into a target in another store through a relay, at least
once, ``server/dead_letter_relay.py``: for entities on the core whose group placement does not
decide, those created at runtime.)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    """One entity of a group joined by forwarding, as far as placement goes."""

    partitioned: bool  # a subscription is partitioned as its topic is
    home: Hashable  # the store a non-partitioned member lives in (ignored for a partitioned one)


def group_on_core(members: Sequence[Member]) -> bool:
    """Whether a group joined by forwarding runs on the core (module docstring)."""
    partitioned = sum(1 for m in members if m.partitioned)
    if not partitioned:
        return len({m.home for m in members}) <= 1
    return partitioned == len(members)
