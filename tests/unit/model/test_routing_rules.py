"""The send rules decided before a partition core sees a message (model/routing.py, model/quotas.py,
model/partitioning.py): pings end at the door, ForwardTo chains stop at the hop limit, quotas refuse
with Service Bus's texts, and a key always picks the same partition."""

from __future__ import annotations

import pytest

from sodalite.errors import InvalidOperation
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, MessageDraft
from sodalite.model.partitioning import partition_index, partition_key, partition_of_sequence_number
from sodalite.model.quotas import entity_full, namespace_full, topic_full
from sodalite.model.routing import (
    MAX_TRANSFER_HOPS,
    dead_letter_hop_limit,
    follow,
    hop_limit_dead_letter,
    past_hop_limit,
    without_pings,
)


def _draft(message_id: str | None = None, session_id: str | None = None, partition_key: str | None = None,
           ping: bool = False) -> MessageDraft:
    return MessageDraft(message_id, session_id, partition_key, None, None, None, None, b"", 0, b"", ping)


def test_pings_end_at_the_door_and_the_rest_go_on() -> None:
    plain = [_draft(message_id="a")]
    assert without_pings(plain) == (plain, False)
    assert without_pings([_draft(ping=True), *plain]) == (plain, True)


def test_a_chain_is_followed_to_its_end_and_stops_at_the_hop_limit() -> None:
    chain = {"a": "b", "b": "c"}
    assert follow("a", chain.get) == ("c", 2, False)
    assert past_hop_limit(2, False) is None
    loop = {"a": "b", "b": "a"}
    end, hops, exceeded = follow("a", loop.get)
    assert (hops, exceeded) == (MAX_TRANSFER_HOPS, True) and end == "a"
    assert past_hop_limit(hops, exceeded) == f"forwarded {MAX_TRANSFER_HOPS} times"
    assert past_hop_limit(MAX_TRANSFER_HOPS + 1, False) == f"forwarded {MAX_TRANSFER_HOPS + 1} times"


def test_quotas_refuse_past_their_limit_only() -> None:
    assert entity_full("q", 90, 10, 100) is None and entity_full("q", 90, 11, 100) is not None
    assert entity_full("q", 10**9, 1, None) is None
    assert namespace_full(9, 0, False, 10, 1) is None
    assert namespace_full(10, 0, False, 10, 1) == (
        "the namespace already has 10 queues and topics, its quota (MaxEntityCount 10)")
    assert namespace_full(5, 1, True, 10, 1) is not None and namespace_full(5, 1, False, 10, 1) is None
    assert topic_full("t", 1, 2) is None and topic_full("t", 2, 2) is not None


def test_a_key_picks_its_partition_and_a_number_names_one() -> None:
    assert partition_index("k", 4) == partition_index("k", 4) < 4
    assert partition_of_sequence_number((3 << 48) + 7) == 3
    assert partition_key(_draft(session_id="s"), False) == "s"
    assert partition_key(_draft(message_id="m"), True) == "m" and partition_key(_draft(message_id="m"), False) is None
    with pytest.raises(InvalidOperation):
        partition_key(_draft(session_id="s", partition_key="p"), False)


def test_a_forwarded_dead_letter_counts_the_forward_as_one_hop() -> None:
    assert dead_letter_hop_limit(MAX_TRANSFER_HOPS - 1, False) is None
    assert dead_letter_hop_limit(MAX_TRANSFER_HOPS, False) == f"forwarded {MAX_TRANSFER_HOPS + 1} times"
    assert dead_letter_hop_limit(0, True) == "forwarded 1 times"


def test_past_the_hop_limit_a_message_is_dead_lettered_with_max_transfer_hop_count_exceeded() -> None:
    assert hop_limit_dead_letter(MAX_TRANSFER_HOPS, False) is None
    assert hop_limit_dead_letter(MAX_TRANSFER_HOPS + 1, False) == (
        MAX_TRANSFER_HOP_COUNT_EXCEEDED, f"forwarded {MAX_TRANSFER_HOPS + 1} times")
    assert hop_limit_dead_letter(2, True) == (MAX_TRANSFER_HOP_COUNT_EXCEEDED, "forwarded 2 times")
