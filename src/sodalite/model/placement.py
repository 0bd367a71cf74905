"""Which groups of entities joined by auto-forwarding can run on the version-2 core (``--core v2``).

Theory of operation. Entities joined by forwarding (ForwardTo, ForwardDeadLetteredMessagesTo, a
subscription and its topic) move together: the broker gathers them into groups at start and asks
:func:`group_on_core` of each; a group that cannot run on the core stays on the version-1 path.

Where a member lives: a non-partitioned entity in its home store (a subscription in its topic's);
a partitioned one has N partitions, partition i in store i mod the stores, for every partitioned
entity alike. A topic on the core stores a send's copies that live in its own (partition's) store
in ONE transaction of that store; copies for entities in other stores (a subscription forwarding
into a queue, or another topic's subscriptions, elsewhere; a partitioned topic's partition i
forwarding into a non-partitioned entity outside store i; a non-partitioned topic forwarding into a
partitioned entity, whose partition the message's key picks as for a send) are stored first by a
batch of each of those stores, and the topic's own transaction commits last; the send is
acknowledged after all of them (``server/topic_actor.py``: at least once across stores, never
lost). So stores and partitioning no longer keep a group off the core. What does:

Dead letters forwarded (ForwardDeadLetteredMessagesTo) join a group like ForwardTo and keep none
off the core either: partition i of a partitioned member forwards into partition i of a
partitioned target, a target in the same store takes them in the dead-lettering's own
transaction, and any other target through a relay, at least once
(``server/dead_letter_relay.py``). So every group runs on the core; this function, and the
broker's ``_kept_on_v1`` that asks it, go with the version-1 path.
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
    """Whether a group joined by forwarding runs on the core: every group does now (module docstring)."""
    return True
