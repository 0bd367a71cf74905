"""Receivers: the credit each consumer gave (attach, more credit, detach). Delivering against it is
the window's (queues) or the sessions sub-machine's (session entities)."""

from __future__ import annotations

from sodalite.model.partition_core.commands import CloseConsumer, Receive
from sodalite.model.partition_core.sessions import on_renew_session, release_session
from sodalite.model.partition_core.settings import NO_REPLY
from sodalite.model.partition_core.turn import Turn
from sodalite.model.partition_core.view import Credit


def on_receive(turn: Turn, command: Receive) -> None:
    """Give ``consumer`` ``count`` more credit (attach it if new); asking extends a session held."""
    view = turn.view
    credit = view.credit.get(command.consumer)
    if credit is None:
        view.credit[command.consumer] = Credit(max(command.count, 0), command.mode, command.selects)
    else:
        credit.count += max(command.count, 0)
        credit.mode = command.mode
        credit.selects = command.selects
    held = view.sessions.of(command.consumer)
    if held is not None and not held.renewing and held.locked_until > turn.now:
        on_renew_session(turn, held.session_id, NO_REPLY)  # asking (any flow) extends the session


def on_close_consumer(turn: Turn, command: CloseConsumer) -> None:
    """No more deliveries to it; its locks live until they end; its session is released."""
    view = turn.view
    view.credit.pop(command.consumer, None)
    sessions = view.sessions
    sessions.waiters = [w for w in sessions.waiters if w.consumer != command.consumer]
    sid = sessions.by_consumer.get(command.consumer)
    if sid is not None:
        release_session(turn, sessions.held[sid])
