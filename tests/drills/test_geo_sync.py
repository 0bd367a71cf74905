"""Geo-replication with synchronous replication to the secondary, and a primary site with a local
standby of its own.

Site ``a`` is two servers (``n0`` primary, ``n1`` its local standby, named together in a multi-host
URL); site ``b`` is ``n2``, a streaming standby of ``a`` that every commit of ``a`` waits for
(``synchronous_standby_names = 'n2'``). Under the official SDK's load through HAProxy:

1. ``a`` fails over locally (``kill -9`` of ``n0``, ``n1`` promoted): ``b``'s replica follows the new
   timeline and stays the secondary; ``a``'s node serves again on ``n1`` (restarted on it: a
   node's store URL names one host until multi-host URLs are built);
2. the whole of site ``a`` dies (``kill -9`` of ``n1`` and of ``a``'s node) and ``b`` is promoted
   forced: with synchronous replication nothing acknowledged is lost.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import write_config

from drills.geo_sites import HAPROXY, QUEUE, GeoNode, HaProxy, Load, geo, wait_until

pg_cluster = pytest.importorskip("pg_cluster")


def cluster_database(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


@pytest.fixture
def sync_sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, str, GeoNode, GeoNode, HaProxy]]:
    if not Path(HAPROXY).exists():
        pytest.skip("haproxy is not installed (scripts/test installs the Debian package)")
    try:
        cluster = pg_cluster.PgCluster(standbys=2, extra_settings={"synchronous_standby_names": "'n2'"}).start()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    base = tmp_path_factory.mktemp("geo-sync")
    config = write_config(base / "Config.json", [{"Name": QUEUE, "Properties": {"LockDuration": "PT5S"}}])
    nodes: list[GeoNode] = []
    proxy: HaProxy | None = None
    try:
        name = cluster.create_database("geosync")
        n0, n1, n2 = cluster.nodes
        url_a = cluster.url(name, nodes=[n0, n1])  # the primary site: whichever of its servers is writable
        url_b = n2.dsn(name)
        # a's node on n0 alone: a node's --store takes one host here (multi-host store URLs are the
        # PostgreSQL high-availability work's); after a's local failover the test moves it to n1.
        a = GeoNode(base, config, "a", n0.dsn(name), "b", url_b)
        nodes.append(a)
        a.start()
        a.wait_role("primary")
        b = GeoNode(base, config, "b", url_b, "a", url_a)
        nodes.append(b)
        b.start()
        b.wait_role("secondary")
        proxy = HaProxy([a, b]).start()
        yield cluster, url_a, url_b, a, b, proxy
    finally:
        for node in nodes:
            node.stop()
        if proxy is not None:
            proxy.stop()
        cluster.stop()


@pytest.mark.timeout(420)
def test_local_failover_is_followed_and_a_forced_promotion_loses_nothing_when_synchronous(
        sync_sites: tuple[Any, str, str, GeoNode, GeoNode, HaProxy]) -> None:
    cluster, url_a, url_b, a, b, proxy = sync_sites
    n0, n1, n2 = cluster.nodes
    sites = ["--site", f"a={url_a}", "--site", f"b={url_b}"]
    load = Load(proxy.connection_string())
    load.start()
    try:
        wait_until(lambda: load.acked_count() >= 50, "the first sends through HAProxy")
        [secondary] = [s for s in geo("status", *sites)["sites"] if s["site"] == "b"]
        assert secondary["role"] == "secondary" and secondary["lag"]["mode"] == "synchronous"

        # 1. a's own failover, the load paused (a local promoter picks the standby with everything).
        load.sending.clear()
        time.sleep(1.5)
        cluster.kill(n0)
        cluster.promote(n1)
        cluster.follow(n2, n1)
        wait_until(lambda: n2.timeline() == 2 or bool(n2.query(
            "SELECT received_tli = 2 FROM pg_stat_wal_receiver WHERE status = 'streaming'")), "b to follow timeline 2")
        a.stop()
        a.extra_args[1] = n1.dsn(cluster_database(url_b))
        a.start()
        a.wait_role("primary")
        load.sending.set()
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 50, "sends to a's new primary", timeout=90)
        status = {s["site"]: s for s in geo("status", *sites)["sites"]}
        assert status["a"]["role"] == "primary" and status["a"]["database"]["timeline"] == 2
        assert status["b"]["role"] == "secondary" and status["b"]["database"]["timeline"] == 2
        assert status["b"]["lag"]["mode"] == "synchronous"
        assert b.health()[1]["role"] == "secondary"

        # 2. The whole of site a dies; b is promoted forced.
        time.sleep(2)
        cluster.kill(n1)
        a.kill()
        killed = time.time()
        report = geo("promote", "b", "--forced", *sites)
        assert report["mode"] == "forced" and report["lsn"]
        cluster.set_synchronous(n2, "")  # no standby left: what a promoter does while one is rebuilt
        b.wait_role("primary")
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 50, "sends through HAProxy to site b", timeout=90)
        pause = load.longest_send_pause(killed - 1, time.time())
        load.sending.clear()
        time.sleep(1)
        with load.lock:
            acked = dict(load.acked)

        def drained() -> bool:
            with load.lock:
                seen = {body for body, _, _ in load.received}
                last = max((t for _, _, t in load.received), default=0)
            return set(acked) <= seen and time.time() - last > 2

        wait_until(drained, "every acknowledged message to be received", timeout=90)
    finally:
        load.finish()
    with load.lock:
        seen = {body for body, _, _ in load.received}
    lost = [body for body in acked if body not in seen]
    figures = {"acked": len(acked), "lost": len(lost), "forced_pause_s": round(pause, 2), "bound": report["lsn"],
               "forced_promotion_s": round(report["seconds"], 2)}
    print("geo sync drill:", json.dumps(figures))
    if os.environ.get("SODALITE_DRILL_FIGURES"):  # docs/benchmarks.md
        Path(os.environ["SODALITE_DRILL_FIGURES"] + ".sync").write_text(json.dumps(figures, indent=2) + "\n")
    assert lost == []
