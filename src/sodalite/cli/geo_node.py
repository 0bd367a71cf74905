"""A broker node in a geo-replicated namespace: its role, followed; its health; promotion on request.

Theory of operation. A node started with ``--geo-site NAME`` (and ``--geo-peer OTHER=URL``, the
other site's database) asks its own database and the other site's where they stand every
:data:`POLL_SECONDS` (:func:`sodalite.store.postgres.geo.probe`, in a thread) and decides its role with
:func:`sodalite.model.geo.decide_role`. Only a ``primary`` serves: until its first ``primary``
decision the node does not start its broker (it loads nothing from a standby), and a started node
that stops being primary takes its messaging stores out of service (the outage switch: partitions
answer ``com.microsoft:server-busy``, retryable) until it is primary again, when every partition
rebuilds itself from the store. The management API answers 503 meanwhile (``refusing``), except the
health endpoint, the metrics and the geo routes. The node follows its site's local failovers too:
a standby that switches timeline is still a standby, a primary's replacement is still the primary.

``GET /health`` answers 200 while the node serves as primary and 503 otherwise, with a JSON body
(role, reason, site, timeline, LSN, epoch): a TCP proxy's HTTP check (HAProxy ``option httpchk``)
sends clients to the primary site's nodes only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client.core import GaugeMetricFamily, Metric

from sodalite.errors import ArgumentError, ServerBusy
from sodalite.model.geo import PromotionMode, Role, RoleDecision, decide_role
from sodalite.server.broker import Broker
from sodalite.server.metrics import ScrapeTimeCollector
from sodalite.store.postgres import geo as pg_geo

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 0.5


@dataclass(frozen=True, slots=True)
class Peer:
    site: str
    url: str


def parse_peer(text: str) -> Peer:
    """``NAME=postgresql://...`` (the --geo-peer and --site options)."""
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise ArgumentError(f"{text!r}: give a site as NAME=postgresql://host:5432/database")
    if not url.startswith(("postgresql://", "postgres://")):
        raise ArgumentError(f"site '{name}': {url!r} is not a PostgreSQL URL (postgresql://host:5432/database)")
    return Peer(name.strip(), url.strip())


class GeoNode:
    """One node's view of the two sites (see the module docstring)."""

    def __init__(self, site: str, url: str, peer: Peer | None, namespace: str, *,
                 poll_seconds: float = POLL_SECONDS) -> None:
        if peer is not None and peer.site == site:
            raise ArgumentError(f"--geo-peer names this node's own site '{site}': name the other site")
        self.site = site
        self.url = url
        self.peer = peer
        self.namespace = namespace
        self.poll_seconds = poll_seconds
        self.local = pg_geo.SiteStatus(pg_geo.redact(url), False, error="not asked yet")
        self.remote: pg_geo.SiteStatus | None = None
        self.decision = RoleDecision(Role.UNREACHABLE, "not asked yet")
        self.ready = False  # the broker has started (a primary's first moments: loading, not listening yet)
        self._promoting = asyncio.Lock()

    # -- following ----------------------------------------------------------------------------------

    async def check(self) -> RoleDecision:
        """Ask both databases once and decide."""
        self.local = await asyncio.to_thread(pg_geo.probe, self.url)
        if self.peer is not None:
            self.remote = await asyncio.to_thread(pg_geo.probe, self.peer.url)
        decision = decide_role(self.site, self.local.view(), None if self.remote is None else self.remote.view())
        if decision.claim:
            await asyncio.to_thread(pg_geo.claim, self.url, self.site)
            log.info("geo: site '%s' recorded as the namespace's first primary", self.site)
        if decision.role is not self.decision.role:
            log.warning("geo: this node (site '%s') is now %s: %s", self.site, decision.role.value, decision.reason)
        self.decision = decision
        return decision

    async def follow(self, apply: Callable[[RoleDecision], Awaitable[None]]) -> None:
        """Check forever; call ``apply`` when the role changes (and once at the start)."""
        last: Role | None = None
        while True:
            try:
                decision = await self.check()
            except Exception:  # a probe that fails unexpectedly must not end the following
                log.exception("geo: checking the sites failed")
                decision = RoleDecision(Role.UNREACHABLE, "checking the sites failed")
                self.decision = decision
            if decision.role is not last:
                last = decision.role
                await apply(decision)
            await asyncio.sleep(self.poll_seconds)

    @property
    def serving(self) -> bool:
        """Serving clients: the primary's role, and the broker started."""
        return self.decision.serving and self.ready

    # -- what it shows ----------------------------------------------------------------------------

    def health(self) -> tuple[int, dict[str, Any]]:
        body = {"role": self.decision.role.value, "reason": self.decision.reason, "site": self.site,
                "timeline": self.local.timeline, "lsn": self.local.lsn, "epoch": self.local.epoch,
                "inRecovery": self.local.in_recovery, "ready": self.ready}
        return (200 if self.serving else 503), body

    def lag(self) -> pg_geo.Lag | None:
        """The secondary's lag behind the primary, from the last check (None without a peer)."""
        if self.remote is None or self.peer is None:
            return None
        if self.local.reachable and not self.local.in_recovery:
            return pg_geo.lag(self.local, self.remote, self.peer.site)
        return pg_geo.lag(self.remote, self.local, self.site)

    def status(self) -> dict[str, Any]:
        """Both sites: role, database state, and the replication lag (``sodalite geo status``)."""
        sites = [(self.site, self.local, self.remote)]
        if self.peer is not None and self.remote is not None:
            sites.append((self.peer.site, self.remote, self.local))
        return site_report(self.namespace, sites)

    # -- promotion ----------------------------------------------------------------------------------

    async def promote(self, site: str, mode: str) -> dict[str, Any]:
        """Promote ``site`` (this node's or its peer's), planned or forced."""
        try:
            wanted = PromotionMode(mode)
        except ValueError:
            raise ArgumentError(f"mode: 'planned' or 'forced', got {mode!r}") from None
        if self.peer is None:
            raise ArgumentError("this node has no --geo-peer: it knows no other site to promote from")
        if site == self.site:
            target, other = (self.site, self.url), (self.peer.site, self.peer.url)
        elif site == self.peer.site:
            target, other = (self.peer.site, self.peer.url), (self.site, self.url)
        else:
            raise ArgumentError(f"there is no site '{site}' (sites: '{self.site}', '{self.peer.site}')")
        if self._promoting.locked():
            raise ArgumentError("a promotion is already under way on this node")
        async with self._promoting:
            report = await asyncio.to_thread(pg_geo.promote, wanted, target[0], target[1], other[0], other[1])
        log.warning("geo: site '%s' promoted (%s, epoch %d, LSN %s)", report.site, report.mode, report.epoch,
                    report.lsn)
        return report.to_json()


def site_report(namespace: str, sites: list[tuple[str, pg_geo.SiteStatus, pg_geo.SiteStatus | None]]) -> dict[str, Any]:
    """The status document of :meth:`GeoNode.status` and ``sodalite geo status``: each site's role
    (as its nodes decide it), its database, and the lag of the secondary behind the primary."""
    out: list[dict[str, Any]] = []
    primary = next(((name, s) for name, s, _ in sites if s.reachable and not s.in_recovery
                    and s.primary_site == name), None)
    for name, status, other in sites:
        decision = decide_role(name, status.view(), None if other is None else other.view())
        entry: dict[str, Any] = {"site": name, "role": decision.role.value, "reason": decision.reason,
                                 "database": status.to_json()}
        if status.in_recovery and primary is not None:
            lag = pg_geo.lag(primary[1], status, name)
            entry["lag"] = {"bytes": lag.bytes, "seconds": lag.seconds, "mode": lag.mode}
            entry["lastReplayedLsn"] = status.lsn
            entry["lastReplayedTime"] = status.last_replay_time
        out.append(entry)
    return {"namespace": namespace, "checkedAt": time.time(), "sites": out}


class GeoCollector(ScrapeTimeCollector):
    """Prometheus gauges of a geo node: its role, and the secondary's lag with the replication mode."""

    def __init__(self, node: GeoNode) -> None:
        self.node = node

    def collect(self) -> Iterable[Metric]:
        role, lag_bytes, lag_seconds, epoch = self._families()
        node = self.node
        for each in Role:
            role.add_metric([node.namespace, node.site, each.value], 1.0 if node.decision.role is each else 0.0)
        lag = node.lag()
        secondary = node.site if node.local.in_recovery else (node.peer.site if node.peer is not None else "")
        if lag is not None and lag.bytes is not None:
            lag_bytes.add_metric([node.namespace, secondary, lag.mode], lag.bytes)
        if lag is not None and lag.seconds is not None:
            lag_seconds.add_metric([node.namespace, secondary, lag.mode], lag.seconds)
        epoch.add_metric([node.namespace], node.local.epoch)
        return [role, lag_bytes, lag_seconds, epoch]

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("sodalite_geo_role", "1 for this node's geo role (primary, secondary, fenced, "
                              "unreachable), 0 for the others", labels=["namespace", "site", "role"]),
            GaugeMetricFamily("sodalite_geo_replication_lag_bytes", "WAL bytes the secondary site has not replayed",
                              labels=["namespace", "secondary", "mode"]),
            GaugeMetricFamily("sodalite_geo_replication_lag_seconds", "How far behind the secondary site's replay is",
                              labels=["namespace", "secondary", "mode"]),
            GaugeMetricFamily("sodalite_geo_epoch", "Promotions so far (the geo record's epoch)", labels=["namespace"]),
        ]


class GeoGate:
    """What a node's role changes do to its broker: the first ``primary`` lets it start
    (:attr:`primary`); later, not serving takes its messaging stores out of service (partitions
    answer server-busy) and serving again brings them back."""

    def __init__(self, broker: Broker, site: str) -> None:
        self.broker = broker
        self.site = site
        self.stand_in: Broker | None = None  # what answers on the AMQP port before the broker starts
        self.primary = asyncio.Event()
        self.started = False
        self._taken: list[str] = []  # the stores this gate took offline (an operator's own switch is kept)

    async def apply(self, decision: RoleDecision) -> None:
        for each in (self.broker, self.stand_in):
            if each is not None:
                each.refusal = None if decision.serving else refusal(self.site, decision)
        if decision.serving:
            self.primary.set()
            if self.started:
                for name in self._taken:
                    self.broker.set_store_online(name, True)
                self._taken.clear()
            return
        if self.started:
            for worker in self.broker.workers:
                if not worker.offline:
                    self.broker.set_store_online(worker.name, False)
                    self._taken.append(worker.name)

    async def broker_started(self, node: GeoNode) -> None:
        self.started = True
        await self.apply(node.decision)
        node.ready = True


def refusal(site: str, decision: RoleDecision) -> ServerBusy:
    return ServerBusy(f"this node (site '{site}') is {decision.role.value}: {decision.reason}; "
                      "the namespace's primary site serves")


async def refusing_listener(namespace: str, host: str, port: int, node: GeoNode, *,
                            tls: ssl.SSLContext | None = None, tls_port: int = -1) -> Broker:
    """What answers on the AMQP ports (amqp, and amqps with ``tls``) while the node waits to be the
    primary: a broker with nothing loaded (no store of the site's is touched) that closes every
    connection at its open with server-busy, which the SDKs retry. Stopped when the real broker
    takes the ports."""
    from sodalite.model.config import NamespaceConfig
    from sodalite.store.memory import MemoryStore

    stand_in = Broker(NamespaceConfig(namespace), MemoryStore(), node_id="geo-waiting")
    stand_in.refusal = refusal(node.site, node.decision)
    await stand_in.start(host, port, tls=tls, tls_port=tls_port)
    return stand_in


# Paths a node answers whatever its role: probes, metrics, the geo routes and the console's login.
ALWAYS_SERVED: Final = ("/health", "/metrics", "/api/v1/geo", "/api/v1/login", "/api/v1/logout", "/api/v1/session",
                        "/api/v1/openapi.json", "/console")


def management_gate(node: GeoNode) -> Middleware:
    """The management app's middleware: ``GET /health`` answered with the node's role (200 primary,
    503 otherwise, JSON); every other request refused with 503 server-busy while the node does not
    serve, but for :data:`ALWAYS_SERVED`."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/health" and request.method in ("GET", "HEAD"):
            status, body = node.health()
            return web.json_response(body, status=status)
        if not node.serving and not request.path.startswith(ALWAYS_SERVED):
            raise refusal(node.site, node.decision)
        return await handler(request)

    return gate
