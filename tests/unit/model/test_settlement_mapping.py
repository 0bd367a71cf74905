"""The one settlement mapping: each AMQP outcome and each update-disposition status, with the SDK's quirks."""

from __future__ import annotations

import pytest

from sodalite.errors import ArgumentError
from sodalite.model.settlement import (
    OutcomeKind,
    Settlement,
    Verb,
    dead_letter_details,
    from_disposition_status,
    from_outcome_fields,
)


def test_accepted_completes_and_removes() -> None:
    s = from_outcome_fields(OutcomeKind.ACCEPTED)
    assert s == Settlement(Verb.COMPLETE)
    assert s.removes and s.answered


def test_released_unlocks_without_an_answer_and_removes_nothing() -> None:
    s = from_outcome_fields(OutcomeKind.RELEASED)
    assert s.verb is Verb.RELEASE
    assert not s.answered and not s.removes


def test_modified_is_abandon_with_its_annotations() -> None:
    s = from_outcome_fields(OutcomeKind.MODIFIED, undeliverable_here=False, message_annotations={"k": 1})
    assert s == Settlement(Verb.ABANDON, {"k": 1})
    assert not s.removes and s.answered


def test_modified_undeliverable_here_is_defer() -> None:
    s = from_outcome_fields(OutcomeKind.MODIFIED, undeliverable_here=True, message_annotations=None)
    assert s == Settlement(Verb.DEFER)


def test_rejected_is_dead_letter_with_reason_and_description_from_info() -> None:
    s = from_outcome_fields(OutcomeKind.REJECTED, error_description="outer",
                            error_info={"DeadLetterReason": "bad", "DeadLetterErrorDescription": "very bad"})
    assert s == Settlement(Verb.DEAD_LETTER, dead_letter_reason="bad", dead_letter_description="very bad")
    assert not s.removes


def test_rejected_without_info_takes_the_errors_description() -> None:
    assert dead_letter_details("outer", None) == (None, "outer")
    assert dead_letter_details(None, {}) == (None, None)
    s = from_outcome_fields(OutcomeKind.REJECTED)
    assert s == Settlement(Verb.DEAD_LETTER)


def test_dead_letter_info_falls_back_to_the_errors_description_and_ignores_non_strings() -> None:
    assert dead_letter_details("outer", {"DeadLetterReason": "r"}) == ("r", "outer")
    assert dead_letter_details("outer", {"DeadLetterReason": 7, "DeadLetterErrorDescription": None}) == (None, None)


def test_dead_letter_info_keys_may_be_str_subclasses() -> None:
    class Sym(str):  # the AMQP layer's symbols are str subclasses
        pass

    assert dead_letter_details(None, {Sym("DeadLetterReason"): "r", Sym("DeadLetterErrorDescription"): "d"}) == (
        "r", "d")


@pytest.mark.parametrize(("status", "verb"), [("completed", Verb.COMPLETE), ("abandoned", Verb.ABANDON),
                                             ("defered", Verb.DEFER), ("suspended", Verb.DEAD_LETTER)])
def test_each_disposition_status(status: str, verb: Verb) -> None:
    assert from_disposition_status(status).verb is verb


def test_suspended_carries_the_dead_letter_fields() -> None:
    s = from_disposition_status("suspended", deadletter_reason="why", deadletter_description="")
    assert s == Settlement(Verb.DEAD_LETTER, dead_letter_reason="why", dead_letter_description="")
    assert from_disposition_status("suspended", deadletter_reason=3) == Settlement(Verb.DEAD_LETTER)


def test_properties_to_modify_apply_to_abandon_defer_and_dead_letter() -> None:
    assert from_disposition_status("abandoned", properties_to_modify={"a": 1}).properties_to_modify == {"a": 1}
    assert from_disposition_status("defered", properties_to_modify={"a": 1}).properties_to_modify == {"a": 1}
    assert from_disposition_status("completed", properties_to_modify={"a": 1}).properties_to_modify is None
    assert from_disposition_status("abandoned", properties_to_modify="no map").properties_to_modify is None
    dead = from_disposition_status("suspended", deadletter_reason="r", properties_to_modify={"stage": "parse"})
    assert (dead.verb, dead.properties_to_modify, dead.dead_letter_reason) == (
        Verb.DEAD_LETTER, {"stage": "parse"}, "r")


def test_a_rejection_info_beyond_reason_and_description_is_properties_to_modify() -> None:
    # .NET and Java send a dead-letter's propertiesToModify in the rejected outcome's error.info
    info = {"DeadLetterReason": "r", "DeadLetterErrorDescription": "d", "stage": "parse"}
    dead = from_outcome_fields(OutcomeKind.REJECTED, error_info=info)
    assert (dead.dead_letter_reason, dead.dead_letter_description) == ("r", "d")
    assert dead.properties_to_modify == {"stage": "parse"}
    plain = from_outcome_fields(OutcomeKind.REJECTED, error_info={"DeadLetterReason": "r"})
    assert plain.properties_to_modify is None  # the Python SDK's rejection: reason and description only


@pytest.mark.parametrize("status", ["deferred", "Completed", None, 1])
def test_unknown_status_is_an_argument_error(status: object) -> None:
    with pytest.raises(ArgumentError, match="unknown disposition-status"):
        from_disposition_status(status)
