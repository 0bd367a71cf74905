"""Completes group-committed together on PostgreSQL: Settle operations of one partition that follow
each other in a batch and only complete distinct messages run as one statement, each item still
fenced at its own operation's ``now``, with the same results as the memory store (the reference).

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own.
"""

from __future__ import annotations

import uuid

from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    Append,
    Claim,
    Claimed,
    MessagingStore,
    OpResult,
    Outcome,
    PartitionRef,
    Settle,
    SettleItem,
    StoreOp,
)
from sodalite.store.postgres import PostgresStore
from store.pg_rows import record

Q = PartitionRef("orders", 0)
OTHER = PartitionRef("other", 0)
NOW = 1_000_000
LOCK = 30_000


def _setup(store: MessagingStore, tokens: list[uuid.UUID], other_token: uuid.UUID) -> list[tuple[int, uuid.UUID]]:
    store.apply([Append(tuple(record() for _ in tokens), ref=Q), Append((record(),), ref=OTHER)])
    # half the messages locked until NOW + LOCK, the other half until NOW + 2 * LOCK
    half = len(tokens) // 2
    (first,) = store.apply([Claim(NOW, NOW + LOCK, "node", tuple(tokens[:half]), ref=Q)])
    (second,) = store.apply([Claim(NOW, NOW + 2 * LOCK, "node", tuple(tokens[half:]), ref=Q)])
    store.apply([Claim(NOW, NOW + LOCK, "node", (other_token,), ref=OTHER)])
    assert isinstance(first, Claimed) and isinstance(second, Claimed)
    return [(m.record.sequence_number, m.lock_token or uuid.UUID(int=0)) for m in first.messages + second.messages]


def _batch(locked: list[tuple[int, uuid.UUID]], other_token: uuid.UUID) -> list[StoreOp]:
    def complete(ref: PartitionRef, number: int, token: uuid.UUID, now: int) -> Settle:
        return Settle(now, (SettleItem(number, token, Outcome.COMPLETE),), ref=ref)

    ops: list[StoreOp] = []
    for index, (number, token) in enumerate(locked[:30]):
        # every third one after the first half's locks lapsed: only the second half's still apply
        now = NOW + LOCK + 1 if index % 3 == 0 else NOW + 1
        ops.append(complete(Q, number, token, now))
    ops.append(complete(Q, locked[30][0], uuid.uuid4(), NOW + 1))  # a stale token
    ops.append(complete(Q, locked[0][0], locked[0][1], NOW + 1))  # completed (or refused) just before
    ops.append(complete(OTHER, 1, other_token, NOW + 1))  # another partition ends the run
    ops.append(Settle(NOW + 1, tuple(SettleItem(n, t, Outcome.COMPLETE) for n, t in locked[31:35]), ref=Q))
    ops.append(Settle(NOW + 1, (SettleItem(locked[35][0], locked[35][1], Outcome.ABANDON),), ref=Q))  # not a complete
    ops.extend(complete(Q, n, t, NOW + 1) for n, t in locked[36:40])
    return ops


def test_back_to_back_completes_run_as_one_statement_with_the_reference_results(store: PostgresStore) -> None:
    tokens = [uuid.uuid4() for _ in range(40)]
    other_token = uuid.uuid4()
    memory = MemoryStore()
    memory.open()
    expected_locked = _setup(memory, tokens, other_token)
    locked = _setup(store, tokens, other_token)
    assert locked == expected_locked
    batch = _batch(locked, other_token)
    before = store.statements
    got: tuple[OpResult, ...] = store.apply(batch)
    statements = store.statements - before
    assert got == memory.apply(batch)
    # 30 completes + 2 more (a stale token; a number already in the run) merge into one statement
    # (the repeated number cannot join the first run, so it starts the second); then OTHER, the
    # 4-item settle with the next completes, the abandon: far fewer statements than operations.
    assert statements < len(batch) / 3, statements
    for ref in (Q, OTHER):
        assert store.counts(ref) == memory.counts(ref)
    assert [m.record.sequence_number for m in store.peek(Q, 0, 100)] == \
        [m.record.sequence_number for m in memory.peek(Q, 0, 100)]
