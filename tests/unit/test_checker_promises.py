"""The checker's promise checks (tests/checker/promises.py) on hand-made histories: each promise of
docs/reliability.md broken once, and a clean history that passes every check."""

from __future__ import annotations

from checker.history import FAIL, INFO, OK, Delivery, History, Op
from checker.promises import (
    check_all,
    check_counts,
    check_delivery_count,
    check_durable,
    check_one_broker,
    check_peeklock,
    check_rad,
    check_sequence,
    check_session_order,
    check_session_state,
)


def _op(kind: str, start: float, end: float, result: str = OK, queue: str = "q", **fields: object) -> Op:
    return Op(index=0, client=0, kind=kind, queue=queue, start=start, end=end, result=result, **fields)  # type: ignore[arg-type]


def _d(uid: str, seq: int, count: int = 0, mode: str = "peeklock", session: str | None = None) -> Delivery:
    return Delivery(uid=uid, queue="q", seq=seq, count=count, mode=mode, session=session)


def _history(*ops: Op, stored: list[tuple[str, str, str, int]] | None = None) -> History:
    history = History(seed=1)
    for op in ops:
        history.add(op)
    history.stored = stored or []
    return history


def clean() -> History:
    return _history(
        _op("send", 0, 1, uids=("a",)),
        _op("send", 2, 3, uids=("b",)),
        _op("send", 2, 3, result=INFO, uids=("c",)),  # indeterminate: may be lost
        _op("receive", 4, 5, deliveries=(_d("a", 1),)),
        _op("abandon", 5, 6, uids=("a",)),
        _op("receive", 7, 8, deliveries=(_d("a", 1, 1), _d("b", 2))),
        _op("complete", 8, 9, uids=("a",)),
        _op("recount", 10, 11, value={"q": {"api": {"active": 1, "sizeInBytes": 30},
                                            "store": {"active": 1, "sizeInBytes": 30}}}),
        stored=[("b", "q", "", 2)])


def test_a_clean_history_passes_every_check() -> None:
    assert check_all(clean(), strict=True) == []


def test_an_acknowledged_send_neither_delivered_nor_stored_is_a_violation() -> None:
    history = clean()
    history.stored = []  # b was acknowledged, seen once, and... it was seen: drop the delivery as well
    history.ops[5].deliveries = (_d("a", 1, 1),)
    found = check_durable(history)
    assert [v.promise for v in found] == ["durable"] and "b" in found[0].detail


def test_an_indeterminate_send_lost_is_not_a_violation() -> None:
    history = _history(_op("send", 0, 1, result=INFO, uids=("x",)), _op("send", 0, 1, result=FAIL, uids=("y",)))
    assert check_durable(history) == []


def test_a_scheduled_message_whose_cancel_raised_may_be_gone_but_not_one_whose_cancel_failed() -> None:
    """Seed 9286: a scheduled message, its cancel sent, the broker killed before the reply; the SDK's
    retry could not connect and raised. The cancel may have happened (Jepsen's :info)."""
    for result, promises in ((INFO, []), (FAIL, ["durable"])):
        history = _history(_op("schedule", 0, 1, uids=("s",)),
                           _op("cancel_scheduled", 1, 2, result=result, uids=("s",)))
        assert [v.promise for v in check_durable(history)] == promises, result


def test_receive_and_delete_losses_are_excused_up_to_the_credit_of_interrupted_receivers() -> None:
    sends = [_op("send", 0, 1, uids=(f"m{i}",)) for i in range(3)]
    cut = _op("receive", 2, 3, result=INFO, value={"mode": "rad", "credit": 2})  # raised: all its credit
    assert [v.promise for v in check_durable(_history(*sends, cut))] == ["durable"]  # 3 lost, 2 excused
    cut.value = {"mode": "rad", "credit": 3}
    assert check_durable(_history(*sends, cut)) == []


def test_with_the_delivery_trace_only_written_transfers_excuse_a_loss() -> None:
    sends = [_op("send", 0, 1, uids=(f"m{i}",)) for i in range(2)]
    history = _history(*sends, _op("receive", 2, 3, result=INFO, value={"mode": "rad", "credit": 10}))
    history.trace = [{"event": "written", "entity": "q", "sequence_number": 1, "link": "l"},
                     {"event": "detached", "entity": "q", "link": "l"}]
    found = check_durable(history)  # one written (the SDK dropped it), the other taken and never written: lost
    assert [v.promise for v in found] == ["durable"] and "at most 1 excused" in found[0].detail


def test_a_completed_message_delivered_again_is_a_violation() -> None:
    history = clean()
    history.add(_op("receive", 12, 13, deliveries=(_d("a", 1, 2),)))
    assert [v.promise for v in check_peeklock(history)] == ["peeklock"]
    history = clean()
    history.stored.append(("a", "q", "", 1))
    assert [v.promise for v in check_peeklock(history)] == ["peeklock"]


def test_a_receive_and_delete_message_delivered_twice_is_a_violation() -> None:
    history = _history(_op("send", 0, 1, uids=("r",)),
                       _op("receive", 2, 3, deliveries=(_d("r", 1, mode="rad"),)),
                       _op("receive", 4, 5, deliveries=(_d("r", 1, mode="rad"),)))
    assert [v.promise for v in check_rad(history)] == ["rad"]
    history = _history(_op("send", 0, 1, uids=("r",)), _op("receive", 2, 3, deliveries=(_d("r", 1, mode="rad"),)),
                       stored=[("r", "q", "", 1)])
    assert [v.promise for v in check_rad(history)] == ["rad"]
    history = _history(_op("send", 0, 1, uids=("r",)), _op("receive", 2, 3, deliveries=(_d("r", 1, mode="rad"),)))
    history.trace = [{"event": "written", "entity": "q", "sequence_number": 1, "link": "a"},
                     {"event": "written", "entity": "q", "sequence_number": 1, "link": "b"}]
    assert [v.promise for v in check_rad(history)] == ["rad"]


def test_a_sequence_number_reused_or_out_of_commit_order_is_a_violation() -> None:
    reused = _history(_op("send", 0, 1, uids=("a",)), _op("send", 2, 3, uids=("b",)),
                      stored=[("a", "q", "", 1), ("b", "q", "", 1)])
    assert [v.promise for v in check_sequence(reused)] == ["sequence"]
    backwards = _history(_op("send", 0, 1, uids=("a",)), _op("send", 2, 3, uids=("b",)),
                         stored=[("a", "q", "", 5), ("b", "q", "", 4)])
    assert [v.promise for v in check_sequence(backwards)] == ["sequence"]
    concurrent = _history(_op("send", 0, 3, uids=("a",)), _op("send", 1, 2, uids=("b",)),
                          stored=[("a", "q", "", 5), ("b", "q", "", 4)])
    assert check_sequence(concurrent) == []
    assert check_sequence(backwards, partitioned=frozenset({"q"})) == []


def test_a_delivery_count_that_goes_down_or_does_not_rise_after_an_abandon_is_a_violation() -> None:
    down = _history(_op("receive", 0, 1, deliveries=(_d("a", 1, 3),)),
                    _op("receive", 2, 3, deliveries=(_d("a", 1, 2),)))
    assert [v.promise for v in check_delivery_count(down)] == ["delivery-count"]
    flat = _history(_op("receive", 0, 1, deliveries=(_d("a", 1, 0),)), _op("abandon", 1, 2, uids=("a",)),
                    _op("receive", 3, 4, deliveries=(_d("a", 1, 0),)))
    assert [v.promise for v in check_delivery_count(flat)] == ["delivery-count"]
    lapsed = _history(_op("receive", 0, 1, deliveries=(_d("a", 1, 0),)),
                      _op("receive", 5, 6, deliveries=(_d("a", 1, 0),)))
    assert [v.promise for v in check_delivery_count(lapsed)] == ["delivery-count"]
    jump = _history(_op("receive", 0, 1, deliveries=(_d("a", 1, 0),)), _op("abandon", 1, 2, uids=("a",)),
                    _op("receive", 3, 4, deliveries=(_d("a", 1, 2),)))
    assert check_delivery_count(jump) == []
    assert [v.promise for v in check_delivery_count(jump, strict=True)] == ["delivery-count"]
    deferred = _history(_op("receive", 0, 1, deliveries=(_d("a", 1, 0),)), _op("defer", 1, 2, uids=("a",)),
                        _op("receive_deferred", 3, 4, deliveries=(_d("a", 1, 0),)))
    assert check_delivery_count(deferred, strict=True) == []


def test_session_order_broken_is_a_violation() -> None:
    same_batch = _history(_op("receive", 0, 1, deliveries=(_d("b", 2, session="s"), _d("a", 1, session="s"))))
    assert [v.promise for v in check_session_order(same_batch)] == ["session-order"]
    later = _history(_op("receive", 0, 1, deliveries=(_d("b", 2, session="s"),)),
                     _op("receive", 2, 3, deliveries=(_d("a", 1, session="s"),)))
    assert [v.promise for v in check_session_order(later)] == ["session-order"]
    other_sessions = _history(_op("receive", 0, 1, deliveries=(_d("b", 2, session="t"),)),
                              _op("receive", 2, 3, deliveries=(_d("a", 1, session="s"),)))
    assert check_session_order(other_sessions) == []


def test_a_runtime_count_that_differs_from_the_recount_is_a_violation() -> None:
    history = _history(_op("recount", 0, 1, value={"q": {"api": {"active": 1, "sizeInBytes": 0},
                                                         "store": {"active": 1, "sizeInBytes": 1005}}}))
    found = check_counts(history)
    assert [v.promise for v in found] == ["counts"] and "sizeInBytes 0 (store 1005)" in found[0].detail


def _second_serve(**value: object) -> History:
    refused = {"data_dir": "/d", "holder": 42, "started": False, "exit": 1, "endpoints_before": "{}",
               "endpoints_after": "{}", "output": "sodalite: the data directory /d is in use by another broker "
                                                  "(process 42 holds /d/broker.lock)"}
    return _history(_op("second-serve", 0, 1, value={**refused, **value}))


def test_a_second_broker_on_one_data_directory_must_be_refused_naming_it_and_its_holder() -> None:
    assert check_one_broker(_second_serve()) == []
    served = check_one_broker(_second_serve(started=True, exit=None, output="Connection string: ...",
                                            endpoints_after=None))
    assert [v.promise for v in served] == ["one-broker", "one-broker"]
    assert "not refused" in served[0].detail and "removed" in served[1].detail
    unnamed = check_one_broker(_second_serve(output="sodalite: a messaging store cannot be used: locked"))
    assert len(unnamed) == 1 and "without naming" in unnamed[0].detail
    rewritten = check_one_broker(_second_serve(endpoints_after='{"pid": 43}'))
    assert len(rewritten) == 1 and "rewritten" in rewritten[0].detail


def test_two_copies_of_one_send_retried_by_the_sdk_are_told_apart_by_sequence_number() -> None:
    """A send retried after a cut may store its message twice (no duplicate detection): not a redelivery."""
    history = _history(_op("send", 0, 1, result=INFO, uids=("r",)),
                       _op("receive", 2, 3, deliveries=(_d("r", 1, mode="rad"),)),
                       _op("receive", 4, 5, deliveries=(_d("r", 2),)),
                       _op("complete", 5, 6, uids=("r",), value={"seq": 2}),
                       _op("receive", 7, 8, deliveries=(_d("r", 3),)))
    assert check_rad(history) == [] and check_peeklock(history) == []
    history.add(_op("receive", 9, 10, deliveries=(_d("r", 2, 1),)))
    assert [v.promise for v in check_peeklock(history)] == ["peeklock"]


def test_a_message_an_entity_update_gave_a_short_time_to_live_may_expire() -> None:
    lost = _history(_op("send", 0, 1, uids=("a",)), _op("recount", 100, 101, value={}))
    assert [v.promise for v in check_durable(lost)] == ["durable"]
    expired = _history(_op("update", 0.5, 0.6, value={"ttl": 20.0}), *lost.ops)
    assert check_durable(expired) == []
    too_long = _history(_op("update", 0.5, 0.6, value={"ttl": 200.0}), *lost.ops)
    assert [v.promise for v in check_durable(too_long)] == ["durable"]


def test_a_session_state_set_is_read_back_until_another_set() -> None:
    def state(kind: str, start: float, value: str, result: str = OK) -> Op:
        return _op(kind, start, start + 1, result=result, queue="s", session="s0", value=value)

    assert check_session_state(_history(state("session_set", 0, "x"), state("session_get", 2, "x"))) == []
    lost = check_session_state(_history(state("session_set", 0, "x"), state("session_get", 2, "old")))
    assert [v.promise for v in lost] == ["durable"] and "'x'" in lost[0].detail
    maybe = _history(state("session_set", 0, "x"), state("session_set", 1.5, "y", INFO), state("session_get", 3, "x"))
    assert check_session_state(maybe) == []


def test_a_crash_may_lose_receive_and_delete_messages_put_back_but_not_yet_committed() -> None:
    def lost(*faults: Op) -> History:
        history = _history(_op("send", 0, 1, uids=("a",)),
                           _op("receive", 2, 3, value={"mode": "rad", "credit": 5}), *faults)
        history.trace = [{"event": "restored", "entity": "q", "sequence_number": 1}]
        return history

    assert [v.promise for v in check_durable(lost())] == ["durable"]  # no crash: a put-back is not lost
    assert check_durable(lost(_op("fault", 4, 4, value="kill9"))) == []
