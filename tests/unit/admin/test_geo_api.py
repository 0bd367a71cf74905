"""Geo-replication on the management API: /api/v1/geo (Manage), /health with the node's role, and
the 503 server-busy every other request gets while the node does not serve. An in-process broker
on a memory store behind the application the CLI serves; the node's role is set by the test (the
decision itself is tests/unit/model/test_geo.py's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sodalite.admin import api, console
from sodalite.admin.control import ControlPlane
from sodalite.admin.http import application
from sodalite.cli.control_bridge import BrokerControl
from sodalite.cli.geo_node import GeoNode, Peer, management_gate
from sodalite.cli.key_bridge import BrokerKeys
from sodalite.model import sas
from sodalite.model.authorization import AccessRights, AuthorizationRule
from sodalite.model.config import NamespaceConfig, QueueConfig
from sodalite.model.geo import Role, RoleDecision
from sodalite.server.broker import Broker
from sodalite.store.memory import MemoryStore

KEY = "Z2VvLWtleS1mb3ItdGhlLWpzb24tYXBpLXRlc3Rz"
NAMESPACE = NamespaceConfig("geons", authorization_rules=(
    AuthorizationRule("admin", KEY), AuthorizationRule("listener", KEY, rights=frozenset({AccessRights.LISTEN}))),
    queues=(QueueConfig("orders"),))


def bearer(key_name: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + sas.generate_token("sb://localhost/", key_name, KEY, int(time.time()) + 600)}


class Promotions(GeoNode):
    """The node with its promotion recorded instead of run (no databases here)."""

    promoted: list[tuple[str, str]]

    async def promote(self, site: str, mode: str) -> dict[str, Any]:
        self.promoted.append((site, mode))
        return {"site": site, "mode": mode}


@asynccontextmanager
async def running(geo: bool = True) -> AsyncIterator[tuple[TestClient[web.Request, web.Application], GeoNode]]:
    broker = Broker(NAMESPACE, MemoryStore())
    await broker.start("127.0.0.1", 0)
    keys = BrokerKeys(broker, "127.0.0.1")
    control = ControlPlane(BrokerControl(broker, int(time.time() * 1000), keys), broker.namespace.name)
    node = Promotions("east", "postgresql://127.0.0.1:1/east", Peer("west", "postgresql://127.0.0.1:1/west"),
                      "geons")
    node.promoted = []
    node.ready = True  # the broker has started

    def faces(app: web.Application) -> None:
        api.add_routes(app, control)
        console.add_routes(app)

    app = application(control, keys=keys, faces=faces)
    if geo:
        control.geo = node
        app.middlewares.append(management_gate(node))
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        yield client, node
    finally:
        await client.close()
        await broker.stop()


def run(test: Callable[[TestClient[web.Request, web.Application], GeoNode], Awaitable[None]], geo: bool = True) -> None:
    async def main() -> None:
        async with running(geo) as (client, node):
            await test(client, node)

    asyncio.run(main())


def test_health_answers_the_role_200_only_for_the_primary() -> None:
    async def test(client: TestClient[web.Request, web.Application], node: GeoNode) -> None:
        node.decision = RoleDecision(Role.SECONDARY, "this site's database is a standby (in recovery)")
        response = await client.get("/health")
        assert response.status == 503
        body = await response.json()
        assert body["role"] == "secondary" and body["site"] == "east" and "timeline" in body and "lsn" in body
        node.decision = RoleDecision(Role.PRIMARY, "this site's database is the primary")
        response = await client.get("/health")
        assert response.status == 200 and (await response.json())["role"] == "primary"

    run(test)


def test_a_node_that_does_not_serve_answers_503_server_busy_but_for_the_geo_routes() -> None:
    async def test(client: TestClient[web.Request, web.Application], node: GeoNode) -> None:
        node.decision = RoleDecision(Role.FENCED, "the namespace's primary is site 'west'")
        atom = await client.get("/$Resources/queues", headers={"Authorization": bearer("admin")["Authorization"]
                                                               .removeprefix("Bearer ")})
        assert atom.status == 503 and "is fenced" in await atom.text()
        listed = await client.get("/api/v1/entities", headers=bearer("admin"))
        assert listed.status == 503
        error = (await listed.json())["error"]
        assert error["condition"] == "com.microsoft:server-busy" and "west" in error["message"]
        promoted = await client.post("/api/v1/geo/promote", json={"site": "east", "mode": "forced"},
                                     headers=bearer("admin"))
        assert promoted.status == 200 and node.promoted == [("east", "forced")]  # type: ignore[attr-defined]
        node.decision = RoleDecision(Role.PRIMARY, "this site's database is the primary")
        assert (await client.get("/api/v1/entities", headers=bearer("admin"))).status == 200

    run(test)


def test_promote_needs_manage_and_says_what_is_wrong() -> None:
    async def test(client: TestClient[web.Request, web.Application], node: GeoNode) -> None:
        refused = await client.post("/api/v1/geo/promote", json={"site": "east", "mode": "forced"},
                                    headers=bearer("listener"))
        assert refused.status in (401, 403)
        bad = await client.post("/api/v1/geo/promote", json={"site": "east", "mode": "soon"}, headers=bearer("admin"))
        assert bad.status == 400 and "planned" in (await bad.json())["error"]["message"]
        missing = await client.post("/api/v1/geo/promote", json={"mode": "planned"}, headers=bearer("admin"))
        assert missing.status == 400
        assert node.promoted == []  # type: ignore[attr-defined]

    run(test)


def test_without_geo_the_routes_say_so() -> None:
    async def test(client: TestClient[web.Request, web.Application], node: GeoNode) -> None:
        response = await client.get("/api/v1/geo", headers=bearer("admin"))
        assert response.status == 404 and "--geo-site" in (await response.json())["error"]["message"]
        assert (await client.get("/health")).status == 200  # the plain probe is unchanged

    run(test, geo=False)
