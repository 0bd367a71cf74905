"""The history: every operation a client ran, with its result (ok / fail / info, as Jepsen records them).

Pure data. A delivery names the message by its ``uid`` (the checker's own id, in the body and the
application property ``uid``) and carries what the application saw: queue, sequence number, delivery
count, session, and the receive mode.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass(frozen=True)
class Delivery:
    uid: str
    queue: str  # the queue the receiver read (its base path; sub is "" or "deadletter" or "deferred")
    seq: int
    count: int  # the delivery count the application saw
    mode: str  # "peeklock" or "rad"
    session: str | None = None
    sub: str = ""


@dataclass
class Op:
    index: int
    client: int
    kind: str  # send, schedule, receive, complete, abandon, deadletter, defer, receive_deferred, renew, peek,
    # cancel_scheduled, purge, move, fault, recount
    queue: str = ""
    start: float = 0.0
    end: float = 0.0
    result: str = INFO
    uids: tuple[str, ...] = ()  # messages sent, or settled
    session: str | None = None
    partition_key: str | None = None
    deliveries: tuple[Delivery, ...] = ()
    value: Any = None  # kind-specific: schedule -> sequence numbers; move -> target; fault -> its name; recount
    # -> {"queue": {"api": {...}, "store": {...}}}; receive -> {"credit": n, "closed_early": bool}
    error: str = ""


@dataclass
class History:
    seed: int = 0
    ops: list[Op] = field(default_factory=list)
    # The final drain: every message still stored, per queue: (uid, sub-queue, sequence number).
    stored: list[tuple[str, str, str, int]] = field(default_factory=list)
    # The broker's delivery trace (test-only), its lines as dicts, or None when the broker has none.
    trace: list[dict[str, Any]] | None = None

    def add(self, op: Op) -> Op:
        op.index = len(self.ops)
        self.ops.append(op)
        return op

    def dumps(self) -> str:
        return json.dumps({"seed": self.seed, "ops": [asdict(op) for op in self.ops], "stored": self.stored,
                           "trace": self.trace}, default=str)

    @classmethod
    def loads(cls, text: str) -> History:
        """A history written by :meth:`dumps` (``scripts/fault-sweep --save``)."""
        raw = json.loads(text)
        history = cls(seed=raw["seed"], stored=[tuple(s) for s in raw["stored"]], trace=raw["trace"])
        for op in raw["ops"]:
            op["deliveries"] = tuple(Delivery(**d) for d in op["deliveries"])
            op["uids"] = tuple(op["uids"])
            history.ops.append(Op(**op))
        return history
