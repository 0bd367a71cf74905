"""The store contract for subscription rules as rows of their own (issue 14 item 1, issue 18).

A subscription's rules are one row each (``PutRule``, ``DeleteRule``), not a list inside its entity
record, so two nodes changing different rules of one subscription at once both keep their change,
and a change of the subscription's properties leaves its rules alone. Whether a rule's name is
taken is decided by the store (``RuleWritten.applied``): of two nodes adding one name at once,
exactly one gets it. Every adapter is held to the same tests; the PostgreSQL ones run against a
real server this process starts (``tests/pg_server.py``), a schema of each test's own. The
migrations move the ``"Rules"`` of subscription records written by the previous schema into rows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sodalite.errors import StoreUnavailable
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    DeleteEntity,
    DeleteRule,
    EntityRecord,
    MessagingStore,
    PutEntity,
    PutRule,
    RuleWritten,
)
from sodalite.store.sqlite import SqliteStore

try:
    import psycopg

    import pg_server
    from sodalite.store.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore
except ImportError:  # pragma: no cover - the postgresql extra is part of the dev install
    pg_server = None  # type: ignore[assignment]

SUB = "news/subscriptions/all"
PROPS = {"Properties": {"LockDuration": "PT30S"}}


def rule(name: str, sql: str = "1=1") -> dict[str, Any]:
    return {"Name": name, "Properties": {"FilterType": "Sql", "SqlExpression": sql}}


def subscription(path: str = SUB, **extra: Any) -> EntityRecord:
    return EntityRecord(path, "subscription", {**PROPS, **extra})


def rules_of(store: MessagingStore, path: str = SUB) -> list[dict[str, Any]]:
    [found] = [e for e in store.load_entities() if e.path.lower() == path.lower()]
    stored: list[dict[str, Any]] = found.properties["Rules"]
    return stored


def names(store: MessagingStore, path: str = SUB) -> list[str]:
    return [r["Name"] for r in rules_of(store, path)]


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    if pg_server is None:
        pytest.skip("psycopg is not installed (pip install -e '.[dev]')")
    yield from pg_server.module_database("rules")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], MessagingStore]]:
    """Opens a new adapter on this test's storage (the memory store: the same instance)."""
    opened: list[MessagingStore] = []
    url = pg_server.fresh_schema_url(request.getfixturevalue("pg_database")) \
        if request.param == "postgresql" else ""
    memory = MemoryStore()

    def build() -> MessagingStore:
        store: MessagingStore
        if request.param == "memory":
            store = memory
        elif request.param == "sqlite":
            store = SqliteStore(tmp_path / "rules.db")
        else:
            store = PostgresStore(url)
        store.open()
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def test_rules_are_rows_in_the_order_added_and_the_store_decides_a_taken_name(
        make: Callable[[], MessagingStore]) -> None:
    store = make()
    results = store.apply([PutEntity(subscription()), PutRule(SUB, "b", rule("b")), PutRule(SUB, "a", rule("a"))])
    assert results[1:] == (RuleWritten(True), RuleWritten(True))
    assert rules_of(store) == [rule("b"), rule("a")]
    assert store.load_entities() == [subscription(Rules=[rule("b"), rule("a")])]
    # A taken name, in any case of its ASCII letters, is refused and changes nothing.
    assert store.apply([PutRule(SUB, "A", rule("A", "2=2"))]) == (RuleWritten(False),)
    assert store.apply([PutRule("NEWS/Subscriptions/ALL", "b", rule("b", "3=3"))]) == (RuleWritten(False),)
    assert rules_of(store) == [rule("b"), rule("a")]
    # Replacing keeps the rule's place; replacing one that does not exist changes nothing.
    assert store.apply([PutRule(SUB, "B", rule("B", "4=4"), replace=True)]) == (RuleWritten(True),)
    assert store.apply([PutRule(SUB, "c", rule("c"), replace=True)]) == (RuleWritten(False),)
    assert rules_of(store) == [rule("B", "4=4"), rule("a")]
    # Deleting says whether there was one; a rule added after a delete goes last.
    assert store.apply([DeleteRule(SUB, "b"), DeleteRule(SUB, "b"), PutRule(SUB, "b", rule("b"))]) == (
        RuleWritten(True), RuleWritten(False), RuleWritten(True))
    assert names(store) == ["a", "b"]


def test_a_subscriptions_properties_change_without_touching_its_rules_and_a_whole_set_replaces_them(
        make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([PutEntity(subscription(Rules=[rule("$Default"), rule("x")]))])  # a new subscription's set
    assert names(store) == ["$Default", "x"]
    store.apply([PutRule(SUB, "y", rule("y")),
                 PutEntity(EntityRecord(SUB, "subscription", {"Properties": {"LockDuration": "PT1M"}}))])
    [record] = store.load_entities()
    assert record.properties == {"Properties": {"LockDuration": "PT1M"}, "Rules": [rule("$Default"), rule("x"),
                                                                                   rule("y")]}
    store.apply([PutEntity(subscription(Rules=[rule("z")]))])
    assert names(store) == ["z"]
    store.apply([PutEntity(subscription(Rules=[]))])
    assert names(store) == []


def test_rules_belong_to_their_subscription_and_go_with_it(make: Callable[[], MessagingStore]) -> None:
    store = make()
    other = "news/subscriptions/allx"
    store.apply([PutEntity(subscription()), PutEntity(subscription(other)),
                 PutEntity(EntityRecord("news", "topic", {"a": 1})),
                 PutRule(SUB, "mine", rule("mine")), PutRule(other, "mine", rule("mine", "2=2"))])
    assert [e.properties for e in store.load_entities() if e.kind == "topic"] == [{"a": 1}]  # no "Rules" there
    assert rules_of(store, other) == [rule("mine", "2=2")]
    store.apply([DeleteEntity("NEWS/subscriptions/ALL")])
    assert [e.path for e in store.load_entities()] == ["news", other]
    assert rules_of(store, other) == [rule("mine", "2=2")]
    store.apply([PutEntity(subscription())])  # the same path again starts without rules
    assert names(store) == []


def test_a_rule_written_in_a_failed_batch_is_not_stored(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([PutEntity(subscription()), PutRule(SUB, "kept", rule("kept"))])
    with pytest.raises(StoreUnavailable):
        store.apply([PutRule(SUB, "lost", rule("lost")), DeleteRule(SUB, "kept"),
                     PutEntity(EntityRecord("q", "queue", {"bad": object()}))])
    assert names(store) == ["kept"]


def test_rules_survive_reopening(make: Callable[[], MessagingStore]) -> None:
    store = make()
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store keeps nothing across instances")
    store.apply([PutEntity(subscription()), PutRule(SUB, "r1", rule("r1")), PutRule(SUB, "r2", rule("r2"))])
    store.close()
    again = make()
    assert names(again) == ["r1", "r2"]
    assert again.apply([PutRule(SUB, "R1", rule("R1"))]) == (RuleWritten(False),)


# -- several nodes on one PostgreSQL database --------------------------------------------------------


@pytest.fixture
def pg_url(pg_database: str) -> str:
    return pg_server.fresh_schema_url(pg_database)


def test_on_postgresql_of_many_nodes_adding_one_name_at_once_exactly_one_gets_it(pg_url: str) -> None:
    nodes = [PostgresStore(pg_url) for _ in range(6)]
    for node in nodes:
        node.open()
    try:
        nodes[0].apply([PutEntity(subscription())])
        for round_ in range(5):
            start = threading.Barrier(len(nodes))

            def add(node: PostgresStore, i: int, name: str = f"same-{round_}",
                    start: threading.Barrier = start) -> bool:
                start.wait()
                (result,) = node.apply([PutRule(SUB, name, rule(name, f"n = {i}"))])
                assert isinstance(result, RuleWritten)
                return result.applied

            with ThreadPoolExecutor(len(nodes)) as pool:
                won = list(pool.map(add, nodes, range(len(nodes))))
            assert won.count(True) == 1, won
            [stored] = [r for r in rules_of(nodes[0]) if r["Name"] == f"same-{round_}"]
            assert stored == rule(f"same-{round_}", f"n = {won.index(True)}")
    finally:
        for node in nodes:
            node.close()


def test_on_postgresql_rules_added_by_many_nodes_at_once_all_survive(pg_url: str) -> None:
    nodes = [PostgresStore(pg_url) for _ in range(4)]
    for node in nodes:
        node.open()
    try:
        nodes[0].apply([PutEntity(subscription(Rules=[rule("$Default")]))])

        def add(index: int) -> None:
            node = nodes[index % len(nodes)]
            assert node.apply([PutRule(SUB, f"r{index}", rule(f"r{index}"))]) == (RuleWritten(True),)

        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(add, range(40)))
        # and one node changes the subscription's properties meanwhile: the rules stay
        nodes[1].apply([PutEntity(EntityRecord(SUB, "subscription", {"Properties": {}}))])
        assert sorted(names(nodes[2])) == sorted(["$Default", *(f"r{i}" for i in range(40))])
    finally:
        for node in nodes:
            node.close()


# -- migrations ----------------------------------------------------------------------------------------------


def test_sqlite_moves_the_rules_of_a_version_5_files_subscription_records_into_rows(tmp_path: Path) -> None:
    db = tmp_path / "v5.db"
    store = SqliteStore(db)  # the version-5 schema is today's without the rules table
    store.open()
    store.close()
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TABLE rules")
    raw.execute("PRAGMA user_version = 5")
    raw.executemany("INSERT INTO entities (path, kind, properties) VALUES (?, ?, ?)", [
        ("news", "topic", "{}"),
        (SUB, "subscription", json.dumps({**PROPS, "Rules": [rule("$Default"), rule("red", "color = 'red'")]})),
        ("news/subscriptions/none", "subscription", json.dumps({**PROPS, "Rules": []})),
        ("orders", "queue", json.dumps({"Rules": "a queue property of that name is left alone"})),
    ])
    raw.close()
    store = SqliteStore(db)
    store.open()
    try:
        assert store.load_entities() == [
            EntityRecord("news", "topic", {}),
            subscription(Rules=[rule("$Default"), rule("red", "color = 'red'")]),
            subscription("news/subscriptions/none", Rules=[]),
            EntityRecord("orders", "queue", {"Rules": "a queue property of that name is left alone"})]
        assert store.apply([PutRule(SUB, "RED", rule("RED"))]) == (RuleWritten(False),)
        store.apply([PutEntity(EntityRecord(SUB, "subscription", PROPS))])
        assert names(store) == ["$Default", "red"]
    finally:
        store.close()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (6,)
        stored = dict(raw.execute("SELECT path, properties FROM entities").fetchall())
        assert json.loads(stored[SUB]) == PROPS  # the record no longer holds its rules
    finally:
        raw.close()


def test_postgresql_schema_6_moves_the_rules_of_subscription_records_into_rows(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sodalite_schema_version (singleton boolean PRIMARY KEY DEFAULT true "
                     "CHECK (singleton), version integer NOT NULL)")
        for statements in MIGRATIONS[:5]:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (5)")
        for path, kind, properties in [
            ("news", "topic", {}),
            ("News/Subscriptions/All", "subscription",
             {**PROPS, "Rules": [rule("$Default"), rule("Red", "color = 'red'"), rule("blue")]}),
            ("news/subscriptions/none", "subscription", PROPS),
            ("orders", "queue", {"Rules": 1}),
        ]:
            conn.execute("INSERT INTO sodalite_entities (path_key, path, kind, properties) VALUES (%s, %s, %s, %s)",
                         (path.lower().encode(), path, kind, json.dumps(properties)))
    store = PostgresStore(pg_url)
    store.open()
    try:
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT version FROM sodalite_schema_version").fetchone() == (SCHEMA_VERSION,)
        assert store.load_entities() == [
            EntityRecord("news", "topic", {}),
            subscription("News/Subscriptions/All", Rules=[rule("$Default"), rule("Red", "color = 'red'"),
                                                          rule("blue")]),
            subscription("news/subscriptions/none", Rules=[]),
            EntityRecord("orders", "queue", {"Rules": 1})]
        assert store.apply([PutRule(SUB, "red", rule("red")), PutRule(SUB, "green", rule("green"))]) == (
            RuleWritten(False), RuleWritten(True))
        assert names(store) == ["$Default", "Red", "blue", "green"]
        store.apply([PutEntity(EntityRecord(SUB, "subscription", PROPS))])
        assert names(store) == ["$Default", "Red", "blue", "green"]
    finally:
        store.close()
