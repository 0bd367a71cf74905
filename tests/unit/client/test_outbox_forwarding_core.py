"""The outbox forwarders' shared decisions (``outbox_core``): what to send, and what a failed send means."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusConnectionError

from sodalite.client.outbox_core import (
    AfterRefusal,
    PendingRow,
    Undecodable,
    after_refusal,
    check_batch_size,
    check_can_forward,
    decode_rows,
    encode,
    make_sender,
    refusal_text,
    send_payload,
)
from sodalite.errors import ConfigurationError


def _row(seq: int, body: str) -> PendingRow:
    return PendingRow(seq, "queue", "orders", encode(ServiceBusMessage(body, message_id=f"m{seq}")))


def test_rows_decode_in_order() -> None:
    messages = decode_rows([_row(1, "a"), _row(2, "b")])
    assert isinstance(messages, list)
    assert [m.message_id for m in messages] == ["m1", "m2"]


def test_the_first_row_that_cannot_be_decoded_is_named_alone() -> None:
    broken = PendingRow(2, "queue", "orders", "{not json")
    outcome = decode_rows([_row(1, "a"), broken, PendingRow(3, "queue", "orders", "also broken")])
    assert isinstance(outcome, Undecodable)
    assert outcome.row == broken
    assert outcome.error.startswith("the stored message cannot be decoded: ")


def test_a_lone_message_is_sent_as_itself_and_several_as_a_list() -> None:
    one = ServiceBusMessage("a")
    two = ServiceBusMessage("b")
    assert send_payload([one]) is one
    assert send_payload([one, two]) == [one, two]


def test_an_availability_error_keeps_the_rows_whatever_their_number() -> None:
    error = ServiceBusConnectionError(message="gone")
    assert after_refusal([_row(1, "a")], error) is AfterRefusal.KEEP
    assert after_refusal([_row(1, "a"), _row(2, "b")], error) is AfterRefusal.KEEP


def test_a_refused_batch_is_split_and_a_refused_row_set_aside_with_the_error() -> None:
    error = MessageSizeExceededError(message="too large")
    assert after_refusal([_row(1, "a"), _row(2, "b")], error) is AfterRefusal.SPLIT
    assert after_refusal([_row(1, "a")], error) is AfterRefusal.SET_ASIDE
    assert refusal_text(error).startswith("MessageSizeExceededError: ")
    assert "too large" in refusal_text(error)


def test_bad_batch_sizes_and_a_missing_client_are_configuration_errors() -> None:
    check_batch_size(1)
    with pytest.raises(ConfigurationError, match="batch_size must be at least 1, not 0"):
        check_batch_size(0)
    with pytest.raises(ConfigurationError, match="no client to forward through"):
        check_can_forward(None)


def test_the_sender_matches_the_rows_kind() -> None:
    connection = "Endpoint=sb://a.example:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    with ServiceBusClient.from_connection_string(connection) as client:  # opens nothing until a send
        queue_sender = make_sender(client, "queue", "q")
        topic_sender = make_sender(client, "topic", "t")
        assert isinstance(queue_sender, ServiceBusSender) and queue_sender.entity_name == "q"
        assert isinstance(topic_sender, ServiceBusSender) and topic_sender.entity_name == "t"
