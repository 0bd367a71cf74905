"""The PostgreSQL store against the memory store (the reference) on seeded random runs of the
store operations: every result and every read (peek, counts, next_due, partition_meta) must be
the same after every batch. Each run is bounded (a fixed number of batches) and reproducible from
its seed.

A real server is started by this process (``tests/pg_server.py``); each run has a schema of its own.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import psycopg
import pytest

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    Activate,
    Append,
    Claim,
    Claimed,
    ClaimSession,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionRef,
    Purge,
    ReleaseSession,
    RenewLocks,
    RenewSession,
    SessionClaimed,
    Settle,
    SettleItem,
    StoreOp,
)
from sodalite.store.postgres import PostgresStore

Q = PartitionRef("Orders", 0)
Q_LOWER = PartitionRef("orders", 0)  # the same partition: paths compare case-insensitively
DLQ = PartitionRef("orders/$deadletterqueue", 0)
REFS = (Q, DLQ)
SESSIONS = (None, "a", "b", "c")


class _Run:
    """Random batches of store operations, with the tokens and sessions the run has seen so far to settle with."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 1_000_000
        self.locks: list[tuple[PartitionRef, int, uuid.UUID]] = []
        self.session_locks: list[tuple[str, uuid.UUID]] = []

    def token(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128))

    def record(self) -> MessageRecord:
        r = self.rng
        state = r.choice((MessageState.ACTIVE, MessageState.ACTIVE, MessageState.ACTIVE, MessageState.SCHEDULED,
                          MessageState.DEFERRED))
        return MessageRecord(
            sequence_number=0, enqueued_time=self.now, message_id=r.choice((None, f"id-{r.randrange(5)}")),
            session_id=r.choice(SESSIONS), partition_key=None, time_to_live=None,
            expires_at=r.choice((None, None, self.now + r.randrange(-50, 400))),
            scheduled_enqueue_time=self.now + r.randrange(-50, 300) if state == MessageState.SCHEDULED else None,
            delivery_count=r.randrange(3), state=state, durable=r.choice((True, None)), priority=None,
            annotations=bytes(r.randrange(256) for _ in range(r.randrange(4))), annotation_count=r.randrange(3),
            tail=bytes(r.randrange(256) for _ in range(r.randrange(1, 12))))

    def numbers(self, store: MemoryStore, ref: PartitionRef) -> list[int]:
        known = [s.record.sequence_number for s in store.peek(ref, 0, 1000)]
        return [*self.rng.sample(known, min(len(known), self.rng.randrange(0, 4))), self.rng.randrange(1, 60)]

    def op(self, store: MemoryStore) -> StoreOp:
        r = self.rng
        ref = r.choice((*REFS, Q_LOWER))
        kind = r.randrange(13)
        if kind <= 2:
            return Append(tuple(self.record() for _ in range(r.randrange(0, 5))), ref=ref)
        if kind <= 4:
            return Claim(now=self.now, locked_until=self.now + r.randrange(1, 200), owner=r.choice(("n1", "n2")),
                         tokens=tuple(self.token() for _ in range(r.randrange(0, 4))),
                         session_id=r.choice(SESSIONS),
                         sequence_numbers=tuple(self.numbers(store, ref)) if r.random() < 0.25 else None,
                         state=r.choice((MessageState.ACTIVE, MessageState.ACTIVE, MessageState.DEFERRED)), ref=ref)
        if kind <= 6:
            items = []
            for _ in range(r.randrange(1, 4)):
                if self.locks and r.random() < 0.8:
                    _, seq, tok = r.choice(self.locks)
                else:
                    seq, tok = r.randrange(1, 60), self.token()
                outcome = r.choice(list(Outcome))
                annotations = r.choice((None, b"\x01\x02"))
                items.append(SettleItem(seq, tok, outcome, annotations=annotations,
                                        annotation_count=1 if annotations else 0,
                                        target=DLQ if outcome is Outcome.DEAD_LETTER else None))
            # Mostly a settlement's dead letters keep their numbers, all of them (as the core asks);
            # a number the dead-letter partition holds already is replaced (the port's rule).
            if ref != DLQ and self.now % 3 != 0:
                items = [replace(item, keep_sequence_number=item.outcome is Outcome.DEAD_LETTER) for item in items]
            return Settle(self.now, tuple(items), ref=ref)
        if kind == 7:
            picks = [(seq, tok) for _, seq, tok in r.sample(self.locks, min(len(self.locks), 3))]
            return RenewLocks(self.now, self.now + r.randrange(1, 300), tuple(picks) or ((1, self.token()),), ref=ref)
        if kind == 8:
            items = tuple(MoveItem(seq, annotations=r.choice((None, b"\x07")), annotation_count=1,
                                   reset_delivery_count=r.random() < 0.5)
                          for seq in self.numbers(store, ref))
            target = r.choice((None, DLQ, Q))
            return MoveMessages(self.now, items, target=target,
                                keep_sequence_numbers=target == DLQ and ref != DLQ and self.now % 3 != 0, ref=ref)
        if kind == 9:
            return Activate(self.now, r.randrange(0, 4), ref=ref)
        if kind == 10:
            if r.random() < 0.5 or not self.session_locks:
                return ClaimSession(self.now, self.token(), self.now + r.randrange(1, 200), "n1",
                                    r.choice(SESSIONS), ref=ref)
            sid, tok = r.choice(self.session_locks)
            if r.random() < 0.5:
                return RenewSession(self.now, sid, tok, self.now + r.randrange(1, 300), ref=ref)
            return ReleaseSession(sid, tok, ref=ref)
        if kind == 11:
            return Purge(self.now, r.choice((None, r.randrange(1, 40))), ref=ref)
        return MoveMessages(self.now, tuple(MoveItem(seq) for seq in self.numbers(store, ref)), target=None, ref=ref)

    def saw(self, batch: list[StoreOp], results: tuple[OpResult, ...]) -> None:
        for op, result in zip(batch, results, strict=True):
            if isinstance(op, Claim) and isinstance(result, Claimed):
                self.locks += [(op.ref, m.record.sequence_number, m.lock_token) for m in result.messages
                               if m.lock_token is not None]
            if isinstance(op, ClaimSession) and isinstance(result, SessionClaimed) and result.session_id:
                self.session_locks.append((result.session_id, op.token))


def _reads(store: MemoryStore | PostgresStore, now: int) -> list[object]:
    seen: list[object] = []
    for ref in (Q, DLQ):
        seen += [store.peek(ref, 0, 1000), store.counts(ref), store.next_due(ref, now), store.partition_meta(ref),
                 store.peek(ref, 3, 2, states=frozenset({MessageState.ACTIVE}), session_id="a")]
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_postgresql_matches_the_memory_store_on_random_batches(database: str, seed: int) -> None:
    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    # A tiny rotate_bytes: the ring turns (and truncates) during the run, which must change nothing.
    postgres = PostgresStore(f"{database}?options=-csearch_path%3D{schema}", rotate_bytes=8192)
    memory = MemoryStore()
    postgres.open()
    memory.open()
    run = _Run(seed)
    try:
        for step in range(60):
            run.now += run.rng.randrange(0, 60)
            batch = [run.op(memory) for _ in range(run.rng.randrange(1, 4))]
            expected = memory.apply(batch)
            got = postgres.apply(batch)
            assert got == expected, f"seed {seed} step {step}: {batch}"
            run.saw(batch, expected)
            assert _reads(postgres, run.now) == _reads(memory, run.now), f"seed {seed} step {step}: {batch}"
            if step % 10 == 9:
                postgres.maintain()
    finally:
        postgres.close()
        memory.close()
