"""Transactions: the partitioned-entity rules and the bookkeeping (commits on the core: tests/interop)."""

from __future__ import annotations

import pytest

from sodalite.errors import InvalidOperation, TransactionRolledBack, TransactionUnknown
from sodalite.model.partition import MessageDraft
from sodalite.server.entity_settings import EntitySettings
from sodalite.server.partitioned_actor import partition_key
from sodalite.server.transactions import (
    PartitionPin,
    Transactions,
    pin_partitioned_send,
    pin_transfer,
)

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)


def draft(body: bytes = b"x", *, message_id: str | None = None, session_id: str | None = None,
          partition_key: str | None = None) -> MessageDraft:
    tail = b"\x00\x53\x75\xa0" + bytes((len(body),)) + body
    return MessageDraft(message_id, session_id, partition_key, None, None, None, None, b"", 0, tail)


# ---- the seed's rules for partitioned entities ----------------------------------------------------------


def test_the_partition_key_is_session_then_partition_key_then_message_id_under_duplicate_detection() -> None:
    assert partition_key(draft(session_id="s", partition_key="s", message_id="m"), True) == "s"
    assert partition_key(draft(partition_key="p", message_id="m"), True) == "p"
    assert partition_key(draft(message_id="m"), True) == "m"
    assert partition_key(draft(message_id="m"), False) is None


def test_a_message_without_a_partition_key_is_refused() -> None:
    with pytest.raises(InvalidOperation, match="needs a partition key"):
        pin_partitioned_send(None, draft(message_id="m"), duplicate_detection=False)


def test_all_messages_of_a_transaction_share_one_key() -> None:
    pin = pin_partitioned_send(None, draft(partition_key="k"), False)
    assert pin == PartitionPin("k", None)
    assert pin_partitioned_send(pin, draft(message_id="k"), True) == pin  # the same key, from a MessageId
    with pytest.raises(InvalidOperation, match="same partition key"):
        pin_partitioned_send(pin, draft(partition_key="other"), False)


def test_session_id_and_partition_key_must_agree_and_one_session_per_transaction() -> None:
    with pytest.raises(InvalidOperation, match="differs from the SessionId"):
        pin_partitioned_send(None, draft(session_id="s", partition_key="p"), False)
    pin = pin_partitioned_send(None, draft(session_id="s1"), False)
    assert pin == PartitionPin("s1", "s1")
    with pytest.raises(InvalidOperation, match="several sessions"):
        pin_partitioned_send(pin, draft(session_id="s2"), False)
    assert pin_partitioned_send(PartitionPin("s1", None), draft(session_id="s1"), False) == PartitionPin("s1", "s1")


def test_a_transfer_passes_whole_or_not_at_all() -> None:
    with pytest.raises(InvalidOperation):
        pin_transfer(None, [draft(partition_key="a"), draft(partition_key="b")], False)
    assert pin_transfer(None, [draft(partition_key="a"), draft(session_id="a")], False) == PartitionPin("a", "a")


# ---- bookkeeping ------------------------------------------------------------------------------------


def test_declared_ids_are_distinct_and_spent_by_the_discharge() -> None:
    txns = Transactions()
    first, second = txns.declare(), txns.declare()
    assert first.txn_id != second.txn_id and len(txns) == 2
    assert txns.get(first.txn_id) is first
    assert txns.discharge(first.txn_id) is first
    with pytest.raises(TransactionUnknown):
        txns.get(first.txn_id)
    with pytest.raises(TransactionUnknown):
        txns.discharge(b"never declared")
    with pytest.raises(TransactionUnknown):
        txns.get("not binary")
    assert txns.roll_back_all() == 1 and len(txns) == 0


def test_a_transaction_not_discharged_within_two_minutes_is_rolled_back() -> None:
    txns = Transactions()
    txn = txns.declare(now=1_000)
    assert txns.get(txn.txn_id, now=1_000 + 120_000) is txn
    with pytest.raises(TransactionRolledBack, match="not discharged within 120 s"):
        txns.discharge(txn.txn_id, now=1_000 + 120_001)
    with pytest.raises(TransactionUnknown):  # and it is gone
        txns.get(txn.txn_id, now=1_000 + 120_002)
