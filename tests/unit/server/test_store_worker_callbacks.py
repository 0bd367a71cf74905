"""The store worker's callback hand-off (server/store_worker.py: ``commit_soon``, ``call_soon``):
outcomes come back on the event loop, never inside the call that queued them; what queues in one
turn, or while a transaction is in flight, leaves together; a failed transaction fails every batch
of its group and the next one commits. Against a real SQLite file, with the real asyncio loop."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Awaitable, Callable, Sequence

import pytest

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.server.store_worker import Committed, StoreWorker
from sodalite.store.port import Append, Appended, OpResult, PartitionRef, StoreOp
from sodalite.store.sqlite import SqliteStore

A, B = PartitionRef("a"), PartitionRef("b")
NOW = int(time.time() * 1000)


def _message(body: bytes = b"x") -> MessageRecord:
    return MessageRecord(
        sequence_number=0, enqueued_time=NOW, message_id="m", session_id=None, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=None, delivery_count=0,
        state=MessageState.ACTIVE, durable=True, priority=None, annotations=b"", annotation_count=0,
        tail=b"\x00Sw\xa0\x01" + body[:1])


class _Failing(SqliteStore):
    """The real SQLite store; ``fail_next`` makes the next transaction raise (nothing applied)."""

    fail_next = False
    applies = 0

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        self.applies += 1
        if self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("injected: the transaction failed")
        return super().apply(batch)


Outcome = tuple[tuple[OpResult, ...] | None, BaseException | None]


def _run(tmp_path: pathlib.Path, body: Callable[[_Failing, StoreWorker], Awaitable[None]]) -> None:
    async def main() -> None:
        store = _Failing(tmp_path / "w.db")
        worker = StoreWorker(store, "default")
        await worker.open()
        try:
            await body(store, worker)
        finally:
            await worker.close()

    asyncio.run(main())


def _collector(outcomes: list[Outcome], name: str, order: list[str]) -> Committed:
    def done(results: tuple[OpResult, ...] | None, error: BaseException | None) -> None:
        order.append(name)
        outcomes.append((results, error))
    return done


async def _settled(outcomes: list[Outcome], count: int) -> None:
    async with asyncio.timeout(30):
        while len(outcomes) < count:
            await asyncio.sleep(0.001)


def test_batches_queued_in_one_turn_share_one_transaction_and_hear_after_the_call(tmp_path: pathlib.Path) -> None:
    async def body(store: _Failing, worker: StoreWorker) -> None:
        outcomes: list[Outcome] = []
        order: list[str] = []
        before = worker.transactions
        worker.commit_soon([Append((_message(), _message()), ref=A)], _collector(outcomes, "a", order))
        worker.commit_soon([Append((_message(),), ref=B)], _collector(outcomes, "b", order))
        order.append("queued")
        assert outcomes == []  # never inside the call
        await _settled(outcomes, 2)
        assert order == ["queued", "a", "b"]
        assert worker.transactions - before == 1 and store.applies == 1
        assert outcomes == [((Appended((1, 2)),), None), ((Appended((1,)),), None)]
        assert [c.active for c in await worker.call(lambda: store.counts_many([A, B]))] == [2, 1]

    _run(tmp_path, body)


def test_batches_queued_while_one_is_in_flight_leave_together_next(tmp_path: pathlib.Path) -> None:
    async def body(store: _Failing, worker: StoreWorker) -> None:
        outcomes: list[Outcome] = []
        order: list[str] = []
        worker.commit_soon([Append((_message(),), ref=A)], _collector(outcomes, "first", order))
        await asyncio.sleep(0)  # the first group is on the store's thread now
        for i in range(5):
            worker.commit_soon([Append((_message(),), ref=A)], _collector(outcomes, f"n{i}", order))
        await _settled(outcomes, 6)
        assert order == ["first", "n0", "n1", "n2", "n3", "n4"]
        assert [r for r, _ in outcomes] == [(Appended((n,)),) for n in range(1, 7)]
        assert store.applies == 2  # 6 batches, 2 transactions: the first alone, the rest merged

    _run(tmp_path, body)


def test_a_failed_transaction_fails_each_batch_of_its_group_and_the_next_commits(tmp_path: pathlib.Path) -> None:
    async def body(store: _Failing, worker: StoreWorker) -> None:
        outcomes: list[Outcome] = []
        order: list[str] = []
        store.fail_next = True
        worker.commit_soon([Append((_message(),), ref=A)], _collector(outcomes, "a", order))
        worker.commit_soon([Append((_message(),), ref=B)], _collector(outcomes, "b", order))
        await _settled(outcomes, 2)
        assert all(r is None and isinstance(e, StoreUnavailable) for r, e in outcomes)
        assert not worker.reachable
        assert await worker.commit([Append((_message(),), ref=A)]) == (Appended((1,)),)  # nothing of the failed one
        assert worker.reachable

    _run(tmp_path, body)


def test_offline_commits_and_reads_fail_after_the_call(tmp_path: pathlib.Path) -> None:
    async def body(store: _Failing, worker: StoreWorker) -> None:
        outcomes: list[Outcome] = []
        order: list[str] = []
        worker.offline = True
        worker.commit_soon([Append((_message(),), ref=A)], _collector(outcomes, "a", order))
        read: list[tuple[object, BaseException | None]] = []
        worker.call_soon(lambda: store.counts(A), lambda value, error: read.append((value, error)))
        assert outcomes == [] and read == []
        await _settled(outcomes, 1)
        await asyncio.sleep(0)
        assert isinstance(outcomes[0][1], StoreUnavailable) and isinstance(read[0][1], StoreUnavailable)
        assert store.applies == 0
        worker.offline = False
        with pytest.raises(StoreUnavailable, match="injected"):
            store.fail_next = True
            await worker.commit([Append((_message(),), ref=A)])

    _run(tmp_path, body)


def test_call_soon_answers_a_read_or_its_error_on_the_loop(tmp_path: pathlib.Path) -> None:
    async def body(store: _Failing, worker: StoreWorker) -> None:
        await worker.commit([Append((_message(), _message()), ref=A)])
        answers: list[tuple[object, BaseException | None]] = []
        worker.call_soon(lambda: store.counts(A).active, lambda value, error: answers.append((value, error)))

        def broken() -> int:
            raise ValueError("a read that raises")

        worker.call_soon(broken, lambda value, error: answers.append((value, error)))
        assert answers == []
        async with asyncio.timeout(30):
            while len(answers) < 2:
                await asyncio.sleep(0.001)
        assert answers[0] == (2, None)
        assert answers[1][0] is None and isinstance(answers[1][1], ValueError)

    _run(tmp_path, body)
