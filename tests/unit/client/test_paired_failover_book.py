"""The paired client's failover bookkeeping and message rewriting, with a fake clock (no brokers)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)

from sodalite.client import PairedNamespaceOptions
from sodalite.client import backlog as bl
from sodalite.client.failover import FailoverBook, is_entity_not_found, is_failover_error, is_namespace_auth_fault
from sodalite.client.paired_messages import refusal, to_backlog_message


def test_the_timer_starts_on_a_failover_error_and_fails_over_after_the_interval() -> None:
    book = FailoverBook(timedelta(seconds=10), 3)
    assert not book.primary_failed("Orders", 100.0)
    assert book.time_left("orders", 104.0) == 6.0
    assert not book.primary_failed("orders", 109.9)
    assert book.primary_failed("orders", 110.0)
    assert book.failed_over("ORDERS") and book.failed_over_entities() == ["orders"]
    assert not book.failed_over("other")  # per entity


def test_a_success_stops_the_timer() -> None:
    book = FailoverBook(timedelta(seconds=10), 3)
    book.primary_failed("q", 0.0)
    book.primary_succeeded("q")
    assert not book.primary_failed("q", 15.0)  # the timer restarted at 15
    assert book.primary_failed("q", 25.0)


def test_one_pinger_per_entity_and_a_ping_brings_everyone_back() -> None:
    book = FailoverBook(timedelta(0), 1)
    assert not book.start_pinging("q")  # not failed over
    assert book.primary_failed("q", 0.0)
    assert book.start_pinging("q")
    assert not book.start_pinging("q")
    book.ping_succeeded("q")
    assert not book.failed_over("q")
    assert book.failed_over_entities() == []


def test_backlog_rotation_is_shared_and_a_sender_keeps_its_queue() -> None:
    book = FailoverBook(timedelta(0), 3, rng=random.Random(7))
    first = book.pick_backlog(None)
    assert first is not None
    assert book.pick_backlog(first) == first
    book.drop_backlog(first)
    second = book.pick_backlog(first)
    assert second is not None and second != first
    for index in range(3):
        book.drop_backlog(index)
    assert book.pick_backlog(second) is None
    assert book.available_backlogs() == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_dropped_backlog_queue_comes_back_after_a_doubling_back_off() -> None:
    clock = FakeClock()
    book = FailoverBook(timedelta(0), 2, backlog_retry_after=timedelta(seconds=10), clock=clock)
    book.drop_backlog(0)
    assert book.available_backlogs() == [1]
    clock.now += 9.9
    assert book.pick_backlog(None, exclude={1}) is None  # 0 is still backing off
    clock.now += 0.1
    assert book.available_backlogs() == [0, 1]
    assert book.pick_backlog(None, exclude={1}) == 0
    book.drop_backlog(0)  # dropped again with no success in between: twice as long
    clock.now += 19.9
    assert book.available_backlogs() == [1]
    clock.now += 0.1
    assert book.available_backlogs() == [0, 1]
    book.drop_backlog(0)
    book.drop_backlog(0)  # a second sender seeing the same failure adds no strike
    clock.now += 40
    assert book.available_backlogs() == [0, 1]
    for _ in range(6):  # the back-off stops growing at 16 times the first
        book.drop_backlog(0)
        clock.now += 160
        assert book.available_backlogs() == [0, 1]
    book.backlog_succeeded(0)  # a success resets it
    book.drop_backlog(0)
    clock.now += 10
    assert book.available_backlogs() == [0, 1]


def test_a_send_tries_each_backlog_queue_once_even_with_no_back_off() -> None:
    book = FailoverBook(timedelta(0), 2, backlog_retry_after=timedelta(0), clock=FakeClock())
    tried: set[int] = set()
    while (index := book.pick_backlog(None, tried)) is not None:
        tried.add(index)
        book.drop_backlog(index)
    assert tried == {0, 1}
    assert book.available_backlogs() == [0, 1]  # back at once for the next send


@pytest.mark.parametrize(("error", "fails_over"), [
    (ServiceBusConnectionError(message="down"), True),
    (OperationTimeoutError(message="slow"), True),
    (ServiceBusServerBusyError(message="busy"), True),
    (ServiceBusQuotaExceededError(message="full"), True),
    (ServiceBusError("boom", condition=b"amqp:internal-error"), True),
    (MessagingEntityNotFoundError(message="gone"), False),
    (MessageSizeExceededError(message="big"), False),
    (ServiceBusAuthorizationError(message="no"), False),
    (ValueError("bad argument"), False),
])
def test_which_errors_start_the_timer(error: Exception, fails_over: bool) -> None:
    assert is_failover_error(error) is fails_over


def test_backlog_rewriting_round_trips_plain_values() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    routing = bl.Routing("orders", "s1", timedelta(minutes=5), when)
    props = bl.to_backlog({"a": 1, bl.PATH: "ignored"}, routing)
    assert props == {"a": 1, bl.PATH: "orders", bl.SESSION_ID: "s1", bl.TIME_TO_LIVE: 300_000,
                     bl.SCHEDULED_ENQUEUE_TIME: when}
    restored, back = bl.from_backlog({k.encode(): v for k, v in props.items()})
    assert restored == {"a": 1} and back == routing
    # as the SDK decodes them: keys as bytes, a timestamp as epoch milliseconds, a long TTL as a double
    long_lived = bl.to_backlog({}, bl.Routing("q", time_to_live=bl.TIMESPAN_MAX))
    assert isinstance(long_lived[bl.TIME_TO_LIVE], float)
    _, decoded = bl.from_backlog({bl.PATH.encode(): b"q", bl.TIME_TO_LIVE.encode(): long_lived[bl.TIME_TO_LIVE],
                                  bl.SCHEDULED_ENQUEUE_TIME.encode(): int(when.timestamp() * 1000)})
    assert decoded.time_to_live == bl.TIMESPAN_MAX - timedelta(microseconds=bl.TIMESPAN_MAX.microseconds % 1000)
    assert decoded.scheduled_enqueue_time_utc == when
    enqueued = datetime(2030, 1, 1, tzinfo=UTC)
    assert bl.remaining_time_to_live(back, enqueued, when + timedelta(minutes=1)) == timedelta(minutes=4)
    unscheduled = bl.Routing("orders", time_to_live=timedelta(minutes=5))
    assert bl.remaining_time_to_live(unscheduled, enqueued, enqueued + timedelta(minutes=6)) == -timedelta(minutes=1)
    with pytest.raises(bl.NotABacklogMessage):
        bl.from_backlog({"a": 1})
    with pytest.raises(bl.NotABacklogMessage):
        bl.from_backlog({bl.PATH: "q", bl.TIME_TO_LIVE: "soon"})


def test_namespace_and_queue_names() -> None:
    assert bl.namespace_of("Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=k;"
                           "SharedAccessKey=v") == "contoso"
    assert bl.namespace_of("Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v;"
                           "UseDevelopmentEmulator=true;") == "localhost"
    assert bl.backlog_queue_names("contoso", 2) == ["contoso/x-servicebus-transfer/0",
                                                    "contoso/x-servicebus-transfer/1"]
    with pytest.raises(ValueError):
        bl.namespace_of("SharedAccessKeyName=k;SharedAccessKey=v")
    with pytest.raises(ValueError):
        PairedNamespaceOptions(secondary_connection_string="x", backlog_queue_count=0)


def test_the_backlog_copy_of_an_sdk_message() -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    original = ServiceBusMessage("hello", message_id="m1", session_id="s1", time_to_live=timedelta(seconds=30),
                                 scheduled_enqueue_time_utc=when, application_properties={"k": "v"},
                                 content_type="text/plain", correlation_id="c", subject="sub")
    copy = to_backlog_message(original, "orders")
    assert (copy.session_id, copy.time_to_live, copy.scheduled_enqueue_time_utc) == (None, None, None)
    assert (copy.message_id, copy.content_type, copy.correlation_id, copy.subject) == ("m1", "text/plain", "c", "sub")
    assert copy.application_properties == {"k": "v", bl.PATH: "orders", bl.SESSION_ID: "s1",
                                           bl.TIME_TO_LIVE: 30_000, bl.SCHEDULED_ENQUEUE_TIME: when}
    assert str(copy) == "hello"


def _put_token_refused(status: int) -> ServiceBusAuthenticationError:
    """What the SDK raises when a put-token is answered ``status`` (its AMQP layer's TokenAuthFailure inside)."""
    from azure.servicebus._pyamqp.error import TokenAuthFailure

    return ServiceBusAuthenticationError(message="Service Bus has encountered an error.",
                                         error=TokenAuthFailure(status, b"the messaging entity 'q' could not be found"))


@pytest.mark.parametrize(("error", "not_found", "namespace_fault"), [
    (MessagingEntityNotFoundError(message="gone"), True, False),
    (_put_token_refused(404), True, False),  # Service Bus answers a put-token for a missing entity 404
    (_put_token_refused(401), False, True),  # a wrong key: the namespace refuses the client
    (ServiceBusAuthenticationError(message="no"), False, True),
    (ServiceBusAuthorizationError(message="no"), False, False),
    (ValueError("bad argument"), False, False),
])
def test_a_put_token_answered_404_is_a_missing_entity_not_a_namespace_fault(
        error: Exception, not_found: bool, namespace_fault: bool) -> None:
    assert is_entity_not_found(error) is not_found
    assert is_namespace_auth_fault(error) is namespace_fault
    assert not is_failover_error(error)


def test_the_syphon_dead_letters_for_a_target_whose_put_token_was_answered_404() -> None:
    reason, description = refusal("orders", _put_token_refused(404)) or ("", "")
    assert reason == bl.TARGET_NOT_FOUND and "'orders' does not exist in the primary namespace" in description
    assert refusal("orders", _put_token_refused(401)) is None  # retried later, not dead-lettered
