"""The decisions the sync and asyncio paired-namespace clients share (``paired_core``), without a broker."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusConnectionError

from sodalite.client.failover import FailoverBook
from sodalite.client.paired_core import (
    FAIL_OVER,
    RETRY_PAUSE,
    BacklogRound,
    HandlerCache,
    PairedMessageBatch,
    PairedNamespaceOptions,
    PairedState,
    RetryPrimary,
    SideState,
    after_primary_failure,
    backlog_setup_error,
    first_line,
    outgoing,
    queue_or_topic_sender,
    raw_batch_cannot_fail_over,
)
from sodalite.client.paired_messages import SyphonPlan
from sodalite.errors import BacklogQueueSetupFailed, FailoverExhausted, PairedClientClosed, SecondaryUnavailable

PRIMARY = "Endpoint=sb://orders.example:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _book(interval: float = 10.0, backlogs: int = 3) -> FailoverBook:
    return FailoverBook(timedelta(seconds=interval), backlogs, rng=random.Random(7), clock=Clock())


def test_a_send_is_its_messages_or_an_sdk_batch_that_goes_as_it_is() -> None:
    one = ServiceBusMessage("a")
    assert outgoing(one).messages == [one] and outgoing(one).to_primary == [one]
    assert outgoing([]).empty
    kept = PairedMessageBatch(1024)
    kept.add_message(one)
    assert outgoing(kept).messages == [one] and outgoing(kept).raw_batch is None
    raw = ServiceBusMessageBatch()
    raw_send = outgoing(raw)
    assert raw_send.raw_batch is raw and raw_send.to_primary is raw and not raw_send.empty


def test_an_sdk_batch_cannot_fail_over_and_says_why() -> None:
    assert "the primary is unavailable" in str(raw_batch_cannot_fail_over(just_now=True))
    later = raw_batch_cannot_fail_over(just_now=False)
    assert isinstance(later, FailoverExhausted)
    assert "the entity is failed over" in str(later) and "create_message_batch()" in str(later)


def test_the_primary_is_retried_with_doubling_pauses_until_the_interval_ends() -> None:
    book = _book(interval=10.0)
    step = after_primary_failure(book, "orders", 100.0, RETRY_PAUSE[0])
    assert step == RetryPrimary(RETRY_PAUSE[0], RETRY_PAUSE[0] * 2)
    step = after_primary_failure(book, "orders", 101.0, 0.8)
    assert step == RetryPrimary(0.8, RETRY_PAUSE[1])  # the pause stops doubling at its longest
    step = after_primary_failure(book, "orders", 109.95, 1.0)
    assert isinstance(step, RetryPrimary) and step.wait == pytest.approx(0.05)  # never past the interval
    assert after_primary_failure(book, "orders", 110.0, 1.0) == FAIL_OVER
    assert book.failed_over("orders")


def test_a_backlog_round_tries_each_queue_once_and_then_fails_with_the_last_error() -> None:
    book = _book(backlogs=2)
    walk = BacklogRound(book, "orders", ["b0", "b1"])
    first = walk.pick(None)
    down = ServiceBusConnectionError(message="backlog gone")
    walk.failed(first, down)
    assert book.available_backlogs() == [1 - first]
    second = walk.pick(first)
    assert second == 1 - first
    walk.failed(second, ServiceBusConnectionError(message="also gone"))
    with pytest.raises(FailoverExhausted, match="neither the primary entity 'orders' nor any backlog queue took the "
                                                "message: also gone"):
        walk.pick(second)


def test_a_backlog_round_keeps_the_senders_queue_and_raises_errors_about_the_message() -> None:
    book = _book(backlogs=3)
    walk = BacklogRound(book, "orders", ["b0", "b1", "b2"])
    assert walk.pick(2) == 2
    with pytest.raises(MessageSizeExceededError):
        walk.failed(2, MessageSizeExceededError(message="too large"))
    assert book.available_backlogs() == [0, 1, 2]  # an error about the message drops no queue


def test_handlers_are_made_once_per_key_and_handed_back_for_closing() -> None:
    made: list[str] = []

    def make(path: str) -> str:
        made.append(path)
        return f"sender {path}"

    cache: HandlerCache[str, str] = HandlerCache(make, key=str.lower)
    assert cache.get("Orders") == cache.get("orders") == "sender Orders"
    assert made == ["Orders"]
    assert cache.pop("ORDERS") == "sender Orders" and cache.pop("orders") is None
    cache.get("a")
    cache.get("b")
    assert cache.take_all() == ["sender a", "sender b"] and cache.take_all() == []


def test_the_sender_to_the_primary_entity_is_a_queue_or_topic_sender() -> None:
    with ServiceBusClient.from_connection_string(PRIMARY) as client:  # making a sender opens nothing
        topic_sender = queue_or_topic_sender(client, "events", True)
        assert isinstance(topic_sender, ServiceBusSender) and topic_sender.entity_name == "events"
        assert queue_or_topic_sender(client, "orders", False).entity_name == "orders"


def test_a_side_goes_down_once_and_says_why() -> None:
    side = SideState("secondary")
    assert side.down_reason() == "the secondary namespace client closed"
    fault = RuntimeError("key revoked\nmore")
    assert side._goes_down(fault)
    assert not side._goes_down(None)  # the first close wins; its fault stays
    assert side.closed and side.fault is fault
    assert side.down_reason() == "the secondary namespace client faulted: key revoked"


def test_a_paired_state_names_its_backlog_queues_and_keeps_the_first_close_reason() -> None:
    state = PairedState(PRIMARY, PairedNamespaceOptions("unused", backlog_queue_count=2))
    assert state.primary_namespace == "orders"
    assert state.backlog_names == ["orders/x-servicebus-transfer/0", "orders/x-servicebus-transfer/1"]
    state.check_open()
    state._close_with("the primary namespace client closed")
    state._close_with("the paired client is closed")
    assert state.closed
    with pytest.raises(PairedClientClosed, match="the primary namespace client closed"):
        state.check_open()


def test_backlog_setup_errors_are_mapped_by_cause() -> None:
    assert isinstance(backlog_setup_error("b0", ClientAuthenticationError("no")), BacklogQueueSetupFailed)
    assert isinstance(backlog_setup_error("b0", ServiceRequestError("unreachable")), SecondaryUnavailable)
    assert isinstance(backlog_setup_error("b0", HttpResponseError("conflict")), SecondaryUnavailable)
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(ValueError(" one\ntwo ")) == "one"


def test_a_failed_group_leaves_it_and_every_later_group_unsent() -> None:
    a, b, c = ServiceBusMessage("a"), ServiceBusMessage("b"), ServiceBusMessage("c")
    plan = SyphonPlan([], [], [("q1", [(a, a)]), ("q2", [(b, b), (c, c)])])  # type: ignore[list-item]
    assert plan.unsent_from(0) == [a, b, c]
    assert plan.unsent_from(1) == [b, c]
    assert plan.unsent_from(2) == []


def test_the_failover_timer_starts_when_the_first_failed_attempt_began() -> None:
    book = _book(interval=10.0)
    # The attempt began at 100 and failed at 101.5 (a dead connection noticed late): 10 s from 100.
    assert isinstance(after_primary_failure(book, "orders", 101.5, RETRY_PAUSE[0], began=100.0), RetryPrimary)
    assert book.time_left("orders", 101.5) == pytest.approx(8.5)
    assert after_primary_failure(book, "orders", 110.0, 1.0, began=109.0) == FAIL_OVER


def test_attempt_limits_and_timeouts() -> None:
    from datetime import timedelta as td

    from sodalite.client.availability import Availability, attempt_client_kwargs, attempt_timeout
    from sodalite.client.paired_core import attempt_limit, pump_slice
    book = _book(interval=10.0)
    assert attempt_limit(book, "orders", 100.0, None) == 10.0  # no timer: the whole interval
    assert attempt_limit(book, "orders", 100.0, 3.0) == 3.0  # the application's shorter timeout wins
    after_primary_failure(book, "orders", 100.0, RETRY_PAUSE[0])
    assert attempt_limit(book, "orders", 109.0, None) == pytest.approx(1.0)  # never past the timer
    assert attempt_limit(_book(interval=0.0), "orders", 100.0, None) == 2.0  # healthy sends are not cut short
    assert attempt_timeout(None, False, 2.0) is None and attempt_timeout(30.0, False, 2.0) == 30.0
    assert attempt_timeout(None, True, 2.0) == 2.0 and attempt_timeout(0.5, True, 2.0) == 0.5
    kwargs = attempt_client_kwargs({"retry_total": 9, "retry_backoff_factor": 3, "connection_verify": "ca.pem"})
    assert kwargs["retry_total"] == 1 and kwargs["connection_verify"] == "ca.pem"
    assert pump_slice(td(minutes=15)) == 0.5 and pump_slice(td(seconds=0.2)) == 0.2
    marks = Availability()
    from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusConnectionError
    assert not marks.failed("q", 0, MessagingEntityNotFoundError(message="gone"), 1.0)  # not about availability
    assert marks.targets("q") == [0, 1]
    assert marks.failed("q", 0, ServiceBusConnectionError(message="refused"), 1.0)  # start the probe
    assert not marks.failed("q", 0, ServiceBusConnectionError(message="refused"), 2.0)  # one probe
    assert marks.targets("q") == [1] and marks.single_copy_sends == 1
    assert marks.clear("q", 0) == 1.0 and marks.targets("q") == [0, 1]


def test_a_passive_client_keeps_a_failed_namespace_in_doubt_without_a_probe() -> None:
    from azure.servicebus.exceptions import ServiceBusConnectionError

    from sodalite.client.availability import Availability
    marks = Availability()
    refused = ServiceBusConnectionError(message="refused")
    assert not marks.copy_failed("q", 0, refused, 1.0, probes=False)
    assert marks.marked("q", 0)  # in doubt: its next attempt gets the short timeout
    marks.succeeded("q", 0)
    assert not marks.marked("q", 0)
    assert marks.copy_failed("q", 1, refused, 2.0, probes=True)  # active: the one caller starts the probe
    assert not marks.copy_failed("q", 1, refused, 3.0, probes=True)
