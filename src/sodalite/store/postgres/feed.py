"""Notifications between nodes sharing one database: the payloads a batch queues with ``pg_notify``
(:func:`_announcements`) and the LISTEN side, :class:`PostgresChangeFeed`.

Notifications (several nodes on one database). A batch that makes messages ready in a partition
(ACTIVE appends, activation, abandon and release, dead-letters and moves into it, a released session
lock) or changes entity records ends with one ``pg_notify`` statement queuing one notification per
such partition (and one for the entities) on its schema's channel: PostgreSQL delivers them at
commit, never after a rollback. A batch that appends scheduled messages also names, per partition,
the earliest of their times on the schema's second channel (``channel_name(schema, DUE)``), so every
node acts on that time even if the node that scheduled them died.
Each node listens with :class:`PostgresChangeFeed` (one connection of its own) and reads the store
again for the partition named; see docs/postgresql.md.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Final

import psycopg
import psycopg.errors
from psycopg import sql

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.store.port import (
    Activate,
    Append,
    ChangeSink,
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    MessageOp,
    MoveMessages,
    Outcome,
    PartitionRef,
    PutEntity,
    PutRule,
    ReleaseSession,
    Restore,
    Settle,
    StoreOp,
)
from sodalite.store.postgres.failover import Failover
from sodalite.store.postgres.values import (
    DEFAULT_CONNECT_TIMEOUT,
    LISTEN_POLL,
    LISTEN_RETRY_MAX,
    _describe,
    check_url,
    log,
    redact,
)


def channel_name(schema: str, kind: str = "") -> str:
    """The notification channel of the Sodalite tables in ``schema``: a channel is database-wide, so
    each schema gets its own and deployments in other schemas of the database are not woken.
    ``kind`` "due_" names the schema's second channel, of scheduled times (:func:`_announcements`)."""
    name = f"sodalite_{kind}{schema}"
    if len(name.encode("utf-8")) <= 63:  # NAMEDATALEN - 1
        return name
    return f"sodalite_{kind}" + hashlib.sha256(schema.encode("utf-8")).hexdigest()[:32]


DUE: Final = "due_"  # the kind of channel_name that carries scheduled times


def _announcements(batch: Sequence[StoreOp], origin: str) -> tuple[list[str], list[str]]:
    """The notification payloads a batch sends when it commits: one per partition it makes messages
    ready in (ACTIVE rows appended, scheduled rows activated, abandoned and released rows, rows
    dead-lettered or moved into it, a session lock released), and one if it changes entity records:
    ``r <origin> <partition> <entity>`` and ``e <origin>``, on the schema's channel; and, on its
    channel of due times (``channel_name(schema, DUE)``), one per partition it appends scheduled
    messages to, naming the earliest of their times (ms): ``d <origin> <partition> <time> <entity>``.
    The origin lets a node skip its own. Returns (channel payloads, due-channel payloads)."""
    ready: dict[tuple[str, int], None] = {}
    due: dict[tuple[str, int], int] = {}
    entities = False
    for op in batch:
        for key in _made_ready(op):
            ready[key] = None
        if isinstance(op, Append):
            times = [m.scheduled_enqueue_time or 0 for m in op.messages if m.state == MessageState.SCHEDULED]
            if times:
                key = (op.ref.entity, op.ref.partition)
                due[key] = min(times + ([due[key]] if key in due else []))
        elif isinstance(op, PutEntity | DeleteEntity | DeleteIdleEntity | PutRule | DeleteRule):
            entities = True
    payloads = [f"r {origin} {partition} {entity}" for entity, partition in ready]
    if entities:
        payloads.append(f"e {origin}")
    return payloads, [f"d {origin} {partition} {at} {entity}" for (entity, partition), at in due.items()]


def _made_ready(op: StoreOp) -> list[tuple[str, int]]:
    """The partitions ``op`` makes messages ready in (see :func:`_announcements`), in order."""
    here = [(op.ref.entity, op.ref.partition)] if isinstance(op, MessageOp) else []
    if isinstance(op, Append | Restore):
        return here if any(m.state == MessageState.ACTIVE for m in op.messages) else []
    if isinstance(op, Activate):
        return here if op.limit > 0 else []
    if isinstance(op, Settle):
        found: list[tuple[str, int]] = []
        for item in op.items:
            if item.outcome in (Outcome.ABANDON, Outcome.RELEASE):
                found += here
            elif item.outcome is Outcome.DEAD_LETTER:
                found.append(op.dead_letter_target(item))
        return found
    if isinstance(op, MoveMessages):
        return [op.destination] if op.destination is not None and op.items else []
    return here if isinstance(op, ReleaseSession) else []


def _parse_announcement(payload: str) -> tuple[str, str, PartitionRef | None, int | None] | None:
    """(kind, origin, ref, due time) of a payload :func:`_announcements` made; None for anything else."""
    parts = payload.split(" ", 3)
    if len(parts) == 2 and parts[0] == "e":
        return "e", parts[1], None, None
    if len(parts) == 4 and parts[0] == "r" and parts[2].isdigit():
        return "r", parts[1], PartitionRef(parts[3], int(parts[2])), None
    if parts[0] == "d":
        parts = payload.split(" ", 4)
        if len(parts) == 5 and parts[2].isdigit() and parts[3].isdigit():
            return "d", parts[1], PartitionRef(parts[4], int(parts[2])), int(parts[3])
    return None


_NOTIFY: Final = ("SELECT pg_notify(channel, payload) "
                  "FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS n(channel, payload)")


class PostgresChangeFeed:
    """A node's one listening connection to a PostgreSQL store (the port's ``ChangeFeed``).

    Theory of operation. Every :meth:`PostgresStore.apply` that makes messages ready in a partition,
    or changes entity records, adds ``pg_notify`` to its transaction (:func:`_announcements`: one
    notification per partition and per transaction, whatever the batch holds); PostgreSQL delivers
    them to every listening session when, and only if, the transaction commits, so a listener that
    reads the store on a notification sees what it announces. The notifications of a schema go to
    its channel (:func:`channel_name`).

    This class keeps one connection (autocommit) in a thread of its own, ``LISTEN``\\ s on the
    channel and hands each notification to the sink: ``ready(ref)``, ``due(ref, at)`` or ``entities_changed()``,
    skipping those whose origin is its own store's (this node made them and knows). The thread waits
    for notifications :data:`LISTEN_POLL` at a time, so :meth:`stop` takes effect within that. When
    the connection is lost (the database restarted, the network broke: TCP keepalives find a dead
    peer), it reconnects with a growing pause (up to :data:`LISTEN_RETRY_MAX`) until it succeeds,
    and then calls ``sink.resynced()``, because what was committed while nobody listened was never
    announced; ``live`` is False meanwhile, and the server polls faster. Notifications are hints:
    the store stays the truth, and nothing is lost when one is missed, only found later by a poll.
    """

    def __init__(self, url: str, *, origin: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 application_name: str = "sodalite listen", failover: Failover | None = None) -> None:
        self._url = check_url(url)
        # The store's choice of server: the feed listens on the primary the store writes to.
        self._failover = failover or Failover(url, shown=redact(url), connect_timeout=connect_timeout,
                                                          application_name=application_name)
        self._shown = redact(url)
        self._origin = origin
        self._timeout = connect_timeout
        self._application_name = application_name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = False
        # Diagnostics (tests and benchmarks read them): connections made, notifications handed on.
        self.connections = 0
        self.delivered = 0

    @property
    def live(self) -> bool:
        return self._live

    def start(self, sink: ChangeSink) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(sink,), name="sodalite-pg-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=LISTEN_POLL + self._timeout + 1)

    def _run(self, sink: ChangeSink) -> None:
        pause = 0.1
        while not self._stopping.is_set():
            try:
                with self._failover.connect(autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                            application_name=self._application_name, keepalives=1,
                                            keepalives_idle=10, keepalives_interval=5, keepalives_count=3) as conn:
                    row = conn.execute("SELECT current_schema()").fetchone()
                    if row is None or row[0] is None:
                        raise StoreUnavailable(f"PostgreSQL store {self._shown}: no schema on the search_path")
                    for kind in ("", DUE):
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(str(row[0]), kind))))
                    self.connections += 1
                    if self.connections > 1:
                        log.warning("PostgreSQL store %s: listening again for other nodes' changes", self._shown)
                    self._live = True
                    pause = 0.1
                    self._hand(sink.resynced)
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=LISTEN_POLL):
                            self._dispatch(sink, notify.payload)
            except (psycopg.Error, StoreUnavailable) as exc:
                if self._live:
                    log.warning("PostgreSQL store %s: the listening connection was lost (%s); reconnecting",
                                self._shown, _describe(exc))
            finally:
                self._live = False
            self._stopping.wait(pause)
            pause = min(pause * 2, LISTEN_RETRY_MAX)

    def _dispatch(self, sink: ChangeSink, payload: str) -> None:
        parsed = _parse_announcement(payload)
        if parsed is None or parsed[1] == self._origin:
            return
        kind, _, ref, at = parsed
        self.delivered += 1
        if ref is not None and at is not None:
            scheduled: PartitionRef = ref
            due_at: int = at
            self._hand(lambda: sink.due(scheduled, due_at))
        elif ref is not None:
            target: PartitionRef = ref
            self._hand(lambda: sink.ready(target))
        elif kind == "e":
            self._hand(sink.entities_changed)

    @staticmethod
    def _hand(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # the sink's trouble must not end the listening thread
            log.exception("a change notification could not be handed on")
