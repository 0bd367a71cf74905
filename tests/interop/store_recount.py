"""Recount a broker's SQLite messaging store and hold its runtime figures to it.

The promise (docs/reliability.md, docs/hardening.md): at every quiescent point (no operation in
flight) and after a restart, every runtime count an entity reports equals a recount of the rows the
store holds, on every face that shows them: the JSON API (the console's), the ATOM management API and
so the SDK's ``ServiceBusAdministrationClient`` runtime properties. Figures, as Service Bus names them:

- ``active``: the entity's own rows, active or deferred (locked ones included, as Service Bus counts);
- ``scheduled``: its own scheduled rows;
- ``deferred``: its own deferred rows (the JSON API shows them apart too);
- ``deadLetter``, ``transferDeadLetter``: every row of those sub-queues;
- ``transfer``: 0 (nothing waits in a transfer queue here);
- ``sizeInBytes``: the bytes (encoded annotations and the rest of the message) of every row the
  entity holds in all its sub-queues. A topic holds its own rows (scheduled messages, moves waiting
  to fan out) and its subscriptions' copies: its size is all of them, and its scheduled count adds
  the largest of its subscriptions' (a message scheduled on the topic waits in each it matches).

The recount reads the ``messages`` table of the SQLite file directly (a read-only connection beside
the running broker: WAL readers never block its writer), never the store's own counters.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import KEY, KEY_NAME, BrokerProcess

from sodalite.model import sas

DEAD_LETTER = "/$deadletterqueue"
TRANSFER_DEAD_LETTER = "/$transfer/$deadletterqueue"
FIGURES = ("active", "deadLetter", "scheduled", "deferred", "transfer", "transferDeadLetter", "sizeInBytes")
Figures = dict[str, int]

ACTIVE, DEFERRED, SCHEDULED = 0, 1, 2


def store_files(data_dir: Path) -> list[Path]:
    """The SQLite messaging stores under a data directory (``messages.db`` and any ``MessagingStores``
    placed under it)."""
    return sorted(p for p in data_dir.rglob("*.db") if p.is_file())


def _rows(databases: list[Path]) -> dict[str, dict[int, tuple[int, int]]]:
    """(count, bytes) per stored entity path (lower case) and state, over every partition of every store."""
    found: dict[str, dict[int, tuple[int, int]]] = {}
    for database in databases:
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
        try:
            for entity, state, count, size in connection.execute(
                    "SELECT lower(entity), state, count(*), coalesce(sum(length(annotations) + length(tail)), 0) "
                    "FROM messages GROUP BY lower(entity), state"):
                held = found.setdefault(entity, {})
                before = held.get(state, (0, 0))
                held[state] = (before[0] + count, before[1] + size)
        finally:
            connection.close()
    return found


def _pg_rows(url: str) -> dict[str, dict[int, tuple[int, int]]]:
    """:func:`_rows` for a PostgreSQL messaging store (its ``sodalite_messages``, every generation)."""
    import psycopg

    found: dict[str, dict[int, tuple[int, int]]] = {}
    with psycopg.connect(url, autocommit=True) as connection:
        for entity, state, count, size in connection.execute(
                "SELECT lower(convert_from(entity, 'UTF8')), state, count(*), "
                "coalesce(sum(length(annotations) + length(tail)), 0) FROM sodalite_messages GROUP BY 1, 2"):
            held = found.setdefault(str(entity), {})
            before = held.get(int(state), (0, 0))
            held[int(state)] = (before[0] + int(count), before[1] + int(size))
    return found


def recount(databases: list[Path], entities: dict[str, str], store_url: str | None = None) -> dict[str, Figures]:
    """The figures of each entity (``{path: kind}``, kind ``queue``, ``topic`` or ``subscription``) as
    the rows of the SQLite files (or, with ``store_url``, of that PostgreSQL store) say (module docstring)."""
    rows = _pg_rows(store_url) if store_url is not None else _rows(databases)

    def count(path: str, *states: int) -> int:
        held = rows.get(path.lower(), {})
        return sum(held.get(s, (0, 0))[0] for s in (states or tuple(held)))

    def size(path: str) -> int:
        return sum(sz for _, sz in rows.get(path.lower(), {}).values())

    figures: dict[str, Figures] = {}
    for path in entities:
        own = [path, path + DEAD_LETTER, path + TRANSFER_DEAD_LETTER]
        figures[path] = {
            "active": count(path, ACTIVE, DEFERRED), "scheduled": count(path, SCHEDULED),
            "deferred": count(path, DEFERRED), "deadLetter": count(path + DEAD_LETTER),
            "transfer": 0, "transferDeadLetter": count(path + TRANSFER_DEAD_LETTER),
            "sizeInBytes": sum(size(p) for p in own)}
    for path, kind in entities.items():
        if kind != "topic":
            continue
        subscriptions = [p for p, k in entities.items() if k == "subscription" and p.lower().startswith(
            path.lower() + "/subscriptions/")]
        figures[path]["sizeInBytes"] += sum(figures[s]["sizeInBytes"] for s in subscriptions)
        figures[path]["scheduled"] += max((figures[s]["scheduled"] for s in subscriptions), default=0)
    return figures


def api(broker: BrokerProcess, method: str, path: str, body: dict[str, Any] | None = None,
        timeout: float = 60.0) -> Any:
    """A call to the broker's JSON API (``/api/v1``) over its plain-HTTP management port, with the Root key."""
    token = sas.generate_token("sb://localhost/", KEY_NAME, KEY, int(time.time()) + 3600)
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}/api/v1{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def json_figures(broker: BrokerProcess) -> tuple[dict[str, str], dict[str, Figures]]:
    """({path: kind}, {path: figures}) as the JSON API lists every entity."""
    listed = api(broker, "GET", "/entities")
    return ({e["path"]: e["kind"] for e in listed},
            {e["path"]: {name: int(e["counts"][name]) for name in FIGURES} for e in listed})


def atom_figures(broker: BrokerProcess, entities: dict[str, str]) -> dict[str, Figures]:
    """The figures the official SDK's ``ServiceBusAdministrationClient`` reads from the ATOM API (those
    it has: a topic shows its size and scheduled count, a subscription no size)."""
    found: dict[str, Figures] = {}
    with ServiceBusAdministrationClient.from_connection_string(
            broker.admin_connection_string, connection_verify=broker.admin_certificate) as admin:
        for path, kind in entities.items():
            if kind == "queue":
                q = admin.get_queue_runtime_properties(path)
                found[path] = {"active": q.active_message_count, "deadLetter": q.dead_letter_message_count,
                               "scheduled": q.scheduled_message_count, "transfer": q.transfer_message_count,
                               "transferDeadLetter": q.transfer_dead_letter_message_count,
                               "sizeInBytes": q.size_in_bytes}
            elif kind == "topic":
                t = admin.get_topic_runtime_properties(path)
                found[path] = {"scheduled": t.scheduled_message_count, "sizeInBytes": t.size_in_bytes}
            else:
                topic, _, name = path.partition("/subscriptions/")
                s = admin.get_subscription_runtime_properties(topic, name)
                found[path] = {"active": s.active_message_count, "deadLetter": s.dead_letter_message_count,
                               "transfer": s.transfer_message_count,
                               "transferDeadLetter": s.transfer_dead_letter_message_count}
    return found


def _differences(expected: dict[str, Figures], shown: dict[str, Figures], face: str) -> list[str]:
    return [f"{face} {path} {name}: shows {value}, the store holds {expected[path][name]}"
            for path, figures in shown.items() for name, value in figures.items()
            if path in expected and value != expected[path][name]]


def mismatches(broker: BrokerProcess, *, atom: bool = True, only: Callable[[str], bool] | None = None,
               store_url: str | None = None) -> list[str]:
    """Every runtime figure (JSON API, and the SDK's over ATOM unless ``atom`` is False) that differs
    from the store's recount, in words; empty when they all agree. ``only``: the entity paths to check
    (all when None). ``store_url``: the broker keeps its messages in this PostgreSQL database."""
    entities, shown = json_figures(broker)
    expected = recount(store_files(broker.data_dir), entities, store_url)
    if only is not None:
        entities = {p: k for p, k in entities.items() if only(p)}
        shown = {p: f for p, f in shown.items() if p in entities}
    found = _differences(expected, shown, "JSON API")
    if atom:
        found += _differences(expected, atom_figures(broker, entities), "SDK runtime properties")
    return found


def assert_counts_true(broker: BrokerProcess, when: str, *, atom: bool = True, within: float = 10.0,
                       only: Callable[[str], bool] | None = None, store_url: str | None = None) -> None:
    """At a quiescent point: the runtime figures equal the store's recount. The broker reads its byte
    counts back after commits at most every 200 ms, so agreement may take a moment; a figure still
    wrong ``within`` seconds later fails the test with every difference."""
    deadline = time.monotonic() + within
    while True:
        found = mismatches(broker, atom=atom, only=only, store_url=store_url)
        if not found:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"runtime counts differ from the store {when}:\n  " + "\n  ".join(found))
        time.sleep(0.3)
