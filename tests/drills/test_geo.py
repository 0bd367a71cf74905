"""The geo-replication drill: two sites under the official SDK's load through one address (HAProxy).

Site ``a`` is a PostgreSQL primary and a broker node; site ``b`` is a streaming standby of it and a
broker node (started with ``--geo-site``/``--geo-peer``, as docs/geo-replication.md says). HAProxy
checks each node's ``/health`` and forwards AMQP to the one answering 200. Senders and a PeekLock
receiver (azure-servicebus, sync) run through HAProxy the whole time, while the drill:

1. promotes ``b`` planned (``sodalite geo promote b --planned``): nothing lost, nothing completed
   delivered again; the longest pause between two acknowledged sends is measured;
2. rejoins ``a`` as ``b``'s standby (pg_rewind) and sees its node become ``secondary``;
3. cuts ``b``'s replication to ``a`` (asynchronous: ``b`` acknowledges sends ``a`` never gets), then
   ``kill -9``s ``b``'s database and node and promotes ``a`` forced: what was lost was all
   acknowledged after the reported bound, and the sequence numbers moved past anything ``b`` gave;
4. restarts ``b``'s database as a primary before any rewind (its node is fenced: ``a`` is at a higher
   epoch), rewinds it as ``a``'s standby (its node becomes ``secondary``);
5. promotes ``b`` back, planned.

Figures (printed, and in docs/benchmarks.md): messages acknowledged, lost, completed then delivered
again, duplicates, the client pause of each promotion.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusConnectionError
from broker_process import KEY, KEY_NAME, ROOT, write_config

from drills.geo_sites import HAPROXY, QUEUE, SODALITE, GeoNode, HaProxy, Load, geo, wait_until
from sodalite.model import sas

pg_cluster = pytest.importorskip("pg_cluster")



@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, GeoNode, GeoNode, HaProxy]]:
    if not Path(HAPROXY).exists():
        pytest.skip("haproxy is not installed (scripts/test installs the Debian package)")
    try:
        # Asynchronous replication between the sites (what a geo pair runs: a commit does not wait
        # for the other region), so a forced promotion can lose something, within the bound.
        cluster = pg_cluster.PgCluster(standbys=1, extra_settings={"synchronous_standby_names": "''"}).start()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    base = tmp_path_factory.mktemp("geo")
    config = write_config(base / "Config.json", [{"Name": QUEUE, "Properties": {"LockDuration": "PT5S"}}])
    nodes: list[GeoNode] = []
    proxy: HaProxy | None = None
    try:
        name = cluster.create_database("geo")
        db_a, db_b = cluster.nodes
        a = GeoNode(base, config, "a", db_a.dsn(name), "b", db_b.dsn(name))
        nodes.append(a)
        a.start()
        a.wait_role("primary")
        b = GeoNode(base, config, "b", db_b.dsn(name), "a", db_a.dsn(name))
        nodes.append(b)
        b.start()
        b.wait_role("secondary")
        proxy = HaProxy([a, b]).start()
        yield cluster, name, a, b, proxy
    finally:
        for node in nodes:
            node.stop()
        if proxy is not None:
            proxy.stop()
        cluster.stop()


def test_promotion_refusals_change_nothing(sites: tuple[Any, str, GeoNode, GeoNode, HaProxy],
                                           tmp_path: Path) -> None:
    """Promoting the primary, and a planned promotion while the primary is unreachable, are refused
    with a clear message; nothing changes. (Runs first: site a primary, b its standby.)"""
    _cluster, name, a, b, _ = sites
    primary = next(n for n in (a, b) if n.health()[0] == 200)
    secondary = b if primary is a else a
    urls = {n.site: n.extra_args[1] for n in (a, b)}
    args = ["--site", f"a={urls['a']}", "--site", f"b={urls['b']}"]
    done = subprocess.run([*SODALITE, "geo", "promote", primary.site, "--planned", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "already a primary" in done.stderr and "nothing was changed" in done.stderr
    unreachable = f"postgresql://postgres@127.0.0.1:1/{name}"
    other = {primary.site: unreachable, secondary.site: urls[secondary.site]}
    done = subprocess.run([*SODALITE, "geo", "promote", secondary.site, "--planned",
                           "--site", f"a={other['a']}", "--site", f"b={other['b']}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "--forced" in done.stderr and "nothing was changed" in done.stderr
    assert primary.health()[0] == 200 and secondary.health()[1]["role"] == "secondary"

    # A client dialling the secondary's node itself (not through HAProxy) is refused with server-busy,
    # at its connection's open (the SDK reports a connection error, which it retries).
    with ServiceBusClient.from_connection_string(secondary.connection_string_with(), retry_total=0) as client, \
            pytest.raises(ServiceBusConnectionError, match=r"com\.microsoft:server-busy"), \
            client.get_queue_sender(QUEUE) as sender:
        sender.send_messages(ServiceBusMessage("refused"))

    # The same status on either node's management API (the console's Geo panel reads it), and the lag
    # with the replication mode in Prometheus /metrics.
    token = sas.generate_token("sb://localhost/", KEY_NAME, KEY, int(time.time()) + 600)
    for node in (primary, secondary):
        request = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api/v1/geo",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            status = json.loads(response.read())
        roles = {s["site"]: s["role"] for s in status["sites"]}
        assert roles == {primary.site: "primary", secondary.site: "secondary"}, status
        [lagging] = [s for s in status["sites"] if s["site"] == secondary.site]
        assert lagging["lag"]["mode"] == "asynchronous" and lagging["lag"]["bytes"] is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{primary.http_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    series = f'{{mode="asynchronous",namespace="sbemulatorns",secondary="{secondary.site}"}}'
    assert f"sodalite_geo_replication_lag_bytes{series}" in metrics, [x for x in metrics.splitlines() if "geo" in x]
    assert f"sodalite_geo_replication_lag_seconds{series}" in metrics
    assert f'sodalite_geo_role{{namespace="sbemulatorns",role="primary",site="{primary.site}"}} 1.0' in metrics


@pytest.mark.timeout(480)
def test_geo_drill(sites: tuple[Any, str, GeoNode, GeoNode, HaProxy]) -> None:
    cluster, name, a, b, proxy = sites
    db_a, db_b = cluster.nodes
    site_args = ["--site", f"a={db_a.dsn(name)}", "--site", f"b={db_b.dsn(name)}"]
    figures: dict[str, Any] = {}
    load = Load(proxy.connection_string())
    load.start()
    try:
        wait_until(lambda: load.acked_count() >= 50, "the first sends through HAProxy")
        status = geo("status", *site_args)
        roles = {s["site"]: s["role"] for s in status["sites"]}
        assert roles == {"a": "primary", "b": "secondary"}
        [secondary] = [s for s in status["sites"] if s["site"] == "b"]
        assert secondary["lag"]["bytes"] is not None and secondary["lastReplayedLsn"]

        # 1. Planned: a -> b, under load.
        time.sleep(2)
        started = time.time()
        report = geo("promote", "b", "--planned", *site_args)
        assert report["site"] == "b" and report["mode"] == "planned" and report["old_primary_fenced"]
        b.wait_role("primary")
        assert a.health()[1]["role"] == "fenced" and a.health()[0] == 503
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 50, "sends through HAProxy to site b")
        figures["planned_pause_s"] = round(load.longest_send_pause(started - 1, time.time()), 2)
        figures["planned_promotion_s"] = round(report["seconds"], 2)

        # 2. a rejoins as b's standby.
        cluster.rewind(db_a, db_b)
        a.wait_role("secondary")

        # 3. b's replication to a is cut (what a partition between the regions does), b acknowledges
        # sends a never gets, then b's site dies: kill -9 of its database and node; a is promoted forced.
        db_a.query("ALTER SYSTEM SET primary_conninfo = ''")
        db_a.query("SELECT pg_reload_conf()")
        try:
            wait_until(lambda: not db_b.query("SELECT count(*) FROM pg_stat_replication")[0][0], "a to stop streaming",
                       timeout=20)
        except AssertionError:
            raise AssertionError(str(((db_a.data / "postgresql.auto.conf").read_text(),
                                      db_b.query("SELECT * FROM pg_stat_replication"),
                                      db_a.query("SHOW primary_conninfo"), db_a.log.read_text()[-3000:]))) from None
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 30, "sends a never receives")
        with load.lock:
            highest_on_b = max((seq for _, seq, _ in load.received), default=0)
        cluster.kill(db_b)
        b.kill()
        killed = time.time()
        report = geo("promote", "a", "--forced", *site_args)
        assert report["mode"] == "forced" and not report["old_primary_fenced"] and report["lsn"]
        bound = report["bound_time"]
        promoted = time.time()
        a.wait_role("primary")
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 50, "sends through HAProxy to site a")
        figures["forced_pause_s"] = round(load.longest_send_pause(killed - 1, time.time()), 2)
        figures["forced_bound"] = report["lsn"]
        figures["forced_promotion_s"] = round(report["seconds"], 2)

        # 4. b's database comes back as a primary, un-rewound: its node is fenced by a's higher epoch.
        cluster.start_as_primary(db_b)
        b.start()
        body = b.wait_role("fenced")
        assert "epoch" in body["reason"] or "'a'" in body["reason"], body
        assert b.health()[0] == 503
        cluster.rewind(db_b, db_a)
        b.wait_role("secondary")

        # 5. b is promoted back, planned.
        started = time.time()
        report = geo("promote", "b", "--planned", *site_args)
        b.wait_role("primary")
        a.wait_role("fenced")
        count = load.acked_count()
        wait_until(lambda: load.acked_count() >= count + 50, "sends through HAProxy to site b again")
        figures["planned_back_pause_s"] = round(load.longest_send_pause(started - 1, time.time()), 2)
        # Drain: everything acknowledged is received (or was lost in the forced promotion).
        load.sending.clear()
        time.sleep(1)
        with load.lock:
            acked = dict(load.acked)

        def drained() -> bool:
            with load.lock:
                seen = {body for body, _, _ in load.received}
            return all(body in seen or t > bound for body, t in acked.items()) and \
                time.time() - max((t for _, _, t in load.received), default=0) > 3

        wait_until(drained, "the receiver to drain the queue", timeout=90)
    finally:
        load.finish()
    with load.lock:
        seen = {body for body, _, _ in load.received}
        lost = {body: t for body, t in acked.items() if body not in seen}
        by_number: dict[int, set[str]] = {}
        for body, seq, _ in load.received:
            by_number.setdefault(seq, set()).add(body)
        redelivered = list(load.completed_then_delivered)
    figures.update(acked=len(acked), lost=len(lost), lost_after_bound=sum(1 for t in lost.values() if t > bound),
                   completed_then_delivered=len(redelivered), send_retries=load.send_errors,
                   duplicates=len(by_number) - len(seen))  # messages stored twice (a send retried)
    print("geo drill:", json.dumps(figures))
    if os.environ.get("SODALITE_DRILL_FIGURES"):  # where docs/benchmarks.md's figures come from
        Path(os.environ["SODALITE_DRILL_FIGURES"]).write_text(json.dumps(figures, indent=2) + "\n")
    # Nothing acknowledged before the forced promotion's bound is lost.
    assert all(t > bound for t in lost.values()), sorted(lost.items())[:5]
    # A number is never given to two messages, whatever the promotions lost.
    assert all(len(bodies) == 1 for bodies in by_number.values()), {k: v for k, v in by_number.items() if len(v) > 1}
    # The counters moved past what b gave before it died: sends acknowledged after the forced
    # promotion have numbers of the epoch after next.
    with load.lock:
        after_forced = [seq for body, seq, _ in load.received if acked.get(body, 0) > promoted]
    assert after_forced and min(after_forced) >= 2 << 32 > highest_on_b
    # Completed messages delivered again: only those whose completion b never replicated to a.
    assert all(load.completed[number] > bound for number in redelivered), redelivered[:5]
