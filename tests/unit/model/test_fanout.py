"""model/fanout.py: which copies of a topic message one subscription gets."""

from __future__ import annotations

from sodalite.model.entities import RuleDescription, SqlFilter, SqlRuleAction, TrueFilter
from sodalite.model.fanout import FILTER_EVALUATION_FAILED, SESSION_ID_IS_NULL, CompiledRule, PlannedCopy, plan
from sodalite.model.filters import MessageView


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
