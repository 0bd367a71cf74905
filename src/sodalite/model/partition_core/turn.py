"""One call of ``decide``: what it collects (:class:`Turn`), and the :class:`Continuation` each store
operation leaves behind to read its result or its failure."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sodalite.model.message import MessageRecord
from sodalite.model.partition_core.replies import Reply, ServerBusy
from sodalite.model.partition_core.settings import ReplyTo
from sodalite.model.partition_core.view import View
from sodalite.model.store_ops import MoveItem, OpResult, Outcome, SettleItem, StoreOp


class Continuation:
    """What a batch keeps of one of its operations. The store answers the batch with one result per
    operation (:meth:`done`) or with a failure of all of them (:meth:`failed`: nothing happened)."""

    __slots__ = ()

    def done(self, turn: Turn, result: OpResult, batch_id: int) -> None:
        """The operation committed with ``result`` (the default: nothing to learn from it)."""

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        """The batch failed; ``answered`` is a request already answered otherwise (a fenced transaction)."""


class Turn:
    """What one call of decide collects: the operations of its batch, each with its continuation,
    and its replies. Settlements, renewals and dead-letter moves are gathered and become one
    operation each when the batch is made (``decide.finish``)."""

    __slots__ = (
        "claims",
        "ctxs",
        "dead_letter_moves",
        "drop_moves",
        "now",
        "ops",
        "renews",
        "replies",
        "settles",
        "tail_ctxs",
        "tail_ops",
        "update",
        "view",
    )

    def __init__(self, view: View, now: int) -> None:
        self.view, self.now = view, now
        self.ops: list[StoreOp] = []
        self.ctxs: list[Continuation] = []
        self.replies: list[Reply] = []
        self.settles: list[tuple[SettleItem, tuple[ReplyTo, uuid.UUID, Outcome, Outcome]]] = []
        self.renews: list[tuple[tuple[int, uuid.UUID], tuple[ReplyTo, uuid.UUID, int]]] = []
        self.dead_letter_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.drop_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.claims: list[tuple[StoreOp, Continuation]] = []
        self.tail_ops: list[StoreOp] = []
        self.tail_ctxs: list[Continuation] = []
        self.update: tuple[ReplyTo, tuple[uuid.UUID, ...]] | None = None  # an UpdateSettings to answer

    def op(self, op: StoreOp, ctx: Continuation) -> None:
        """An operation of this turn's batch, in order."""
        self.ops.append(op)
        self.ctxs.append(ctx)

    def tail(self, op: StoreOp, ctx: Continuation) -> None:
        """An operation that goes after the claims, settlements, renewals and moves of this turn."""
        self.tail_ops.append(op)
        self.tail_ctxs.append(ctx)


@dataclass(frozen=True, slots=True)
class AnswerCtx(Continuation):
    """The continuation of a request's operation: it answers ``reply_to``; a failed batch answers
    :class:`ServerBusy` (nothing of the request happened)."""

    reply_to: ReplyTo

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        turn.replies.append(ServerBusy(self.reply_to))


def store_down(turn: Turn, reply_to: ReplyTo) -> bool:
    """True when the store is unavailable; the request is then answered :class:`ServerBusy` (nothing
    of it happens). The per-message paths (send, publish, settle) test ``view.available`` inline."""
    if turn.view.available:
        return False
    turn.replies.append(ServerBusy(reply_to))
    return True


class Quiet(Continuation):
    """An operation whose result needs nothing (a ReceiveAndDelete claim: its settle reads it; a
    release, a history prune)."""

    __slots__ = ()


QUIET = Quiet()
