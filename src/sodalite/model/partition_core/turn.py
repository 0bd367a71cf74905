"""One call of ``decide``: what it collects (:class:`Turn`), and the :class:`Continuation` each store
operation leaves behind to read its result or its failure."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, get_args

from sodalite.model.message import MessageRecord
from sodalite.model.partition_core.replies import Reply, ServerBusy
from sodalite.model.partition_core.settings import ReplyTo
from sodalite.model.partition_core.view import View
from sodalite.model.store_ops import MoveItem, Outcome, SettleItem, StoreOp

R = TypeVar("R")


class Continuation(Generic[R]):
    """What a batch keeps of one of its operations. The store answers the batch with one result per
    operation (:meth:`done`) or with a failure of all of them (:meth:`failed`: nothing happened).

    The class line names the result it reads: ``ClaimCtx(Continuation[Claimed])`` (``object``: any);
    ``decide.on_results`` calls :meth:`done` only with a result of that type (``reads``, which a
    class may also set in its body)."""

    __slots__ = ()
    reads: ClassVar[type | tuple[type, ...]] = ()  # () reads nothing: done is never called

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if "reads" in cls.__dict__:  # said in the class body
            return
        for base in cls.__dict__.get("__orig_bases__", ()):
            args = get_args(base)
            if args and not isinstance(args[0], TypeVar):
                kinds = get_args(args[0]) or (args[0],)  # a union names each of its types
                cls.reads = kinds[0] if len(kinds) == 1 else kinds

    def done(self, turn: Turn, result: R, batch_id: int) -> None:
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
        self.ctxs: list[Continuation[Any]] = []
        self.replies: list[Reply] = []
        self.settles: list[tuple[SettleItem, tuple[ReplyTo, uuid.UUID, Outcome, Outcome]]] = []
        self.renews: list[tuple[tuple[int, uuid.UUID], tuple[ReplyTo, uuid.UUID, int]]] = []
        self.dead_letter_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.drop_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.claims: list[tuple[StoreOp, Continuation[Any]]] = []
        self.tail_ops: list[StoreOp] = []
        self.tail_ctxs: list[Continuation[Any]] = []
        self.update: tuple[ReplyTo, tuple[uuid.UUID, ...]] | None = None  # an UpdateSettings to answer

    def op(self, op: StoreOp, ctx: Continuation[Any]) -> None:
        """An operation of this turn's batch, in order."""
        self.ops.append(op)
        self.ctxs.append(ctx)

    def tail(self, op: StoreOp, ctx: Continuation[Any]) -> None:
        """An operation that goes after the claims, settlements, renewals and moves of this turn."""
        self.tail_ops.append(op)
        self.tail_ctxs.append(ctx)


@dataclass(frozen=True, slots=True)
class AnswerCtx(Continuation[R]):
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


class Quiet(Continuation[object]):
    """An operation whose result needs nothing (a release, a history prune)."""

    __slots__ = ()
    reads = ()  # its result needs nothing: done is not even called


QUIET = Quiet()
