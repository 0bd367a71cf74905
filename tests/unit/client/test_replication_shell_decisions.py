"""The decisions the sync and asyncio replicated clients share (``replication_core``): entity pairs,
roles, turns, failures over two namespaces, settlements and replies (no broker)."""

from __future__ import annotations

import datetime

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSender,
)
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    OperationTimeoutError,
    ServiceBusConnectionError,
)

from sodalite.client.dedup import DuplicateFilter
from sodalite.client.replication_core import (
    PING_CONTENT_TYPE,
    PRIMARY,
    SECONDARY,
    Attempts,
    CopyTracker,
    Outcome,
    ReplicationMode,
    Roles,
    Turns,
    active_send_result,
    admit_all,
    batch_limit,
    check_mode,
    earliest,
    expired,
    held_to_settle,
    no_reply,
    queue_pair,
    receive_deadline,
    receives_and_deletes,
    reply_queue,
    session_at_start,
    session_to_ask,
    settle_method,
    settle_options,
    subscription_pair,
    topic_pair,
    with_message_id,
)
from sodalite.client.replication_shared import session_factories
from sodalite.errors import ConfigurationError

GOOD = "Endpoint=sb://a.example:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"


class Copy:
    """What the shared decisions read of a received message."""

    def __init__(self, message_id: str | None, content_type: str | None = None, reply_to: str | None = None) -> None:
        self.message_id = message_id
        self.content_type = content_type
        self.reply_to = reply_to


def _down() -> ServiceBusConnectionError:
    return ServiceBusConnectionError(message="namespace down")


# -- entity pairs --------------------------------------------------------------------------------

def test_the_secondary_entity_has_the_primarys_name_unless_one_is_given() -> None:
    assert queue_pair("q", None).names == (("q",), ("q",))
    assert queue_pair("q", "q2").names == (("q",), ("q2",))
    assert subscription_pair("t", "s", None, "s2").names == (("t", "s"), ("t", "s2"))
    assert subscription_pair("t", "s", "t2", None).names == (("t", "s"), ("t2", "s"))


def test_senders_to_one_pair_share_a_key_and_queues_and_topics_never_do() -> None:
    assert queue_pair("a", None).key == queue_pair("a", "a").key == "queue:a|a"
    assert queue_pair("a", "b").key == "queue:a|b"
    assert topic_pair("a", None).key != queue_pair("a", None).key


def test_a_pair_makes_each_namespaces_handler_for_its_own_name() -> None:
    with ServiceBusClient.from_connection_string(GOOD) as client:  # making a handler opens nothing
        pair = topic_pair("t", "t2")
        sender = pair.sender(client, SECONDARY)
        assert isinstance(sender, ServiceBusSender) and sender.entity_name == "t2"
        receiver = subscription_pair("t", "s", "t2", "s2").receiver(client, SECONDARY)
        assert receiver.entity_path == "t2/Subscriptions/s2"
        session_receiver = queue_pair("q", None).receiver(client, PRIMARY, session_id="s1")
        assert session_receiver.entity_path == "q"
        assert session_receiver.session.session_id == "s1"


def test_receive_mode_and_replication_mode_are_read_as_the_sdk_spells_them() -> None:
    assert receives_and_deletes({"receive_mode": ServiceBusReceiveMode.RECEIVE_AND_DELETE})
    assert receives_and_deletes({"receive_mode": "receiveanddelete"})
    assert not receives_and_deletes({})
    assert not receives_and_deletes({"receive_mode": ServiceBusReceiveMode.PEEK_LOCK})
    assert check_mode(ReplicationMode.PASSIVE) is ReplicationMode.PASSIVE
    with pytest.raises(ConfigurationError, match="mode must be a ReplicationMode, not 'passive'"):
        check_mode("passive")


# -- roles ---------------------------------------------------------------------------------------

def test_roles_start_on_the_primary_and_switch_once_per_failure() -> None:
    roles = Roles()
    assert roles.active("queue:a|a") == PRIMARY
    roles.switch_from("queue:a|a", PRIMARY)
    assert roles.active("queue:a|a") == SECONDARY
    roles.switch_from("queue:a|a", PRIMARY)  # a second sender that saw the same failure late
    assert roles.active("queue:a|a") == SECONDARY
    assert roles.active("queue:b|b") == PRIMARY


# -- failures over two namespaces ----------------------------------------------------------------

def test_an_error_about_the_message_is_raised_at_once_chained_to_an_earlier_outage() -> None:
    attempts = Attempts()
    refused = MessageSizeExceededError(message="too large")
    with pytest.raises(MessageSizeExceededError) as caught:
        attempts.failed(refused)
    assert caught.value.__cause__ is None
    first = _down()
    attempts.failed(first)
    with pytest.raises(MessageSizeExceededError) as caught:
        attempts.failed(MessageSizeExceededError(message="too large"))
    assert caught.value.__cause__ is first


def test_giving_up_raises_the_last_outage_chained_to_the_first() -> None:
    attempts = Attempts()
    first, second = _down(), OperationTimeoutError(message="no reply")
    attempts.failed(first)
    attempts.failed(second)
    with pytest.raises(OperationTimeoutError) as caught:
        attempts.give_up()
    assert caught.value.__cause__ is first


def test_a_batch_limit_is_the_smaller_of_those_that_answered() -> None:
    assert batch_limit([262144, 1024], Attempts()) == 1024
    attempts = Attempts()
    attempts.failed(_down())
    assert batch_limit([4096], attempts) == 4096
    attempts.failed(_down())
    with pytest.raises(ServiceBusConnectionError):
        batch_limit([], attempts)


def test_an_active_send_fails_only_when_both_copies_failed() -> None:
    first, second = _down(), _down()
    assert active_send_result(None, None).error is None and active_send_result(None, None).lost is None
    lost_second = active_send_result(None, second)
    assert (lost_second.error, lost_second.lost, lost_second.lost_error) == (None, SECONDARY, second)
    lost_first = active_send_result(first, None)
    assert (lost_first.error, lost_first.lost, lost_first.lost_error) == (None, PRIMARY, first)
    both = active_send_result(first, second)
    assert (both.error, both.cause) == (second, first)


# -- turns -----------------------------------------------------------------------------------------

def test_turns_start_with_whoever_delivered_last_and_every_fourth_round_the_other() -> None:
    turns = Turns(retry_interval=2.0)
    assert [turns.order() for _ in range(4)] == [[0, 1], [0, 1], [0, 1], [1, 0]]
    turns.delivered(SECONDARY)
    assert [turns.order() for _ in range(4)] == [[1, 0], [1, 0], [1, 0], [0, 1]]


def test_a_namespace_that_failed_rests_for_the_retry_interval() -> None:
    turns = Turns(retry_interval=2.0)
    turns.down(PRIMARY, now=100.0)
    assert turns.slice_for(PRIMARY, 101.0, None, 0.5) is None
    assert turns.slice_for(SECONDARY, 101.0, None, 0.5) == 0.5
    assert turns.slice_for(PRIMARY, 102.0, None, 0.5) == 0.5
    assert turns.idle_pause(101.0) == 0.0  # the other one is there to wait on
    turns.down(SECONDARY, now=101.0)
    assert turns.idle_pause(101.5) == 0.2


def test_a_slice_never_outlasts_the_callers_deadline_nor_drops_below_a_floor() -> None:
    turns = Turns(retry_interval=2.0)
    assert turns.slice_for(PRIMARY, 10.0, 10.3, 0.5) == pytest.approx(0.3)
    assert turns.slice_for(PRIMARY, 10.0, 10.0, 0.5) == 0.05
    assert receive_deadline(None, None, 10.0) is None
    assert receive_deadline(None, 3.0, 10.0) == 13.0
    assert receive_deadline(1.0, 3.0, 10.0) == 11.0
    assert not expired(None, 1e12) and expired(13.0, 13.0) and not expired(13.0, 12.9)


# -- copies, settlements, sessions, requests -----------------------------------------------------------

def test_a_receives_copies_split_into_delivered_and_quietly_completed() -> None:
    tracker: CopyTracker[str] = CopyTracker(DuplicateFilter(), receive_and_delete=False)
    tracker.duplicates.record("done")
    copies = [Copy("new"), Copy("done"), Copy(None, PING_CONTENT_TYPE), Copy("new")]
    delivered, quiet = admit_all(tracker, copies, "primary")  # type: ignore[arg-type]
    assert delivered == [copies[0]]
    assert quiet == [copies[1], copies[2]]  # the second "new" is held, neither delivered nor settled


def test_each_outcome_has_its_sdk_method_and_only_dead_lettering_takes_options() -> None:
    assert [settle_method(o) for o in Outcome] == ["complete_message", "abandon_message",
                                                    "dead_letter_message", "defer_message"]
    options = {"reason": "r", "error_description": "d"}
    assert settle_options(Outcome.DEAD_LETTER, options) == options
    assert settle_options(Outcome.COMPLETE, options) == {}


def test_held_copies_of_a_replaced_receiver_are_not_settled() -> None:
    old, current, other = object(), object(), object()
    held = [(Copy("a"), (PRIMARY, old)), (Copy("b"), (PRIMARY, current)), (Copy("c"), (SECONDARY, other))]
    kept = held_to_settle(held, [current, other])  # type: ignore[arg-type]
    assert [(copy.message_id, receiver) for copy, receiver in kept] == [("b", current), ("c", other)]


def test_a_next_available_session_is_unknown_until_picked() -> None:
    assert session_at_start(NEXT_AVAILABLE_SESSION) is None
    assert session_at_start("s1") == "s1"
    assert session_to_ask(None) == NEXT_AVAILABLE_SESSION
    assert session_to_ask("s1") == "s1"


def test_a_session_lock_holds_until_the_earliest_known_expiry() -> None:
    early = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    late = early + datetime.timedelta(seconds=30)
    assert earliest([late, None, early]) == early
    assert earliest([None]) is None


def test_a_reply_goes_to_the_requests_reply_to_and_names_the_request() -> None:
    reply = ServiceBusMessage("re")
    assert reply_queue(Copy("req-1", reply_to="replies"), reply) == "replies"  # type: ignore[arg-type]
    assert reply.correlation_id == "req-1"
    with pytest.raises(ConfigurationError, match="the request has no ReplyTo"):
        reply_queue(Copy("req-2"), ServiceBusMessage("re"))  # type: ignore[arg-type]


def test_a_request_keeps_its_message_id_and_a_missing_reply_is_a_timeout() -> None:
    assert with_message_id(ServiceBusMessage("x", message_id="m1")).message_id == "m1"
    assert with_message_id(ServiceBusMessage("x")).message_id
    error = no_reply(ServiceBusMessage("x", message_id="m1"), 5.0, SECONDARY)
    assert isinstance(error, OperationTimeoutError)
    assert "no reply to request m1 within 5.0 s from request endpoint 1" in str(error)


def test_a_session_receivers_factories_ask_for_the_session_picked_so_far() -> None:
    picked: list[str] = []
    makers = (lambda sid: ("primary", sid), lambda sid: ("secondary", sid))
    factories = session_factories(makers, lambda: picked[0] if picked else None)
    assert factories[0]() == ("primary", NEXT_AVAILABLE_SESSION)
    picked.append("s7")  # the primary's next available session turned out to be s7
    assert factories[1]() == ("secondary", "s7")
    assert factories[0]() == ("primary", "s7")
