"""The promises of docs/reliability.md as pure functions over a history (no I/O, no clock).

Each ``check_*`` returns the violations it finds; ``check_all`` runs them all. The history's final
drain (``History.stored``) and the broker's delivery trace (``History.trace``, or None) are part of
the input; the checks never talk to a broker.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from checker.history import FAIL, INFO, OK, Delivery, History, Op

SEND_KINDS = ("send", "schedule")
CRASHES = ("kill9", "pg-node-kill")  # faults that kill a broker process
RECEIVE_KINDS = ("receive", "receive_deferred")


@dataclass(frozen=True)
class Violation:
    promise: str  # durable, peeklock, rad, sequence, delivery-count, session-order, counts, one-broker
    detail: str
    ops: tuple[int, ...] = ()

    def __str__(self) -> str:
        where = f" (ops {', '.join(map(str, self.ops))})" if self.ops else ""
        return f"[{self.promise}] {self.detail}{where}"


def _deliveries(history: History) -> Iterable[tuple[Op, int, Delivery]]:
    for op in history.ops:
        if op.kind in RECEIVE_KINDS and op.result == OK:
            for position, delivery in enumerate(op.deliveries):
                yield op, position, delivery


def _acked(history: History) -> dict[str, Op]:
    return {uid: op for op in history.ops if op.kind in SEND_KINDS and op.result == OK for uid in op.uids}


def _stored_uids(history: History) -> set[str]:
    return {uid for uid, _queue, _sub, _seq in history.stored}


def _may_have(op: Op) -> bool:
    """The operation happened or may have (ok or info)."""
    return op.result in (OK, INFO)


def check_durable(history: History) -> list[Violation]:
    """An acknowledged send is delivered, dead-lettered, or still stored (or cancelled, or purged)."""
    seen = {d.uid for _op, _pos, d in _deliveries(history)}
    stored = _stored_uids(history)
    # A cancel that raised may have happened (its reply lost to a crash, the SDK's retry then failing).
    cancelled = {uid for op in history.ops if op.kind == "cancel_scheduled" and _may_have(op) for uid in op.uids}
    dead_lettered: dict[str, float] = {}
    for op in history.ops:
        if op.kind == "deadletter" and _may_have(op):
            for uid in op.uids:
                dead_lettered.setdefault(uid, op.start)
    for _op, _pos, d in _deliveries(history):
        if d.sub == "deadletter":
            dead_lettered.setdefault(d.uid, _op.start)
    purges = [op for op in history.ops if op.kind == "purge" and _may_have(op)]
    ttls = _ttl_updates(history)
    last = max((op.end for op in history.ops), default=0.0)
    missing: dict[str, list[str]] = defaultdict(list)
    for uid, op in sorted(_acked(history).items(), key=lambda item: item[1].index):
        if uid in seen or uid in stored or uid in cancelled:
            continue
        if any(max(op.start, start) + ttl < last for start, ttl in ttls.get(op.queue, ())):
            continue  # expired by a rule: an entity update gave the queue a time to live it may have outlived
        if any(p.queue == op.queue and (p.value == "" or (p.value == "deadletter" and uid in dead_lettered
                                                            and dead_lettered[uid] < p.end)) for p in purges):
            continue
        missing[op.queue].append(uid)
    violations = []
    allowance = _rad_allowance(history)
    for queue, uids in sorted(missing.items()):
        allowed = allowance.get(queue, 0)
        if len(uids) > allowed:
            acked = _acked(history)
            violations.append(Violation(
                "durable", f"{len(uids)} acknowledged message(s) of {queue} neither delivered nor stored "
                f"(at most {allowed} excused as ReceiveAndDelete transfers in flight): {', '.join(uids[:10])}",
                tuple(sorted({acked[uid].index for uid in uids})[:10])))
    return violations


def _ttl_updates(history: History) -> dict[str, list[tuple[float, float]]]:
    """Per queue, (start, seconds) of each entity update that may have set its default time to live."""
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for op in history.ops:
        ttl = op.value.get("ttl") if op.kind == "update" and isinstance(op.value, dict) else None
        if ttl is not None and _may_have(op):
            found[op.queue].append((op.start, float(ttl)))
    return found


def check_session_state(history: History) -> list[Violation]:
    """A session state set that returned success is what a later get of that session reads, until another
    set that may have happened (ok or info) begins."""
    violations = []
    by_session: dict[tuple[str, str | None], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.kind in ("session_set", "session_get") and op.result != FAIL:
            by_session[(op.queue, op.session)].append(op)
    for (queue, session), ops in by_session.items():
        sets = [op for op in ops if op.kind == "session_set"]
        for get in (op for op in ops if op.kind == "session_get" and op.result == OK):
            before = [s for s in sets if s.result == OK and s.end < get.start]
            if not before:
                continue
            last = max(before, key=lambda s: s.end)
            if any(s is not last and s.start < get.end and (s.result == INFO or s.end > last.start) for s in sets):
                continue  # another set overlaps, or may take effect late (info): either value may be read
            if get.value != last.value:
                violations.append(Violation("durable", f"{queue} session {session}: state read {get.value!r} "
                                            f"after a set of {last.value!r} returned success", (last.index, get.index)))
    return violations


def _seen_rad(history: History) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = defaultdict(set)
    for _op, _pos, d in _deliveries(history):
        if d.mode == "rad":
            seen[_entity(d.queue, d.sub)].add(d.seq)
    return seen


def _entity(queue: str, sub: str) -> str:
    return queue + "/$deadletterqueue" if sub == "deadletter" else queue


def _rad_allowance(history: History) -> dict[str, int]:
    """How many acknowledged messages per queue may be gone as ReceiveAndDelete transfers the
    application never saw: with the trace, the transfers written that it did not see; without, the
    credit of every ReceiveAndDelete receive less what it returned (the SDK discards its prefetch on close)."""
    allowance: dict[str, int] = defaultdict(int)
    if history.trace is not None:
        seen = _seen_rad(history)
        written: dict[str, set[int]] = defaultdict(set)
        for entry in history.trace:
            if entry.get("event") == "written":
                written[str(entry["entity"])].add(int(entry["sequence_number"]))
        for entity, numbers in written.items():
            queue = entity.split("/", 1)[0]
            allowance[queue] += len(numbers - seen.get(entity, set()))
        crashes = [op.start for op in history.ops if op.kind == "fault" and op.value in CRASHES]
        if crashes:
            # A crash may lose the transfers in flight: messages taken for a receiver (deleted), their
            # transfers never written, and put back (a "restored" line, written when the put-back is
            # asked) but not yet committed when the broker was killed; at most what the receives had in
            # credit.
            stored = {(queue, seq) for _uid, queue, _sub, seq in history.stored}
            restored: dict[str, set[int]] = defaultdict(set)
            for entry in history.trace:
                if entry.get("event") == "restored":
                    entity = str(entry["entity"])
                    if (entity, int(entry["sequence_number"])) not in stored:
                        restored[entity].add(int(entry["sequence_number"]))
            credit: dict[str, int] = defaultdict(int)
            for op in history.ops:
                value = op.value if isinstance(op.value, dict) else {}
                if op.kind == "receive" and value.get("mode") == "rad":
                    credit[op.queue] += int(value.get("credit", 0))
            for entity, numbers in restored.items():
                queue = entity.split("/", 1)[0]
                allowance[queue] += min(len(numbers - seen.get(entity, set())), credit[queue])
            # A message is deleted when it is taken for a ReceiveAndDelete receiver, before its transfer is
            # written: one taken by a receive under way when the broker was killed may be gone with no trace
            # line at all (neither written nor restored). Such a receive may lose up to its credit, less what
            # it returned.
            for op in history.ops:
                value = op.value if isinstance(op.value, dict) else {}
                if (op.kind == "receive" and value.get("mode") == "rad"
                        and any(op.start <= at <= op.end for at in crashes)):
                    allowance[op.queue] += max(0, int(value.get("credit", 0)) - len(op.deliveries))
        return allowance
    for op in history.ops:
        value = op.value if isinstance(op.value, dict) else {}
        if op.kind == "receive" and value.get("mode") == "rad":
            # The SDK discards what it prefetched beyond what it returned when the receiver closes.
            allowance[op.queue] += max(0, int(value.get("credit", 0)) - (len(op.deliveries) if op.result == OK else 0))
    return allowance


def _settled_key(op: Op, uid: str) -> tuple[str, object]:
    """A settlement names one copy of a message: (queue, sequence number) when recorded, else its uid. (An SDK
    send retried after a cut can store two copies of one uid: the queues have no duplicate detection.)"""
    seq = op.value.get("seq") if isinstance(op.value, dict) else None
    return (op.queue, seq) if seq is not None else ("", uid)


def _keys(d: Delivery) -> tuple[tuple[str, object], tuple[str, object]]:
    return (d.queue, d.seq), ("", d.uid)


def check_peeklock(history: History) -> list[Violation]:
    """A message whose complete returned success is never delivered again."""
    completed: dict[tuple[str, object], Op] = {}
    for op in history.ops:
        if op.kind == "complete" and op.result == OK:
            for uid in op.uids:
                completed.setdefault(_settled_key(op, uid), op)
    violations = []
    for op, _pos, d in _deliveries(history):
        for key in _keys(d):
            done = completed.get(key)
            if done is not None and op.start > done.end and d.uid in done.uids:
                violations.append(Violation("peeklock", f"{d.uid} delivered again (seq {d.seq}) after its complete "
                                            "returned success", (done.index, op.index)))
                break
    for uid, queue, _sub, seq in history.stored:
        for key in ((queue, seq), ("", uid)):
            done = completed.get(key)
            if done is not None and uid in done.uids:
                violations.append(Violation("peeklock", f"{uid} still stored after its complete returned success",
                                            (done.index,)))
                break
    return violations


def check_rad(history: History) -> list[Violation]:
    """A message received in ReceiveAndDelete mode is received by nobody else and is not stored after."""
    by_copy: dict[tuple[str, int], list[tuple[Op, Delivery]]] = defaultdict(list)
    for op, _pos, d in _deliveries(history):
        by_copy[(d.queue, d.seq)].append((op, d))
    stored = {(queue, seq) for _uid, queue, _sub, seq in history.stored}
    violations = []
    for (queue, seq), deliveries in by_copy.items():
        rad = [(op, d) for op, d in deliveries if d.mode == "rad"]
        if not rad:
            continue
        first_op, uid = rad[0][0], rad[0][1].uid
        later = [op for op, d in deliveries if op.start > first_op.end or (op is not first_op and d.mode == "rad")]
        if later or len(rad) > 1:
            violations.append(Violation("rad", f"{uid} (seq {seq} of {queue}) received in ReceiveAndDelete mode "
                                        "and delivered again", tuple(sorted({op.index for op, _d in deliveries}))))
        elif (queue, seq) in stored:
            violations.append(Violation("rad", f"{uid} (seq {seq} of {queue}) received in ReceiveAndDelete mode "
                                        "and still stored", (first_op.index,)))
    if history.trace is not None:
        state: dict[tuple[str, int], str] = {}
        for line, entry in enumerate(history.trace):
            if entry.get("event") not in ("written", "restored"):
                continue
            key = (str(entry["entity"]), int(entry["sequence_number"]))
            if entry["event"] == "written" and state.get(key) == "written":
                violations.append(Violation("rad", f"{key[0]} sequence number {key[1]} written twice to "
                                            f"ReceiveAndDelete receivers (trace line {line + 1})"))
            state[key] = str(entry["event"])
    return violations


def check_sequence(history: History, partitioned: frozenset[str] = frozenset()) -> list[Violation]:
    """One sequence number of a queue names one message; acknowledged sends in real-time order get
    increasing numbers (non-partitioned queues)."""
    owner: dict[tuple[str, int], tuple[str, int]] = {}
    violations = []

    def observe(queue: str, seq: int, uid: str, op_index: int) -> None:
        key = (queue, seq)
        known = owner.setdefault(key, (uid, op_index))
        if known[0] != uid:
            violations.append(Violation("sequence", f"sequence number {seq} of {queue} reused: {known[0]} and {uid}",
                                        tuple(i for i in (known[1], op_index) if i >= 0)))
    lowest: dict[tuple[str, str], int] = {}
    for op, _pos, d in _deliveries(history):
        observe(d.queue, d.seq, d.uid, op.index)
        lowest[(d.queue, d.uid)] = min(d.seq, lowest.get((d.queue, d.uid), d.seq))
    for op in history.ops:
        if op.kind == "peek" and op.result == OK:
            for d in op.deliveries:
                observe(d.queue, d.seq, d.uid, op.index)
                lowest[(d.queue, d.uid)] = min(d.seq, lowest.get((d.queue, d.uid), d.seq))
        if op.kind == "schedule" and op.result == OK and isinstance(op.value, list):
            for uid, seq in zip(op.uids, op.value, strict=False):
                observe(op.queue, int(seq), uid, op.index)
                lowest[(op.queue, uid)] = min(int(seq), lowest.get((op.queue, uid), int(seq)))
    for uid, queue, _sub, seq in history.stored:
        observe(queue, seq, uid, -1)
        lowest[(queue, uid)] = min(seq, lowest.get((queue, uid), seq))
    sends = sorted(((op, uid, lowest[(op.queue, uid)]) for uid, op in _acked(history).items()
                    if op.queue not in partitioned and (op.queue, uid) in lowest), key=lambda item: item[0].end)
    by_queue: dict[str, list[tuple[Op, str, int]]] = defaultdict(list)
    for item in sends:
        by_queue[item[0].queue].append(item)
    for queue, items in by_queue.items():
        highest: tuple[Op, str, int] | None = None  # the highest number among sends that returned so far
        ends = [item[0].end for item in items]
        done = 0
        for op, uid, seq in sorted(items, key=lambda item: item[0].start):
            while done < len(items) and ends[done] < op.start:
                candidate = items[done]
                if highest is None or candidate[2] > highest[2]:
                    highest = candidate
                done += 1
            if highest is not None and highest[2] > seq:
                violations.append(Violation(
                    "sequence", f"{queue}: {uid} (sent after {highest[1]} returned) has the lower number "
                    f"{seq} < {highest[2]}", (highest[0].index, op.index)))
    return violations


def check_delivery_count(history: History, strict: bool = False) -> list[Violation]:
    """The delivery count of one message never goes down; after an abandon, a lock lapse or a crash it rises
    (by exactly one when ``strict``: no deliveries the application could not see)."""
    settles: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.kind in ("complete", "abandon", "deadletter", "defer") and op.result != FAIL:
            for uid in op.uids:
                settles[uid].append(op)
    moves = [op for op in history.ops if op.kind == "move" and _may_have(op)]
    per_copy: dict[tuple[str, str, int], list[tuple[Op, Delivery]]] = defaultdict(list)
    for op, _pos, d in _deliveries(history):
        if d.mode == "peeklock":
            per_copy[(d.uid, d.queue, d.seq)].append((op, d))
    violations = []
    for (uid, _queue, seq), deliveries in per_copy.items():
        deliveries.sort(key=lambda item: item[0].start)
        for (op1, d1), (op2, d2) in itertools.pairwise(deliveries):
            if d1.sub == "deadletter" or d2.sub == "deadletter" or d1.queue != d2.queue:
                continue
            if op2.start < op1.end:
                continue  # the two receives overlap in time: which delivery came first is unknown
            between = [s for s in settles[uid] if op1.end <= s.start and s.end <= op2.start
                       and _settled_key(s, uid) in (("", uid), (s.queue, seq))]
            if any(s.kind == "deadletter" for s in between) or any(
                    m.end >= op1.start and m.start <= op2.end for m in moves):
                continue  # another incarnation (resubmitted, moved): its count starts again
            if d2.count < d1.count:
                violations.append(Violation("delivery-count", f"{uid}: delivery count went down {d1.count} -> "
                                            f"{d2.count}", (op1.index, op2.index)))
                continue
            settled = [s for s in between if s.result == OK]
            if settled and settled[0].kind in ("defer", "complete"):
                continue  # defer does not raise it; a complete followed by a delivery is check_peeklock's
            if (settled and settled[0].kind == "abandon") or not settled:
                expected = d1.count + 1
                if d2.count < expected or (strict and d2.count != expected):
                    how = "abandon" if settled else "lock lapse or crash"
                    violations.append(Violation("delivery-count", f"{uid}: after an {how} the delivery count went "
                                                f"{d1.count} -> {d2.count}, not {expected}",
                                                (op1.index, *(s.index for s in settled[:1]), op2.index)))
    return violations


def check_session_order(history: History) -> list[Violation]:
    """Within one session, a message with a lower sequence number is first delivered no later than one
    with a higher number (scheduled, dead-lettered and moved messages aside)."""
    excluded = {uid for op in history.ops if op.kind in ("schedule", "deadletter", "defer") for uid in op.uids}
    first: dict[str, tuple[Op, int, Delivery]] = {}
    for op, pos, d in _deliveries(history):
        if d.session is not None and d.sub == "" and d.uid not in excluded and op.kind == "receive":
            first.setdefault(d.uid, (op, pos, d))
    groups: dict[tuple[str, str], list[tuple[Op, int, Delivery]]] = defaultdict(list)
    for item in first.values():
        groups[(item[2].queue, item[2].session or "")].append(item)
    violations = []
    for (queue, session), items in groups.items():
        items.sort(key=lambda item: item[2].seq)
        for a, b in itertools.pairwise(items):
            (op_a, pos_a, _da), (op_b, pos_b, _db) = a, b
            if (op_a is op_b and pos_b < pos_a) or (op_a is not op_b and op_b.end < op_a.start):
                violations.append(Violation("session-order", f"{queue} session {session}: {b[2].uid} (seq "
                                            f"{b[2].seq}) delivered before {a[2].uid} (seq {a[2].seq})",
                                            (op_a.index, op_b.index)))
    return violations


def check_counts(history: History) -> list[Violation]:
    """At each quiescent point, the runtime counts equal the recount of the store."""
    violations = []
    for op in history.ops:
        if op.kind != "recount" or op.result != OK or not isinstance(op.value, dict):
            continue
        for queue, both in sorted(op.value.items()):
            api, store = both["api"], both["store"]
            wrong = {key: (api.get(key), store.get(key)) for key in store if api.get(key) != store.get(key)}
            if wrong:
                text = ", ".join(f"{key} {a} (store {s})" for key, (a, s) in sorted(wrong.items()))
                violations.append(Violation("counts", f"{queue} at {op.error or 'a quiescent point'}: {text}",
                                            (op.index,)))
    return violations


def check_one_broker(history: History) -> list[Violation]:
    """One broker per data directory: a second ``serve`` started on the directory a running broker holds is
    refused at start (it never serves), with an error naming the directory and the process holding it, and
    the running broker's ``endpoints.json`` is left as it was (not rewritten, not removed)."""
    violations = []
    for op in history.ops:
        if op.kind != "second-serve" or op.result != OK or not isinstance(op.value, dict):
            continue
        value = op.value
        data_dir, holder, output = str(value["data_dir"]), value["holder"], str(value.get("output") or "")
        last = output.strip().splitlines()[-1:] or ["no output"]
        if value["started"] or value["exit"] in (None, 0):
            how = "started serving" if value["started"] else f"exit code {value['exit']}"
            violations.append(Violation("one-broker", f"a second serve on {data_dir} (held by process {holder}) "
                                        f"was not refused: {how}; {last[0][:200]}", (op.index,)))
        elif data_dir not in output or not re.search(rf"\b{holder}\b", output):
            violations.append(Violation("one-broker", f"a second serve on {data_dir} was refused without naming "
                                        f"the directory and the holder (process {holder}): {last[0][:200]}",
                                        (op.index,)))
        before, after = value.get("endpoints_before"), value.get("endpoints_after")
        if before is not None and after != before:
            what = "removed" if after is None else "rewritten"
            violations.append(Violation("one-broker", f"{data_dir}/endpoints.json of the running broker (process "
                                        f"{holder}) {what} by a second serve", (op.index,)))
    return violations


def check_all(history: History, partitioned: frozenset[str] = frozenset(), strict: bool = False) -> list[Violation]:
    return [*check_durable(history), *check_peeklock(history), *check_rad(history),
            *check_sequence(history, partitioned), *check_delivery_count(history, strict),
            *check_session_order(history), *check_session_state(history), *check_counts(history),
            *check_one_broker(history)]
