"""A data directory the previous release wrote (SQLite schema 5) keeps its rules, entity times and
regenerated keys when the new broker starts on it (clarifications.md: upgrades keep data).

The previous release kept a subscription's rules inside its entity record, every entity's times in
one ``$entitytimes`` record and every regenerated key in one ``$authorizationrules`` record. The
file is built as that release left it: today's schema without the ``rules`` table, user_version 5,
and those records written as it wrote them. The broker is built as ``sodalite serve`` builds it
(``cli.stores.build_broker``) on that data directory.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from sodalite.cli.stores import build_broker
from sodalite.model.authorization import AuthorizationRule, KeyOverride, KeyOverrides
from sodalite.model.config import NamespaceConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import RuleDescription, SqlFilter, SubscriptionProperties, TopicProperties, TrueFilter
from sodalite.store.sqlite import SqliteStore

SUB = "news/subscriptions/all"
NAMESPACE = NamespaceConfig(
    "ns", topics=(TopicConfig("news", subscriptions=(SubscriptionConfig("all"),)),),
    authorization_rules=(AuthorizationRule("root", "root-key"), AuthorizationRule("sender", "send-key")))


def test_a_version_5_data_directory_keeps_its_rules_times_and_keys(tmp_path: Path) -> None:
    db = tmp_path / "messages.db"
    store = SqliteStore(db)
    store.open()
    store.close()
    rules = [RuleDescription("$Default", TrueFilter()).to_json(),
             RuleDescription("red", SqlFilter("c = 'red'")).to_json(),
             RuleDescription("made-at-runtime", SqlFilter("n > 3")).to_json()]
    overrides = KeyOverrides().with_override(None, KeyOverride("sender", "send-key-2", None, "send-key", None))
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TABLE rules")
    raw.execute("PRAGMA user_version = 5")
    raw.executemany("INSERT INTO entities (path, kind, properties) VALUES (?, ?, ?)", [
        ("news", "topic", json.dumps(TopicProperties().to_json())),
        (SUB, "subscription", json.dumps({"Properties": SubscriptionProperties().to_json(), "Rules": rules})),
        ("$entitytimes", "entity-times", json.dumps({"news": [1_700_000_000_000, 1_700_000_100_000],
                                                     SUB: [1_700_000_200_000, 1_700_000_300_000]})),
        ("$authorizationrules", "authorization-rules", json.dumps(overrides.to_json())),
    ])
    raw.close()

    async def run() -> tuple[list[str], tuple[int, int] | None, tuple[int, int] | None, dict[str, str]]:
        broker = build_broker(NAMESPACE, tmp_path)
        await broker.start("127.0.0.1", 0)
        try:
            sub, topic = broker.entity(SUB), broker.entity("news")
            assert sub is not None and topic is not None
            return ([r.name for r in sub.rules], broker.times_of(topic), broker.times_of(sub),
                    {r.key_name: r.primary_key for r in broker.authorization_rules})
        finally:
            await broker.stop()

    names, topic_times, sub_times, keys = asyncio.run(run())
    assert names == ["$Default", "red", "made-at-runtime"]
    assert topic_times == (1_700_000_000_000, 1_700_000_100_000)
    assert sub_times == (1_700_000_200_000, 1_700_000_300_000)
    assert keys == {"root": "root-key", "sender": "send-key-2"}
    # And again, from the migrated file.
    names, topic_times, sub_times, keys = asyncio.run(run())
    assert names == ["$Default", "red", "made-at-runtime"]
    assert (topic_times, sub_times) == ((1_700_000_000_000, 1_700_000_100_000), (1_700_000_200_000, 1_700_000_300_000))
    assert keys == {"root": "root-key", "sender": "send-key-2"}
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (6,)
        paths = sorted(p for (p,) in raw.execute("SELECT path FROM entities"))
        assert paths == ["$authorizationrules/$namespace/sender", "$entitytimes/news", f"$entitytimes/{SUB}",
                         "news", SUB]
    finally:
        raw.close()
