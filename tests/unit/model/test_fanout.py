"""model/fanout.py: which copies of a topic message one subscription gets."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sodalite.model.entities import RuleDescription, SqlFilter, SqlRuleAction, TrueFilter
from sodalite.model.fanout import (
    FILTER_EVALUATION_FAILED,
    SESSION_ID_IS_NULL,
    CompiledRule,
    Landing,
    PlannedCopy,
    fan_out,
    plan,
)
from sodalite.model.filters import MessageView
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED
from sodalite.model.routing import MAX_TRANSFER_HOPS, follow


def rule(name: str, expression: str | None = None, action: str | None = None) -> CompiledRule:
    return CompiledRule.compile(RuleDescription(name, SqlFilter(expression) if expression else TrueFilter(),
                                                SqlRuleAction(action) if action else None))


def view(session: str | None = None, **user: object) -> MessageView:
    return MessageView({"SessionId": session, "MessageId": "m"}, user)


def test_plain_rules_are_ored_into_one_copy_first_and_each_action_makes_its_own() -> None:
    rules = [rule("a", "color = 'red'", "SET tag = 'a'"), rule("b", "color = 'red'"), rule("c", "1 = 1")]
    copies = plan(rules, view(color="red"), None, False, False)
    assert [c.rule for c in copies] == [None, "a"]
    assert copies[1].after is not None and copies[1].after.user["tag"] == "a"
    assert plan([rule("x", "color = 'blue'")], view(color="red"), None, False, False) == []


def test_a_filter_that_fails_dead_letters_the_copy_only_when_the_subscription_says_so() -> None:
    failing = [rule("bad", "color > 3")]  # a string ordered against a number
    assert plan(failing, view(color="red"), None, False, False) == []
    [copy] = plan(failing, view(color="red"), None, True, False)
    assert copy.rule is None and copy.dead_letter is not None and copy.dead_letter[0] == FILTER_EVALUATION_FAILED


def test_a_session_subscription_dead_letters_a_copy_without_a_session_id() -> None:
    assert plan([rule("all")], view("s1"), "s1", False, True) == [PlannedCopy()]
    [copy] = plan([rule("all")], view(), None, False, True)
    assert copy.dead_letter is not None and copy.dead_letter[0] == SESSION_ID_IS_NULL
    [kept] = plan([rule("set", None, "SET sys.SessionId = 's2'")], view(), None, False, True)
    assert kept.dead_letter is None and kept.rule == "set"


@dataclass(frozen=True)
class _Copy:
    draft: str
    dead_letter: tuple[str, str] | None = None


@dataclass(frozen=True)
class _Route:
    entity: str
    hops: int
    exceeded: bool


@dataclass
class _Places:
    """Entities by name: the topics' subscriptions ('t/s'), ForwardTo, and what each subscription copies."""

    topics: dict[str, list[str]]
    forward_to: dict[str, str] = field(default_factory=dict)
    dead_letters: set[str] = field(default_factory=set)  # subscriptions whose copy is dead-lettered
    landed: list[tuple[str, str, Landing, tuple[str, str] | None, int]] = field(default_factory=list)

    def subscriptions(self, topic: str) -> Iterable[str]:
        return self.topics.get(topic, [])

    def copies(self, subscription: str, message: str) -> Iterable[_Copy]:
        if subscription in self.dead_letters:
            return [_Copy(message, ("FilterEvaluationException", "bad"))]
        return [_Copy(message)]

    def route(self, subscription: str) -> _Route | None:
        if subscription not in self.forward_to:
            return None
        return _Route(*follow(subscription, self.forward_to.get))

    def is_topic(self, entity: str) -> bool:
        return entity in self.topics

    def enter(self, topic: str, message: str, placement: int) -> int:
        return placement + 1  # counts the topics entered, to show it is carried

    def land(self, entity: str, message: str, landing: Landing, dead_letter: tuple[str, str] | None,
             placement: int) -> None:
        self.landed.append((entity, message, landing, dead_letter, placement))


def test_each_copy_lands_in_its_subscription_its_dead_letter_queue_or_where_it_forwards() -> None:
    places = _Places({"t": ["t/a", "t/b", "t/c", "t/d"], "t2": ["t2/x"]}, forward_to={"t/c": "q", "t/d": "t2"},
                     dead_letters={"t/b"})
    fan_out(places, "t", "m", 0)
    assert places.landed == [
        ("t/a", "m", Landing.MAIN, None, 0),
        ("t/b", "m", Landing.DEAD_LETTER, ("FilterEvaluationException", "bad"), 0),
        ("q", "m", Landing.MAIN, None, 0),
        ("t2/x", "m", Landing.MAIN, None, 1),  # through the topic t2, entered once
    ]


def test_hops_count_across_topics_and_past_the_limit_the_copy_goes_to_the_transfer_dead_letter_queue() -> None:
    # t's subscription forwards to t2 (1 hop), whose subscription forwards along a chain of queues.
    chain = {f"q{i}": f"q{i + 1}" for i in range(MAX_TRANSFER_HOPS)}
    places = _Places({"t": ["t/s"], "t2": ["t2/s"]}, forward_to={"t/s": "t2", "t2/s": "q0", **chain})
    fan_out(places, "t", "m", 0)
    [(where, _, landing, dead_letter, _)] = places.landed
    assert landing is Landing.TRANSFER_DEAD_LETTER
    assert dead_letter is not None and dead_letter[0] == MAX_TRANSFER_HOP_COUNT_EXCEEDED
    assert where == "q3"  # 1 hop into t2, then q0..q3: the fifth hop would pass the limit
    within = _Places({"t": ["t/s"]}, forward_to={"t/s": "q0", "q0": "q1"})
    fan_out(within, "t", "m", 0, hops=MAX_TRANSFER_HOPS - 2)
    assert [(w, landing) for w, _, landing, _, _ in within.landed] == [("q1", Landing.MAIN)]
