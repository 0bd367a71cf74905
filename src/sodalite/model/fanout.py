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

Filters see the message through :class:`~sodalite.model.filters.MessageView`; what the message
becomes is the caller's business (``server/fanout.py`` encodes it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sodalite.errors import FilterEvaluationError
from sodalite.model.entities import RuleDescription
from sodalite.model.filters import CompiledAction, CompiledFilter, MessageView, compile_action, compile_filter

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
