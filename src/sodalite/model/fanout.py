"""Which copies of a topic message one subscription gets (Service Bus "topic filters and actions"). Pure.

Rules:

1. Rules without an action are OR'ed: if any matches, the subscription gets the message once, as
   sent, before any other copy.
2. Each matching rule with an action gets its own copy, changed by the action (the caller writes
   the changes, and the rule's name as the ``RuleName`` application property, into the message).
3. A rule whose filter or action fails to evaluate sends the copy, as sent, to the subscription's
   dead-letter queue (reason ``FilterEvaluationException``) when DeadLetteringOnFilterEvaluationExceptions
   is set, and drops it otherwise; the send itself never fails for it.
4. A session-enabled subscription dead-letters a copy without a SessionId (after its action), as
   the service does (reason ``Session ID is null.``).
5. Where each copy lands (:func:`fan_out`, over addresses the caller resolves): a dead-lettered copy
   in the subscription's dead-letter queue; a copy of a subscription without ForwardTo in the
   subscription; a forwarding subscription's copy where its ForwardTo chain ends, counting the hops
   that brought the message to the topic, and in the transfer dead-letter queue there (reason
   ``MaxTransferHopCountExceeded``) past the hop limit; a chain that ends in a topic fans out again
   there, with the hops so far.

Filters see the message through :class:`~sodalite.model.filters.MessageView`; what the message
becomes is the caller's business (``server/fanout.py`` encodes it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from sodalite.errors import FilterEvaluationError
from sodalite.model.entities import RuleDescription
from sodalite.model.filters import CompiledAction, CompiledFilter, MessageView, compile_action, compile_filter
from sodalite.model.routing import hop_limit_dead_letter

SESSION_ID_IS_NULL = "Session ID is null."
FILTER_EVALUATION_FAILED = "FilterEvaluationException"


@dataclass(frozen=True, slots=True)
class CompiledRule:
    name: str
    filter: CompiledFilter
    action: CompiledAction | None
    description: RuleDescription

    @classmethod
    def compile(cls, rule: RuleDescription) -> CompiledRule:
        return cls(rule.name, compile_filter(rule.filter), compile_action(rule.action), rule)


@dataclass(frozen=True, slots=True)
class PlannedCopy:
    """One copy for a subscription: as sent (``rule`` None) or as ``rule``'s action left the message
    (``after``); ``dead_letter`` holds (reason, description) when it goes to the dead-letter queue."""

    rule: str | None = None
    after: MessageView | None = None
    dead_letter: tuple[str, str] | None = None


def plan(rules: list[CompiledRule], view: MessageView, session_id: str | None, dead_letter_on_errors: bool,
         requires_session: bool) -> list[PlannedCopy]:
    """The copies one subscription gets of the message ``view`` shows (none if no rule matches)."""
    plain_match = False
    copies: list[PlannedCopy] = []
    for rule in rules:
        try:
            if not rule.filter.matches(view):
                continue
            if rule.action is None:
                plain_match = True
                continue
            copies.append(PlannedCopy(rule.name, rule.action.apply(view)))
        except FilterEvaluationError as exc:
            if dead_letter_on_errors:
                copies.append(PlannedCopy(dead_letter=(FILTER_EVALUATION_FAILED,
                                                       f"rule '{rule.name}': {exc.description}")))
    if plain_match:
        copies.insert(0, PlannedCopy())
    if requires_session:
        copies = [c if c.dead_letter or session_after(view, c.after, session_id) is not None else
                  PlannedCopy(c.rule, c.after, (SESSION_ID_IS_NULL, "the subscription requires sessions"))
                  for c in copies]
    return copies


def session_after(before: MessageView, after: MessageView | None, session_id: str | None) -> str | None:
    """The SessionId of a copy: the one an action set, else the message's."""
    if after is None or "SessionId" not in after.system or before.system.get("SessionId") == after.system["SessionId"]:
        return session_id
    session = after.system.get("SessionId")
    return session if isinstance(session, str) else None


class Landing(Enum):
    """Which queue of an entity a topic's copy is stored in (rule 5)."""

    MAIN = "main"
    DEAD_LETTER = "dead-letter"
    TRANSFER_DEAD_LETTER = "transfer-dead-letter"


E = TypeVar("E")  # an entity, as the caller names it
M = TypeVar("M")  # a message, as the caller holds it
P = TypeVar("P")  # where the caller places copies (a partition), carried through the walk
E_co = TypeVar("E_co", covariant=True)
M_co = TypeVar("M_co", covariant=True)


class CopyOf(Protocol[M_co]):
    """One copy a subscription gets (rules 1-4): the message, and (reason, description) when dead-lettered."""

    @property
    def draft(self) -> M_co: ...

    @property
    def dead_letter(self) -> tuple[str, str] | None: ...


class RouteOf(Protocol[E_co]):
    """Where a ForwardTo chain ends (``model.routing.follow``): the entity, the hops taken, and whether
    it stopped at the hop limit."""

    @property
    def entity(self) -> E_co: ...

    @property
    def hops(self) -> int: ...

    @property
    def exceeded(self) -> bool: ...


class Places(Protocol[E, M, P]):
    """What :func:`fan_out` asks about the entities, and how it hands each copy back."""

    def subscriptions(self, topic: E) -> Iterable[E]: ...

    def copies(self, subscription: E, message: M) -> Iterable[CopyOf[M]]: ...

    def route(self, subscription: E) -> RouteOf[E] | None:
        """Where ``subscription``'s ForwardTo chain ends, None when it forwards nowhere."""
        ...

    def is_topic(self, entity: E) -> bool: ...

    def enter(self, topic: E, message: M, placement: P) -> P:
        """The placement of copies made when ``message`` is forwarded into ``topic``."""
        ...

    def land(self, entity: E, message: M, landing: Landing, dead_letter: tuple[str, str] | None,
             placement: P) -> None: ...


def fan_out(places: Places[E, M, P], topic: E, message: M, placement: P, hops: int = 0) -> None:
    """Every copy of ``message`` sent to ``topic`` (forwarded ``hops`` times to get there), landed (rule 5)."""
    for subscription in places.subscriptions(topic):
        for planned in places.copies(subscription, message):
            copy = planned.draft
            if planned.dead_letter is not None:
                places.land(subscription, copy, Landing.DEAD_LETTER, planned.dead_letter, placement)
                continue
            route = places.route(subscription)
            if route is None:
                places.land(subscription, copy, Landing.MAIN, None, placement)
                continue
            end, more = route.entity, route.hops
            limit = hop_limit_dead_letter(hops + more, route.exceeded)
            if limit is not None:
                places.land(end, copy, Landing.TRANSFER_DEAD_LETTER, limit, placement)
            elif places.is_topic(end):
                fan_out(places, end, copy, places.enter(end, copy, placement), hops + more)
            else:
                places.land(end, copy, Landing.MAIN, None, placement)
