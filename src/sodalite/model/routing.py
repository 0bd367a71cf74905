"""Where a send goes before any partition core sees it: pings end at the door, ForwardTo chains are
followed up to the hop limit, and past it the message goes to the transfer dead-letter queue. A dead
letter forwarded by ForwardDeadLetteredMessagesTo counts that forward as one hop more; a topic's
copy for a forwarding subscription counts the hops that brought the message to the topic too.

Pure rules over addresses: the caller says what an entity forwards to; nothing here knows actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, MessageDraft

MAX_TRANSFER_HOPS: Final = 4  # Service Bus forwards a message at most this many times (DLQ overview)

E = TypeVar("E")


def without_pings(drafts: list[MessageDraft]) -> tuple[list[MessageDraft], bool]:
    """The drafts less any paired-namespace pings, and whether there were any. A ping ends where it
    arrives: the sender's Send right was checked and the entity counts as used (AutoDeleteOnIdle),
    but nothing is stored or routed."""
    if not any(d.ping for d in drafts):
        return drafts, False
    return [d for d in drafts if not d.ping], True


def follow(start: E, next_hop: Callable[[E], E | None]) -> tuple[E, int, bool]:
    """Follow ForwardTo from ``start`` (``next_hop``: where an entity forwards to, None: nowhere):
    (where the chain ends, hops taken, whether it stopped at the hop limit). A chain longer than the
    limit, or a loop, stops at the entity where the limit was reached."""
    current, hops = start, 0
    while (target := next_hop(current)) is not None:
        if hops == MAX_TRANSFER_HOPS:
            return current, hops, True
        current, hops = target, hops + 1
    return current, hops, False


def hop_limit_dead_letter(hops: int, exceeded: bool) -> tuple[str, str] | None:
    """A message forwarded ``hops`` times in all (``exceeded``: its chain stopped at the limit): past
    the hop limit, the dead-lettering it gets in the transfer dead-letter queue where the chain
    stopped, (reason MaxTransferHopCountExceeded, description); else None (it is delivered)."""
    if exceeded or hops > MAX_TRANSFER_HOPS:
        return MAX_TRANSFER_HOP_COUNT_EXCEEDED, f"forwarded {hops} times"
    return None


def past_hop_limit(hops: int, exceeded: bool) -> str | None:
    """The description :func:`hop_limit_dead_letter` gives, or None."""
    dead_letter = hop_limit_dead_letter(hops, exceeded)
    return None if dead_letter is None else dead_letter[1]


def dead_letter_hop_limit(hops: int, exceeded: bool) -> str | None:
    """Dead letters forwarded (ForwardDeadLetteredMessagesTo) to a target whose ForwardTo chain takes
    ``hops`` more (``exceeded``: it stopped at the limit): the forward itself is one hop, so this is
    :func:`past_hop_limit` one hop further."""
    return past_hop_limit(hops + 1, exceeded)
