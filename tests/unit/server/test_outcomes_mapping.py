"""AMQP outcome types to settlements and back: what the receiver link and transactions read and echo."""

from __future__ import annotations

import pytest

from sodalite.amqp.performatives import Accepted, Declared, Error, Modified, Rejected, Released
from sodalite.amqp.types import Symbol
from sodalite.errors import NotImplementedOperation
from sodalite.model.settlement import Settlement, Verb
from sodalite.server.outcomes import echo_of, settlement_of


def test_each_outcome_as_the_sdk_sends_it() -> None:
    assert settlement_of(Accepted()) == Settlement(Verb.COMPLETE)
    assert settlement_of(Modified(True, False, None)) == Settlement(Verb.ABANDON)
    assert settlement_of(Modified(True, True, None)) == Settlement(Verb.DEFER)
    assert settlement_of(Released()).verb is Verb.RELEASE
    assert settlement_of(None).verb is Verb.RELEASE  # a disposition without a state


def test_abandon_keeps_properties_to_modify() -> None:
    assert settlement_of(Modified(True, None, {Symbol("x"): 1})) == Settlement(Verb.ABANDON, {Symbol("x"): 1})


def test_dead_letter_rejection_as_the_sdk_spells_it() -> None:
    error = Error("com.microsoft:dead-letter", "desc",
                  {Symbol("DeadLetterReason"): "reason", Symbol("DeadLetterErrorDescription"): "desc"})
    assert settlement_of(Rejected(error)) == Settlement(Verb.DEAD_LETTER, dead_letter_reason="reason",
                                                        dead_letter_description="desc")
    assert settlement_of(Rejected(None)) == Settlement(Verb.DEAD_LETTER)


def test_echo_is_the_same_outcome_but_a_rejection_loses_its_error() -> None:
    error = Error("com.microsoft:dead-letter", "d", None)
    assert echo_of(Rejected(error)) == Rejected(None)
    assert echo_of(Accepted()) == Accepted()
    assert echo_of(Modified(True, True, None)) == Modified(True, True, None)


def test_a_non_outcome_is_not_implemented() -> None:
    with pytest.raises(NotImplementedOperation, match="unsupported outcome Declared"):
        settlement_of(Declared(b"1"))
