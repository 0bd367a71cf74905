"""The partition runner (server/partition_runner.py) against the real MemoryStore and SqliteStore.

Port v2 only (apply, peek, partition_meta), a fake clock that fires timers when a test moves time
on (no sleeps), and a thin wrapper around the real store that counts ``apply`` calls, records what
each committed transaction appended, and can make the next transaction raise."""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest

from sodalite.amqp import message as amqp_message
from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.model.partition_core import (
    AcceptSession,
    CancelScheduled,
    CloseConsumer,
    CompletedThrough,
    CompleteThrough,
    CoreSettings,
    DeferredReceived,
    Delivered,
    LockLost,
    MessageNotFound,
    MovedOut,
    MoveOut,
    PublishCopy,
    Published,
    PublishEntry,
    Receive,
    ReceiveDeferred,
    ReceiveMode,
    Reply,
    Schedule,
    ScheduledCancelled,
    Send,
    SendAccepted,
    ServerBusy,
    SessionAccepted,
    SessionStateSet,
    SetSessionState,
    Settle,
    SettlementDone,
    Transact,
    record_for,
)
from sodalite.model.store_ops import (
    AnnotationEdit,
    Append,
    AppendTo,
    Gate,
    MoveItem,
    MoveMessages,
    Outcome,
    Purge,
    SettleItem,
)
from sodalite.model.store_ops import Settle as SettleOp
from sodalite.server import wire
from sodalite.server.partition_runner import PartitionRunner, Timer, bind, encode_edit
from sodalite.server.store_worker import StoreWorker
from sodalite.store import port
from sodalite.store.memory import MemoryStore
from sodalite.store.sqlite import SqliteStore

REF = port.PartitionRef("runnerq", 0)
DLQ = port.PartitionRef("runnerq/$deadletterqueue", 0)
START = 1_700_000_000_000  # ms since the epoch
LOCK = 30_000
SETTINGS = CoreSettings(lock_duration=LOCK, owner="test-node")


# ---- a fake clock -------------------------------------------------------------------------------------


@dataclass
class _FakeTimer:
    when: int
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    """Time stands still until ``advance``, which fires the timers whose time came, in time order."""

    now_ms: int = START
    timers: list[_FakeTimer] = field(default_factory=list)

    def now(self) -> int:
        return self.now_ms

    def call_at(self, when: int, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(when, callback)
        if when <= self.now_ms:  # already due: soon, never inside the caller
            asyncio.get_running_loop().call_soon(lambda: None if timer.cancelled else timer.callback())
        else:
            self.timers.append(timer)
        return timer

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        due = sorted((t for t in self.timers if t.when <= self.now_ms and not t.cancelled), key=lambda t: t.when)
        self.timers = [t for t in self.timers if t.when > self.now_ms and not t.cancelled]
        for timer in due:
            if not timer.cancelled:
                timer.callback()


# ---- a thin wrapper around the real store ---------------------------------------------------------------


class CountingStore:
    """Delegates to ``inner``; counts applies, remembers committed appends, fails on demand."""

    def __init__(self, inner: port.MessagingStore) -> None:
        self.inner = inner
        self.apply_calls = 0
        self.batch_sizes: list[int] = []
        self.committed: set[int] = set()  # sequence numbers whose Append committed
        self.fail_next = False
        self.fail_counts = False  # counts() raises StoreUnavailable while set

    def open(self) -> None:
        self.inner.open()

    def apply(self, batch: Sequence[port.StoreOp]) -> tuple[port.OpResult, ...]:
        self.apply_calls += 1
        self.batch_sizes.append(len(batch))
        if self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("injected: the transaction failed")
        results = self.inner.apply(batch)
        for op, result in zip(batch, results, strict=True):
            if isinstance(op, port.Append) and isinstance(result, port.Appended):
                self.committed.update(result.sequence_numbers)
        return results

    def peek(self, ref: port.PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[port.StoredMessage, ...]:
        return self.inner.peek(ref, from_sequence_number, count, states, session_id)

    def fetch(self, ref: port.PartitionRef, sequence_numbers: Sequence[int]) -> tuple[port.StoredMessage, ...]:
        return self.inner.fetch(ref, sequence_numbers)

    def counts(self, ref: port.PartitionRef) -> port.PartitionCounts:
        if self.fail_counts:
            raise StoreUnavailable("injected: the store cannot be read")
        return self.inner.counts(ref)

    def next_due(self, ref: port.PartitionRef, now: int) -> int | None:
        return self.inner.next_due(ref, now)

    def partition_meta(self, ref: port.PartitionRef) -> port.PartitionMeta:
        return self.inner.partition_meta(ref)

    def load_entities(self) -> list[port.EntityRecord]:
        return self.inner.load_entities()

    def stats(self, ref: port.PartitionRef) -> port.PartitionStats:
        return self.inner.stats(ref)

    def maintain(self) -> bool:
        return self.inner.maintain()

    def close(self) -> None:
        self.inner.close()


# ---- the fixture: one runner over a real store -------------------------------------------------------------


@dataclass
class Setup:
    store: CountingStore
    worker: StoreWorker
    runner: PartitionRunner
    clock: FakeClock
    replies: list[Reply]

    async def rows(self) -> tuple[port.StoredMessage, ...]:
        return await self.worker.call(lambda: self.store.inner.peek(REF, 0, 1000))

    def of(self, kind: type[Reply]) -> list[Reply]:
        return [r for r in self.replies if isinstance(r, kind)]


def _make_store(kind: str, tmp_path: pathlib.Path) -> port.MessagingStore:
    return MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "runner.db", "NORMAL")


async def _setup(inner: port.MessagingStore, clock: FakeClock | None = None,
                 on_reply: Callable[[Reply, CountingStore], None] | None = None,
                 settings: CoreSettings = SETTINGS) -> Setup:
    store = CountingStore(inner)
    worker = StoreWorker(store, "runner-test")
    await worker.open()
    clock = clock or FakeClock()
    replies: list[Reply] = []

    def hear(reply: Reply) -> None:
        if on_reply is not None:
            on_reply(reply, store)
        replies.append(reply)

    runner = await PartitionRunner.start(REF, settings, worker, clock, hear, token_seed=7)
    await runner.drained()
    return Setup(store, worker, runner, clock, replies)


async def _teardown(s: Setup) -> None:
    await s.runner.close()
    await s.worker.close()


def run(kind: str, tmp_path: pathlib.Path, body: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path))
        try:
            await body(s)
        finally:
            await _teardown(s)
    asyncio.run(main())


def draft(body: bytes, message_id: str | None = None, session: str | None = None) -> MessageDraft:
    data_section = b"\x00Su\xa0" + bytes([len(body)]) + body
    return MessageDraft(message_id, session, None, None, None, None, None, b"", 0, data_section)


STORES = pytest.mark.parametrize("kind", ["memory", "sqlite"])


# ---- tests ------------------------------------------------------------------------------------------------------


@STORES
def test_a_send_is_accepted_only_once_its_append_is_committed(kind: str, tmp_path: pathlib.Path) -> None:
    seen_committed: list[bool] = []

    def check(reply: Reply, store: CountingStore) -> None:
        if isinstance(reply, SendAccepted):
            seen_committed.append(set(reply.sequence_numbers) <= store.committed)

    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path), on_reply=check)
        try:
            s.runner.submit(Send((draft(b"one"), draft(b"two")), reply_to="send-1"))
            assert s.of(SendAccepted) == []  # nothing is acknowledged before the worker committed
            await s.runner.drained()
            assert s.of(SendAccepted) == [SendAccepted("send-1", (1, 2))]
            assert seen_committed == [True]
            rows = await s.rows()
            assert [r.record.sequence_number for r in rows] == [1, 2]
            assert rows[0].record.tail.endswith(b"one")
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_send_receive_complete_leaves_nothing_in_the_store(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"hello"),), reply_to="send"))
        await s.runner.drained()
        s.runner.submit(Receive("consumer", 1))
        await s.runner.drained()
        delivered = s.of(Delivered)
        assert len(delivered) == 1
        d = delivered[0]
        assert isinstance(d, Delivered) and d.lock_token is not None
        assert d.message.sequence_number == 1 and d.message.delivery_count == 1
        (row,) = await s.rows()
        assert row.lock_token == d.lock_token  # the lock is in the store
        s.runner.submit(Settle(d.lock_token, Outcome.COMPLETE, reply_to="tag-1"))
        await s.runner.drained()
        assert s.of(SettlementDone) == [SettlementDone("tag-1", d.lock_token, Outcome.COMPLETE)]
        assert await s.rows() == ()
        counts = await s.worker.call(lambda: s.store.inner.counts(REF))
        assert counts.message_count == 0
    run(kind, tmp_path, body)


@STORES
def test_a_cancelled_scheduled_message_leaves_the_store(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        later = replace(draft(b"later"), scheduled_enqueue_time=START + 60_000)
        s.runner.submit(Schedule((later,), reply_to="schedule"))
        s.runner.submit(Send((draft(b"now"),), reply_to="send"))
        await s.runner.drained()
        assert s.of(SendAccepted) == [SendAccepted("schedule", (1,)), SendAccepted("send", (2,))]
        assert [(r.record.sequence_number, r.record.state) for r in await s.rows()] == [
            (1, MessageState.SCHEDULED), (2, MessageState.ACTIVE)]
        # naming the active message too: a cancel takes only scheduled rows, all or none
        s.runner.submit(CancelScheduled((1, 2), reply_to="refused"))
        await s.runner.drained()
        assert s.of(MessageNotFound) == [MessageNotFound("refused", (2,))]
        assert len(await s.rows()) == 2
        s.runner.submit(CancelScheduled((1,), reply_to="cancel"))
        await s.runner.drained()
        assert s.of(ScheduledCancelled) == [ScheduledCancelled("cancel", (1,))]
        assert s.of(ServerBusy) == []
        (row,) = await s.rows()
        assert (row.record.sequence_number, row.record.state, row.lock_token) == (2, MessageState.ACTIVE, None)
        counts = await s.worker.call(lambda: s.store.inner.counts(REF))
        assert (counts.scheduled, counts.active) == (0, 1)
        # cancelling it again finds nothing (message-not-found); the time it was due passes without a delivery
        s.runner.submit(CancelScheduled((1,), reply_to="again"))
        await s.runner.drained()
        assert s.of(MessageNotFound)[-1] == MessageNotFound("again", (1,))
        s.clock.advance(120_000)
        await s.runner.drained()
        assert [r.record.sequence_number for r in await s.rows()] == [2]
    run(kind, tmp_path, body)


@STORES
def test_sends_submitted_together_share_one_transaction(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        before = s.store.apply_calls
        for i in range(20):  # all in one loop turn: the worker has not run yet
            s.runner.submit(Send((draft(f"m{i}".encode()), draft(f"n{i}".encode())), reply_to=i))
        await s.runner.drained()
        assert s.store.apply_calls - before == 1 < 20
        assert s.of(SendAccepted) == [SendAccepted(i, (2 * i + 1, 2 * i + 2)) for i in range(20)]
        rows = await s.rows()
        assert [r.record.sequence_number for r in rows] == list(range(1, 41))
        assert rows[5].record.tail.endswith(b"n2")
    run(kind, tmp_path, body)


@STORES
def test_a_failed_group_commit_busies_every_send_and_stores_nothing(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.store.fail_next = True
        for i in range(5):
            s.runner.submit(Send((draft(f"m{i}".encode()),), reply_to=i))
        await s.runner.drained()
        assert s.of(ServerBusy) == [ServerBusy(i) for i in range(5)]
        assert s.of(SendAccepted) == []
        assert await s.rows() == ()
        s.runner.submit(Send((draft(b"again"),), reply_to="after"))
        await s.runner.drained()
        assert s.of(SendAccepted) == [SendAccepted("after", (1,))]
        assert [r.record.tail[-5:] for r in await s.rows()] == [b"again"]
    run(kind, tmp_path, body)


@STORES
def test_a_lapsed_lock_redelivers_with_delivery_count_two(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"x"),), reply_to="send"))
        s.runner.submit(Receive("consumer", 2))
        await s.runner.drained()
        first = s.of(Delivered)
        assert len(first) == 1 and isinstance(first[0], Delivered)
        assert first[0].message.delivery_count == 1
        assert s.runner.next_due == START + LOCK  # the lock's end is the timer
        s.clock.advance(LOCK - 1)
        await s.runner.drained()
        assert len(s.of(Delivered)) == 1  # not yet
        s.clock.advance(1)
        await s.runner.drained()
        second = s.of(Delivered)[1]
        assert isinstance(second, Delivered)
        assert second.message.sequence_number == 1 and second.message.delivery_count == 2
        assert second.lock_token != first[0].lock_token
        (row,) = await s.rows()
        assert row.record.delivery_count == 2 and row.lock_token == second.lock_token
        # the first token no longer settles; the second does
        assert first[0].lock_token is not None and second.lock_token is not None
        s.runner.submit(Settle(first[0].lock_token, Outcome.COMPLETE, reply_to="stale"))
        s.runner.submit(Settle(second.lock_token, Outcome.COMPLETE, reply_to="fresh"))
        await s.runner.drained()
        assert [r for r in s.replies if getattr(r, "reply_to", None) == "fresh"] == [
            SettlementDone("fresh", second.lock_token, Outcome.COMPLETE)]
        assert not any(isinstance(r, SettlementDone) and r.reply_to == "stale" for r in s.replies)
        assert await s.rows() == ()
    run(kind, tmp_path, body)


def test_a_new_runner_on_the_same_sqlite_file_finds_the_messages(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _setup(SqliteStore(tmp_path / "restart.db", "NORMAL"))
        s.runner.submit(Send(tuple(draft(f"r{i}".encode()) for i in range(3)), reply_to="send"))
        s.runner.submit(Receive("old-consumer", 1))
        await s.runner.drained()
        assert s.of(SendAccepted) == [SendAccepted("send", (1, 2, 3))]
        assert len(s.of(Delivered)) == 1  # message 1 is locked when the node goes away
        await _teardown(s)

        clock = FakeClock(START + 1)
        t = await _setup(SqliteStore(tmp_path / "restart.db", "NORMAL"), clock)
        try:
            t.runner.submit(Receive("new-consumer", 3))
            await t.runner.drained()
            got = [r.message for r in t.of(Delivered) if isinstance(r, Delivered)]
            assert [(m.sequence_number, m.tail[-2:], m.delivery_count) for m in got] == [(2, b"r1", 1), (3, b"r2", 1)]
            # message 1's lock from before the restart lapses (at START + LOCK); 2 and 3 stay locked
            clock.advance(LOCK - 1)
            await t.runner.drained()
            got = [r.message for r in t.of(Delivered) if isinstance(r, Delivered)]
            assert [(m.sequence_number, m.delivery_count) for m in got[2:]] == [(1, 2)]
            t.runner.submit(Send((draft(b"r3"),), reply_to="after"))
            await t.runner.drained()
            assert t.of(SendAccepted) == [SendAccepted("after", (4,))]  # numbers are never reused
        finally:
            await _teardown(t)
    asyncio.run(main())


def test_core_ops_are_bound_to_the_partition() -> None:
    token = uuid.uuid4()
    edit = AnnotationEdit(b"", 0, (("x-opt-custom", 5),), "Reason", "why", base_tail=b"tail")

    def encode(e: AnnotationEdit) -> tuple[bytes, int, bytes | None]:
        return b"enc:" + str(len(e.properties)).encode(), len(e.properties), (e.base_tail or b"") + b"+reason"

    settle = bind(SettleOp(10, (SettleItem(3, token, Outcome.DEAD_LETTER, edit),
                              SettleItem(4, token, Outcome.COMPLETE))), REF, encode)
    assert settle == SettleOp(10, (SettleItem(3, token, Outcome.DEAD_LETTER, annotations=b"enc:1", annotation_count=1,
                                            tail=b"tail+reason"),
                                 SettleItem(4, token, Outcome.COMPLETE)), ref=REF)
    assert isinstance(settle, SettleOp) and settle.dead_letter_target(settle.items[0]) == DLQ
    move = bind(MoveMessages(10, (MoveItem(5),), to_dead_letter=True), REF, encode)
    assert move == MoveMessages(10, (MoveItem(5),), to_dead_letter=True, ref=REF)
    assert isinstance(move, MoveMessages) and move.destination == DLQ
    moved = bind(MoveMessages(10, (MoveItem(6, edit),), to_dead_letter=True), REF, encode)
    assert moved == MoveMessages(10, (MoveItem(6, annotations=b"enc:1", annotation_count=1, tail=b"tail+reason"),),
                                 to_dead_letter=True, ref=REF)
    drop = bind(MoveMessages(10, (MoveItem(5),), to_dead_letter=False), REF, encode)
    assert drop == MoveMessages(10, (MoveItem(5),), ref=REF)
    assert isinstance(drop, MoveMessages) and drop.destination is None
    # a move into another queue (resubmit, move): the target named, the server's bytes and times kept
    item = MoveItem(8, annotations=b"a", annotation_count=1, tail=b"t", reset_delivery_count=True,
                    enqueued_time=20, expires_at=90)
    into = bind(MoveMessages(10, (item,), to_dead_letter=False, target=("orders", 2)), REF, encode)
    assert into == MoveMessages(10, (item,), target=("orders", 2), ref=REF)
    assert isinstance(into, MoveMessages) and into.destination == port.PartitionRef("orders", 2)
    with pytest.raises(ValueError):
        MoveMessages(10, (item,), to_dead_letter=True, target=("orders", 2))
    assert bind(Purge(10, 7), REF, encode) == Purge(10, 7, ref=REF)
    # a topic's copies: appended where the core names, gated by this partition's history
    claim = uuid.uuid4()
    copies = AppendTo(port.PartitionRef("sub", 1), (), Gate(claim, ()))
    assert bind(copies, REF, encode) == Append((), Gate(claim, (), ref=REF), ref=port.PartitionRef("sub", 1))
    with pytest.raises(TypeError):
        bind(AppendTo("sub", ()), REF, encode)


@STORES
def test_dead_letter_goes_to_the_dead_letter_partition_with_modified_properties(kind: str,
                                                                              tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"bad"), draft(b"good")), reply_to="send"))
        s.runner.submit(Receive("consumer", 1))
        await s.runner.drained()
        (d,) = s.of(Delivered)
        assert isinstance(d, Delivered) and d.lock_token is not None
        s.runner.submit(Settle(d.lock_token, Outcome.DEAD_LETTER, reply_to="dl",
                               properties_to_modify=(("x-opt-note", 5),), reason="Bad", description="bad body"))
        await s.runner.drained()
        assert s.of(SettlementDone) == [SettlementDone("dl", d.lock_token, Outcome.DEAD_LETTER)]
        assert [r.record.tail[-4:] for r in await s.rows()] == [b"good"]
        dead = await s.worker.call(lambda: s.store.inner.peek(DLQ, 0, 10))
        assert [(r.record.sequence_number, r.record.tail[-3:], r.record.annotation_count) for r in dead] == [
            (1, b"bad", 0)]
        # properties to modify are application properties, as Service Bus applies them
        assert wire.application_properties(dead[0].record.tail) == {
            "x-opt-note": 5, "DeadLetterReason": "Bad", "DeadLetterErrorDescription": "bad body"}
    run(kind, tmp_path, body)


# ---- dead-letter reasons: application properties of the stored tail (as v1's wire.dead_lettered writes them)


def rich_draft(body: bytes, ttl: int | None = None) -> MessageDraft:
    """A message with properties, application properties and a body, as a client sends it."""
    tail = b"".join((amqp_message.encode_section(amqp_message.PROPERTIES, ["id-" + body.decode()]),
                     amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, {"color": "red", "n": 7}),
                     amqp_message.encode_section(amqp_message.DATA, body)))
    return MessageDraft("id-" + body.decode(), None, None, ttl, None, None, None, b"", 0, tail)


async def _dead_letters(s: Setup) -> list[MessageRecord]:
    """The dead-letter partition's rows, checked whole: the message untouched but for its application
    properties, and the partition's byte count exact."""
    rows = [r.record for r in await s.worker.call(lambda: s.store.inner.peek(DLQ, 0, 100))]
    counts = await s.worker.call(lambda: s.store.inner.counts(DLQ))
    assert counts.size_in_bytes == sum(r.size for r in rows) and counts.active == len(rows)
    for record in rows:
        sections = amqp_message.split_sections(record.tail)
        assert [x.code for x in sections] == [amqp_message.PROPERTIES, amqp_message.APPLICATION_PROPERTIES,
                                              amqp_message.DATA]
        assert amqp_message.section_value(record.tail, sections[0]) == [record.message_id]
    return rows


def dead_letter_properties(record: MessageRecord) -> tuple[object, object]:
    props = wire.application_properties(record.tail)
    assert (props["color"], props["n"]) == ("red", 7)  # the client's own stay
    return props.get("DeadLetterReason"), props.get("DeadLetterErrorDescription")


@STORES
def test_a_client_dead_letter_keeps_reason_and_description_as_application_properties(
        kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((rich_draft(b"one"), rich_draft(b"two"), rich_draft(b"three")), reply_to="send"))
        s.runner.submit(Receive("consumer", 3))
        await s.runner.drained()
        one, two, three = (d for d in s.of(Delivered) if isinstance(d, Delivered))
        assert one.lock_token and two.lock_token and three.lock_token
        s.runner.submit(Settle(one.lock_token, Outcome.DEAD_LETTER, reply_to=1, reason="Bad", description="bad body"))
        s.runner.submit(Settle(two.lock_token, Outcome.DEAD_LETTER, reply_to=2, reason="OnlyAReason"))
        s.runner.submit(Settle(three.lock_token, Outcome.DEAD_LETTER, reply_to=3))
        await s.runner.drained()
        assert len(s.of(SettlementDone)) == 3
        first, second, third = await _dead_letters(s)
        assert dead_letter_properties(first) == ("Bad", "bad body")
        assert dead_letter_properties(second) == ("OnlyAReason", None)
        assert dead_letter_properties(third) == (None, None)
        assert third.tail == rich_draft(b"three").tail  # nothing to write: the tail as sent
        assert (await s.worker.call(lambda: s.store.inner.counts(REF))).size_in_bytes == 0
    run(kind, tmp_path, body)


@STORES
def test_an_expired_message_is_dead_lettered_with_ttl_expired(kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        settings = replace(SETTINGS, dead_letter_on_expiration=True)
        s = await _setup(_make_store(kind, tmp_path), settings=settings)
        try:
            s.runner.submit(Send((rich_draft(b"short", ttl=5_000), rich_draft(b"long")), reply_to="send"))
            await s.runner.drained()
            s.clock.advance(5_001)
            s.runner.submit(Receive("consumer", 2))  # a receive meets it if its timer did not
            await s.runner.drained()
            assert [d.message.message_id for d in s.of(Delivered) if isinstance(d, Delivered)] == ["id-long"]
            (dead,) = await _dead_letters(s)
            assert dead.message_id == "id-short"
            assert dead_letter_properties(dead) == ("TTLExpiredException", "the message expired")
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_the_last_allowed_delivery_dead_letters_with_max_delivery_count_exceeded(
        kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path), settings=replace(SETTINGS, max_delivery_count=1))
        try:
            s.runner.submit(Send((rich_draft(b"abandoned"), rich_draft(b"lapsed")), reply_to="send"))
            s.runner.submit(Receive("consumer", 2))
            await s.runner.drained()
            first, _ = (d for d in s.of(Delivered) if isinstance(d, Delivered))
            assert first.lock_token is not None
            # an abandon ends the last delivery (a Settle DEAD_LETTER); properties to modify are kept
            s.runner.submit(Settle(first.lock_token, Outcome.ABANDON, reply_to="abandon",
                                   properties_to_modify=(("x-opt-note", 5),)))
            await s.runner.drained()
            s.clock.advance(LOCK)  # the other lock lapses (a MoveMessages to the dead-letter queue)
            await s.runner.drained()
            abandoned, lapsed = await _dead_letters(s)
            assert (abandoned.message_id, lapsed.message_id) == ("id-abandoned", "id-lapsed")
            assert dead_letter_properties(abandoned) == ("MaxDeliveryCountExceeded", "delivered 1 times")
            assert wire.application_properties(abandoned.tail)["x-opt-note"] == 5
            assert dead_letter_properties(lapsed)[0] == "MaxDeliveryCountExceeded"
            assert await s.rows() == ()
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_an_abandon_that_finds_the_message_expired_dead_letters_it_with_its_properties_to_modify(
        kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        settings = replace(SETTINGS, dead_letter_on_expiration=True)
        s = await _setup(_make_store(kind, tmp_path), settings=settings)
        try:
            s.runner.submit(Send((rich_draft(b"late", ttl=1_000),), reply_to="send"))
            s.runner.submit(Receive("consumer", 1))
            await s.runner.drained()
            (d,) = (d for d in s.of(Delivered) if isinstance(d, Delivered))
            assert d.lock_token is not None
            s.clock.advance(2_000)  # expired under its lock: it stays until the lock ends
            s.runner.submit(Settle(d.lock_token, Outcome.ABANDON, reply_to="abandon",
                                   properties_to_modify=(("x-opt-note", "kept"),)))
            await s.runner.drained()
            (dead,) = await _dead_letters(s)
            assert dead_letter_properties(dead) == ("TTLExpiredException", "the message expired")
            assert wire.application_properties(dead.tail)["x-opt-note"] == "kept"
        finally:
            await _teardown(s)
    asyncio.run(main())


def test_an_edit_with_properties_and_no_tail_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_edit(AnnotationEdit(b"", 0, dead_letter_reason="lost"))
    with pytest.raises(ValueError):
        encode_edit(AnnotationEdit(b"", 0, (("k", 1),)))
    tail = rich_draft(b"x").tail
    assert encode_edit(AnnotationEdit(b"", 0, (("k", 1),), base_tail=tail)) == (
        b"", 0, wire.with_application_properties(tail, {"k": 1}))
    assert encode_edit(AnnotationEdit(b"", 0, base_tail=tail)) == (b"", 0, None)
    assert encode_edit(AnnotationEdit(b"", 0, dead_letter_description="why", base_tail=tail)) == (
        b"", 0, wire.dead_letter_tail(tail, None, "why"))


@STORES
def test_a_session_receiver_gets_only_its_sessions_messages_and_its_state_is_stored(kind: str,
                                                                                   tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        settings = CoreSettings(lock_duration=LOCK, owner="test-node", requires_session=True)
        s = await _setup(_make_store(kind, tmp_path), settings=settings)
        try:
            s.runner.submit(Send((draft(b"a1", session="a"), draft(b"b1", session="b"), draft(b"a2", session="a")),
                                 reply_to="send"))
            await s.runner.drained()
            s.runner.submit(Receive("consumer", 5))  # the receiver attaches with credit, then asks for a session
            s.runner.submit(AcceptSession("consumer", None, reply_to="accept"))
            await s.runner.drained()
            (accepted,) = s.of(SessionAccepted)
            assert isinstance(accepted, SessionAccepted) and accepted.session_id == "a"
            s.runner.submit(SetSessionState("a", b"state-a", reply_to="state"))
            await s.runner.drained()
            got = [r for r in s.of(Delivered) if isinstance(r, Delivered)]
            assert [(m.message.sequence_number, m.message.session_id) for m in got] == [(1, "a"), (3, "a")]
            assert s.of(SessionStateSet) == [SessionStateSet("state", "a")]
            for i, d in enumerate(got):
                assert d.lock_token is not None
                s.runner.submit(Settle(d.lock_token, Outcome.COMPLETE, reply_to=i))
            await s.runner.drained()
            assert len(s.of(SettlementDone)) == 2
            assert [(r.record.sequence_number, r.record.session_id) for r in await s.rows()] == [(2, "b")]
            meta = await s.worker.call(lambda: s.store.inner.partition_meta(REF))
            assert [(sid, state) for sid, state, _ in meta.session_states] == [("a", b"state-a")]
        finally:
            await _teardown(s)
    asyncio.run(main())


async def _defer_all(s: Setup, consumer: str = "consumer") -> list[int]:
    """Receive every delivered-to-be message and defer it; their numbers."""
    s.runner.submit(Receive(consumer, 100))
    await s.runner.drained()
    got = [r for r in s.of(Delivered) if isinstance(r, Delivered)]
    for d in got:
        assert d.lock_token is not None
        s.runner.submit(Settle(d.lock_token, Outcome.DEFER, reply_to=("defer", d.message.sequence_number)))
    await s.runner.drained()
    return [d.message.sequence_number for d in got]


async def _view_counts_are_the_stores(s: Setup) -> tuple[int, int, int]:
    stored = await s.worker.call(lambda: s.store.inner.counts(REF))
    c = s.runner._view.counts  # the view's cached counters must be the store's
    assert (c.active, c.scheduled, c.deferred) == (stored.active, stored.scheduled, stored.deferred)
    return stored.active, stored.scheduled, stored.deferred


@STORES
def test_deferred_messages_are_received_by_number_locked_then_deleted(kind: str, tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"d1"), draft(b"d2"), draft(b"d3")), reply_to="send"))
        await s.runner.drained()
        assert await _defer_all(s) == [1, 2, 3]
        s.runner.submit(CloseConsumer("consumer"))
        assert await _view_counts_are_the_stores(s) == (0, 0, 3)
        # PeekLock: the locks are in the store when the answer comes
        s.runner.submit(ReceiveDeferred((3, 1), reply_to="peek-lock", consumer="mgmt"))
        assert s.of(DeferredReceived) == []
        await s.runner.drained()
        (got,) = s.of(DeferredReceived)
        assert isinstance(got, DeferredReceived)
        assert [(m.message.sequence_number, m.message.tail[-2:]) for m in got.messages] == [(3, b"d3"), (1, b"d1")]
        rows = {r.record.sequence_number: r for r in await s.rows()}
        for m in got.messages:
            assert m.lock_token is not None and rows[m.message.sequence_number].lock_token == m.lock_token
            s.runner.submit(Settle(m.lock_token, Outcome.COMPLETE, reply_to=("done", m.message.sequence_number)))
        await s.runner.drained()
        assert len([r for r in s.of(SettlementDone) if isinstance(r, SettlementDone)
                    and r.reply_to[0] == "done"]) == 2
        assert await _view_counts_are_the_stores(s) == (0, 0, 1)
        # a number not deferred (gone) fails the request: the other one stays deferred, unlocked
        s.runner.submit(ReceiveDeferred((2, 3), reply_to="missing", mode=ReceiveMode.RECEIVE_AND_DELETE))
        await s.runner.drained()
        assert s.of(MessageNotFound) == [MessageNotFound("missing", (3,))]
        (row,) = await s.rows()
        assert (row.record.sequence_number, row.record.state, row.lock_token) == (2, MessageState.DEFERRED, None)
        assert row.record.delivery_count == 0  # the deferral and the claim's delivery was given back
        # ReceiveAndDelete: answered once the delete committed
        s.runner.submit(ReceiveDeferred((2,), reply_to="take", mode=ReceiveMode.RECEIVE_AND_DELETE))
        await s.runner.drained()
        taken = [r for r in s.of(DeferredReceived) if isinstance(r, DeferredReceived) and r.reply_to == "take"]
        assert [(m.message.sequence_number, m.lock_token) for m in taken[0].messages] == [(2, None)]
        assert await s.rows() == ()
        assert await _view_counts_are_the_stores(s) == (0, 0, 0)
    run(kind, tmp_path, body)


@STORES
def test_complete_through_purges_up_to_n_except_locked_and_the_counts_follow(kind: str,
                                                                             tmp_path: pathlib.Path) -> None:
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"deferred"),), reply_to="send"))
        await s.runner.drained()
        await _defer_all(s, "first")  # 1 deferred
        s.runner.submit(CloseConsumer("first"))
        later = replace(draft(b"later"), scheduled_enqueue_time=START + 600_000)
        s.runner.submit(Schedule((later,), reply_to="schedule"))  # 2 scheduled
        s.runner.submit(Send(tuple(draft(f"a{i}".encode()) for i in range(4)), reply_to="send"))  # 3..6 active
        await s.runner.drained()
        s.runner.submit(Receive("consumer", 1))  # 3 locked
        await s.runner.drained()
        (locked,) = [r for r in s.of(Delivered) if isinstance(r, Delivered) and r.message.sequence_number == 3]
        assert await _view_counts_are_the_stores(s) == (4, 1, 1)
        s.runner.submit(CompleteThrough(5, reply_to="ct"))
        assert s.of(CompletedThrough) == []
        await s.runner.drained()
        assert s.of(CompletedThrough) == [CompletedThrough("ct", 4)]  # 1, 2, 4, 5
        assert [r.record.sequence_number for r in await s.rows()] == [3, 6]
        assert await _view_counts_are_the_stores(s) == (2, 0, 0)
        # the locked one stays its holder's; the next receive gets 6, not a purged one
        s.runner.submit(Receive("consumer", 5))
        await s.runner.drained()
        later_deliveries = [r.message.sequence_number for r in s.of(Delivered) if isinstance(r, Delivered)]
        assert later_deliveries[-1] == 6 and 4 not in later_deliveries and 5 not in later_deliveries
        assert locked.lock_token is not None
        s.runner.submit(Settle(locked.lock_token, Outcome.COMPLETE, reply_to="c3"))
        await s.runner.drained()
        assert [r.record.sequence_number for r in await s.rows()] == [6]
        s.runner.submit(CompleteThrough(5, reply_to="again"))
        await s.runner.drained()
        assert s.of(CompletedThrough)[-1] == CompletedThrough("again", 0)
        assert await _view_counts_are_the_stores(s) == (1, 0, 0)
    run(kind, tmp_path, body)


@STORES
def test_move_out_into_another_queue_is_one_transaction_and_reports_only_the_rows_taken(
        kind: str, tmp_path: pathlib.Path) -> None:
    """A resubmit or move through the runner, against the real store: the rows leave this partition
    and arrive in the target in ONE transaction, locked rows stay, the reply comes after the commit,
    the counts follow the store, and ``on_moved`` hears only the rows the store moved."""
    target = port.PartitionRef("runner-target", 0)

    async def body(s: Setup) -> None:
        heard: list[tuple[port.PartitionRef, int]] = []
        s.runner.on_moved = lambda ref, count: heard.append((ref, count))
        s.runner.submit(Send(tuple(draft(f"m{i}".encode()) for i in range(3)), reply_to="send"))
        await s.runner.drained()
        s.runner.submit(Receive("consumer", 1))  # 1 locked
        await s.runner.drained()
        applies = s.store.apply_calls
        items = (MoveItem(1), MoveItem(2, reset_delivery_count=True, enqueued_time=START, expires_at=START + 9),
                 MoveItem(3))
        s.runner.submit(MoveOut(items, reply_to="mv", target=(target.entity, target.partition)))
        assert s.of(MovedOut) == []  # nothing before the commit
        await s.runner.drained()
        assert s.of(MovedOut) == [MovedOut("mv", (None, 1, 2))]
        assert s.store.apply_calls == applies + 1  # delete and append: one transaction
        assert heard == [(target, 2)]
        assert [r.record.sequence_number for r in await s.rows()] == [1]
        moved = await s.worker.call(lambda: s.store.inner.peek(target, 0, 10))
        assert [(m.record.enqueued_time, m.record.expires_at) for m in moved] == [(START, START + 9),
                                                                                  (START, None)]
        assert await _view_counts_are_the_stores(s) == (1, 0, 0)
        s.runner.submit(MoveOut((MoveItem(1),), reply_to="purge"))  # locked here: not even asked
        assert s.of(MovedOut)[-1] == MovedOut("purge", (None,))
    run(kind, tmp_path, body)


# ---- group commit across the partitions of one store ----------------------------------------------------


@STORES
def test_sends_to_several_partitions_of_one_store_share_one_transaction(kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path))
        other: list[Reply] = []
        second = await PartitionRunner.start(port.PartitionRef("runnerq", 1), SETTINGS, s.worker, s.clock,
                                             other.append, token_seed=9)
        try:
            await second.drained()
            before = s.store.apply_calls
            for i in range(10):  # one loop turn: both partitions' batches queue before the worker runs
                s.runner.submit(Send((draft(f"a{i}".encode()),), reply_to=i))
                second.submit(Send((draft(f"b{i}".encode()),), reply_to=i))
            await s.runner.drained()
            await second.drained()
            assert s.store.apply_calls - before == 1
            assert s.of(SendAccepted) == [SendAccepted(i, (i + 1,)) for i in range(10)]
            assert [r for r in other if isinstance(r, SendAccepted)] == [
                SendAccepted(i, ((1 << 48) + i + 1,)) for i in range(10)]
            rows = await s.worker.call(lambda: s.store.inner.peek(port.PartitionRef("runnerq", 1), 0, 100))
            assert [r.record.tail[-2:] for r in rows] == [f"b{i}".encode() for i in range(10)]
        finally:
            await second.close()
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_a_failed_transaction_of_several_partitions_busies_each_and_the_next_one_commits(
        kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path))
        other: list[Reply] = []
        second = await PartitionRunner.start(port.PartitionRef("runnerq", 1), SETTINGS, s.worker, s.clock,
                                             other.append, token_seed=9)
        try:
            await second.drained()
            s.store.fail_next = True
            s.runner.submit(Send((draft(b"lost-a"),), reply_to="a"))
            second.submit(Send((draft(b"lost-b"),), reply_to="b"))
            await s.runner.drained()
            await second.drained()
            assert s.of(ServerBusy) == [ServerBusy("a")]
            assert [r for r in other if isinstance(r, ServerBusy)] == [ServerBusy("b")]
            assert await s.rows() == ()
            second.submit(Send((draft(b"again"),), reply_to="c"))
            await second.drained()
            assert [r for r in other if isinstance(r, SendAccepted)] == [SendAccepted("c", ((1 << 48) + 1,))]
        finally:
            await second.close()
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_a_transaction_whose_lock_another_node_claimed_stores_nothing_and_other_batches_commit(
        kind: str, tmp_path: pathlib.Path) -> None:
    """A ``Transact`` decided while its lock held (by this node's clock) whose message another node
    claimed first: the store's all-or-none settlement rolls back the transaction's batch alone (it
    is never merged), the transaction is answered LockLost, and another partition's send queued in
    the same loop turn commits."""
    async def main() -> None:
        s = await _setup(_make_store(kind, tmp_path))
        other: list[Reply] = []
        target = port.PartitionRef("runnerq", 1)
        second = await PartitionRunner.start(target, SETTINGS, s.worker, s.clock, other.append, token_seed=9)
        try:
            await second.drained()
            s.runner.submit(Send((draft(b"held"),), reply_to="send"))
            await s.runner.drained()
            s.runner.submit(Receive("consumer", 1))
            await s.runner.drained()
            (d,) = s.of(Delivered)
            assert isinstance(d, Delivered) and d.lock_token is not None
            s.clock.advance(LOCK - 10)  # this node: the lock still holds
            # Node B, whose clock runs ahead, found it lapsed and claimed it.
            b_token = uuid.UUID(int=999)
            await s.worker.call(lambda: s.store.inner.apply(
                [port.Claim(START + LOCK + 1, START + 3 * LOCK, "node-b", (b_token,), ref=REF)]))
            copy = record_for(draft(b"never"), s.clock.now(), None)
            s.runner.submit(Transact((Settle(d.lock_token, Outcome.COMPLETE),),
                                     (PublishEntry(None, (PublishCopy(target, copy),)),), "txn"))
            second.submit(Send((draft(b"kept"),), reply_to="kept"))
            await s.runner.drained()
            await second.drained()
            assert s.of(LockLost) == [LockLost("txn", d.lock_token)]
            assert not s.of(Published) and not s.of(ServerBusy)
            assert [r for r in other if isinstance(r, SendAccepted)] == [SendAccepted("kept", ((1 << 48) + 1,))]
            rows = await s.worker.call(lambda: s.store.inner.peek(target, 0, 100))
            assert [r.record.tail[-4:] for r in rows] == [b"kept"]  # not the transaction's copy
            (row,) = await s.rows()
            assert (row.lock_token, row.lock_owner) == (b_token, "node-b")  # not completed
        finally:
            await second.close()
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_the_size_never_reads_low_while_the_store_is_counting(kind: str, tmp_path: pathlib.Path) -> None:
    """Runtime information and quotas read ``size_in_bytes`` at any time: while the store counts again
    after a commit, the bytes that commit appended are still counted (a topic's SizeInBytes read at
    once after a schedule was 0 under load)."""
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"x" * 100),), reply_to="send"))
        await s.runner.drained()
        seen = [s.runner.size_in_bytes]
        for _ in range(1000):
            if s.runner._size_task is None and s.runner._size_timer is None:
                break
            await asyncio.sleep(0.001)
            seen.append(s.runner.size_in_bytes)
        final = s.runner.size_in_bytes
        assert final > 100
        assert min(seen) == final, seen
    run(kind, tmp_path, body)


@STORES
def test_the_size_is_read_again_after_a_read_that_failed(kind: str, tmp_path: pathlib.Path) -> None:
    """The fault checker's seed 127: a partitioned queue's SizeInBytes above the store at a quiescent
    point, after the store went offline. A message completed, the byte count read after the commit
    failed (the store offline), and nothing committed after: the size kept the bytes of the message gone
    until the next change. A failed read is now tried again."""
    async def body(s: Setup) -> None:
        s.runner.submit(Send((draft(b"x" * 100),), reply_to="send"))
        await s.runner.drained()
        s.runner.submit(Receive("consumer", 1))
        await s.runner.drained()
        (d,) = s.of(Delivered)
        assert isinstance(d, Delivered) and d.lock_token is not None
        for _ in range(1000):  # the reads after the send and the receive are done
            if s.runner._size_task is None and s.runner._size_timer is None:
                break
            await asyncio.sleep(0.001)
        assert s.runner.size_in_bytes > 100
        s.store.fail_counts = True
        s.runner.submit(Settle(d.lock_token, Outcome.COMPLETE, reply_to="done"))
        await s.runner.drained()
        await asyncio.sleep(0.5)  # the read after the complete failed
        s.store.fail_counts = False
        for _ in range(300):  # nothing commits any more: only a read tried again brings the size down
            if s.runner.size_in_bytes == 0:
                break
            await asyncio.sleep(0.01)
        assert s.runner.size_in_bytes == 0
    run(kind, tmp_path, body)


# ---- the commit window (partition_runner module docstring) ----------------------------------------------------


async def _windowed(kind: str, tmp_path: pathlib.Path, window: float) -> Setup:
    store = CountingStore(_make_store(kind, tmp_path))
    worker = StoreWorker(store, "runner-test")
    await worker.open()
    replies: list[Reply] = []
    clock = FakeClock()
    runner = await PartitionRunner.start(REF, SETTINGS, worker, clock, replies.append, token_seed=7,
                                         commit_window=window)
    await runner.drained()
    return Setup(store, worker, runner, clock, replies)


async def _a_round_of_four(s: Setup, tag: str) -> None:
    """Four callers in one turn: one transaction, and the next round is expected to be four."""
    before = s.store.apply_calls
    for i in range(4):
        s.runner.submit(Send((draft(f"{tag}{i}".encode()),), reply_to=f"{tag}{i}"))
    await s.runner.drained()
    assert s.store.apply_calls - before == 1


@STORES
def test_a_round_of_callers_arriving_apart_shares_one_transaction(kind: str, tmp_path: pathlib.Path) -> None:
    """Without the window the first two would leave alone the moment they could, and the other two
    in a second transaction (the sync SDK's receivers fall into step in halves like this)."""
    async def main() -> None:
        s = await _windowed(kind, tmp_path, 5.0)  # a window far longer than the test: only the round ends it
        try:
            await _a_round_of_four(s, "a")
            before = s.store.apply_calls
            s.runner.submit(Send((draft(b"b0"),), reply_to="b0"))
            s.runner.submit(Send((draft(b"b1"),), reply_to="b1"))
            for _ in range(3):
                await asyncio.sleep(0)  # a few loop turns later, the rest of the round
            assert s.store.apply_calls == before  # the first two are waiting for them
            assert [r for r in s.of(SendAccepted) if r.reply_to in ("b0", "b1")] == []  # and are not answered
            s.runner.submit(Send((draft(b"b2"),), reply_to="b2"))
            s.runner.submit(Send((draft(b"b3"),), reply_to="b3"))
            await s.runner.drained()
            assert s.store.apply_calls - before == 1
            assert [r.reply_to for r in s.of(SendAccepted)][-4:] == ["b0", "b1", "b2", "b3"]
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_a_round_not_filled_leaves_when_the_window_closes(kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _windowed(kind, tmp_path, 0.2)
        try:
            await _a_round_of_four(s, "a")
            before = s.store.apply_calls
            started = asyncio.get_running_loop().time()
            s.runner.submit(Send((draft(b"alone"),), reply_to="alone"))
            await s.runner.drained()
            waited = asyncio.get_running_loop().time() - started
            assert s.store.apply_calls - before == 1
            assert s.of(SendAccepted)[-1] == SendAccepted("alone", (5,))
            assert waited >= 0.19  # it waited for the window ...
            # ... and the round is now one: the next lone caller does not wait.
            started = asyncio.get_running_loop().time()
            s.runner.submit(Send((draft(b"next"),), reply_to="next"))
            await s.runner.drained()
            assert asyncio.get_running_loop().time() - started < 0.19
            assert s.of(SendAccepted)[-1] == SendAccepted("next", (6,))
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_a_lone_caller_never_waits_for_the_window(kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _windowed(kind, tmp_path, 5.0)
        try:
            started = asyncio.get_running_loop().time()
            for i in range(3):  # one at a time, each waiting for its answer (a single sync sender)
                s.runner.submit(Send((draft(f"m{i}".encode()),), reply_to=i))
                await s.runner.drained()
            assert asyncio.get_running_loop().time() - started < 5.0
            assert s.of(SendAccepted) == [SendAccepted(i, (i + 1,)) for i in range(3)]
        finally:
            await _teardown(s)
    asyncio.run(main())


@STORES
def test_a_failed_windowed_transaction_fails_exactly_the_batches_it_held(kind: str, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        s = await _windowed(kind, tmp_path, 5.0)
        try:
            await _a_round_of_four(s, "a")
            s.store.fail_next = True
            s.runner.submit(Send((draft(b"b0"),), reply_to="b0"))
            s.runner.submit(Send((draft(b"b1"),), reply_to="b1"))
            await asyncio.sleep(0)
            s.runner.submit(Send((draft(b"b2"),), reply_to="b2"))
            s.runner.submit(Send((draft(b"b3"),), reply_to="b3"))
            s.runner.submit(Send((draft(b"c0"),), reply_to="c0"))  # one more than the round: in it too
            await s.runner.drained()
            assert s.of(ServerBusy) == [ServerBusy(r) for r in ("b0", "b1", "b2", "b3", "c0")]
            before = s.store.apply_calls
            s.runner.submit(Send((draft(b"d0"),), reply_to="d0"))
            started = asyncio.get_running_loop().time()
            await s.runner.drained()  # after a failure the round starts again at one: no wait
            assert asyncio.get_running_loop().time() - started < 5.0
            assert s.store.apply_calls - before == 1
            assert s.of(SendAccepted)[-1] == SendAccepted("d0", (5,))
            assert [r.record.tail[-2:] for r in await s.rows()][-1] == b"d0"
        finally:
            await _teardown(s)
    asyncio.run(main())
