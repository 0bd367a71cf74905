"""The control plane's JSON API (/api/v1) over a real in-process broker: rights, login, errors, operations.

The broker runs on memory stores behind the same aiohttp application the CLI serves (ATOM API,
JSON API, console); only the login's clock is a fake one, so an expired login needs no waiting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from peek_lock_taker import Taker
from sodalite.admin import api, atom, console
from sodalite.admin.control import ControlPlane
from sodalite.admin.http import application
from sodalite.cli.control_bridge import BrokerControl
from sodalite.cli.key_bridge import BrokerKeys
from sodalite.model import sas
from sodalite.model.authorization import AccessRights, AuthorizationRule
from sodalite.model.config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import QueueProperties
from sodalite.server.broker import Broker
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_settings import SubQueue
from sodalite.store.memory import MemoryStore

KEY = "c2VjcmV0LWtleS1mb3ItdGhlLWpzb24tYXBpLXRlc3Rz"
RULES = (
    AuthorizationRule("admin", KEY),
    AuthorizationRule("listener", KEY, rights=frozenset({AccessRights.LISTEN})),
    AuthorizationRule("sender", KEY, rights=frozenset({AccessRights.SEND})),
    AuthorizationRule("sendlisten", KEY, rights=frozenset({AccessRights.SEND, AccessRights.LISTEN})),
)
NAMESPACE = NamespaceConfig(
    "consolens", authorization_rules=RULES,
    queues=(QueueConfig("orders"), QueueConfig("parking"),
            QueueConfig("sessions", QueueProperties(requires_session=True))),
    topics=(TopicConfig("events", subscriptions=(SubscriptionConfig("audit"),)),),
)


def token(key_name: str, key: str = KEY, expiry: int | None = None) -> str:
    return sas.generate_token("sb://localhost/", key_name, key, expiry or int(time.time()) + 600)


def bearer(key_name: str, **kwargs: Any) -> dict[str, str]:
    return {"Authorization": "Bearer " + token(key_name, **kwargs)}


ADMIN = bearer("admin")


@dataclass
class Env:
    client: TestClient[web.Request, web.Application]
    broker: Broker
    now: list[float]


@asynccontextmanager
async def running() -> AsyncIterator[Env]:
    broker = Broker(NAMESPACE, MemoryStore())
    await broker.start("127.0.0.1", 0)
    now = [time.time()]
    keys = BrokerKeys(broker, "127.0.0.1")
    control = ControlPlane(BrokerControl(broker, int(time.time() * 1000), keys), broker.namespace.name,
                           sku=broker.namespace.sku,
                           max_message_size_in_kilobytes=broker.namespace.max_message_size_in_kilobytes)

    def faces(app: web.Application) -> None:
        api.add_routes(app, control, api.Sessions(clock=lambda: now[0]))
        console.add_routes(app)

    app = application(control, keys=keys, faces=faces)
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        yield Env(client, broker, now)
    finally:
        await client.close()
        await broker.stop()


def run(test: Callable[[Env], Awaitable[None]]) -> None:
    async def main() -> None:
        async with running() as env:
            await test(env)

    asyncio.run(main())


async def send(env: Env, path: str, body: dict[str, Any], headers: dict[str, str] = ADMIN) -> None:
    response = await env.client.post(f"/api/v1/entities/{path}/$send", json=body, headers=headers)
    assert response.status == 201, await response.text()


async def dead_letter_everything(env: Env, path: str) -> None:
    """What a receiver would do with the SDK: lock each message and dead-letter it."""
    entity = env.broker.entity(path)
    assert entity is not None and isinstance(entity.actor, CoreActor)
    actor = entity.actor
    count = len(await actor.peek(SubQueue.MAIN, 0, 1000))
    taker = Taker(count)
    actor.add_consumer(taker)
    for _ in range(3000):  # 30 s at most: a PeekLock delivery comes after its claim committed
        if len(taker.locks) == count:
            break
        await asyncio.sleep(0.01)
    assert len(taker.locks) == count
    for lock in taker.locks:
        await actor.dead_letter(lock.token, "Broken", "could not be processed")
    actor.remove_consumer(taker)


async def counted(env: Env, path: str, name: str, value: int) -> None:
    """Wait (30 s at most) until the entity's ``name`` count is ``value``: a partition core's counts
    follow the rows that left it through another sub-queue's core once it is told."""
    entity = env.broker.entity(path)
    assert entity is not None
    for _ in range(3000):
        if entity.actor.counts()[name] == value:
            return
        await asyncio.sleep(0.01)


async def error_of(response: Any) -> dict[str, Any]:
    body = await response.json()
    assert set(body["error"]) >= {"code", "message", "condition", "status", "trackingId"}
    assert body["error"]["status"] == response.status
    return dict(body["error"])


# ---- rights: every operation with its right missing once -------------------------------------------------

# (method, path, body, the right it needs); a move needs Listen on the source and Send on the target.
OPERATIONS: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/api/v1/namespace", None, "Manage"),
    ("GET", "/api/v1/entities", None, "Manage"),
    ("POST", "/api/v1/entities", {"kind": "queue", "path": "newq"}, "Manage"),
    ("GET", "/api/v1/entities/orders", None, "Manage"),
    ("PUT", "/api/v1/entities/orders", {"properties": {}}, "Manage"),
    ("DELETE", "/api/v1/entities/parking", None, "Manage"),
    ("GET", "/api/v1/entities/events/subscriptions/audit/$rules", None, "Manage"),
    ("POST", "/api/v1/entities/events/subscriptions/audit/$rules",
     {"rule": {"Name": "r2", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}}, "Manage"),
    ("DELETE", "/api/v1/entities/events/subscriptions/audit/$rules/$Default", None, "Manage"),
    ("GET", "/api/v1/keys", None, "Manage"),
    ("POST", "/api/v1/keys/regenerate", {"keyName": "sender", "keyType": "SecondaryKey"}, "Manage"),
    ("GET", "/api/v1/stores", None, "Manage"),
    ("POST", "/api/v1/stores/default/online", None, "Manage"),
    ("GET", "/api/v1/entities/orders/$messages", None, "Listen"),
    ("GET", "/api/v1/entities/orders/$messages/1", None, "Listen"),
    ("POST", "/api/v1/entities/orders/$purge", {}, "Listen"),
    ("POST", "/api/v1/entities/orders/$send", {"body": "x"}, "Send"),
    ("POST", "/api/v1/entities/orders/$cancel-scheduled", {"sequenceNumbers": [1]}, "Send"),
    ("POST", "/api/v1/entities/orders/$move", {"all": True, "subQueue": "deadletter", "target": "parking"},
     "Listen+Send"),
]
_LACKING = {"Manage": ["sendlisten"], "Listen": ["sender"], "Send": ["listener"], "Listen+Send": ["listener", "sender"]}


def test_every_operation_refuses_no_token_a_bad_one_and_one_lacking_its_right() -> None:
    async def test(env: Env) -> None:
        for method, path, body, right in OPERATIONS:
            response = await env.client.request(method, path, json=body)
            assert response.status == 401, (method, path)
            assert (await error_of(response))["code"] == "Unauthorized"
            response = await env.client.request(method, path, json=body, headers=bearer("admin", key="d3Jvbmc="))
            assert response.status == 401, (method, path)
            expired = bearer("admin", expiry=int(time.time()) - 10)
            response = await env.client.request(method, path, json=body, headers=expired)
            assert response.status == 401, (method, path)
            for key_name in _LACKING[right]:
                response = await env.client.request(method, path, json=body, headers=bearer(key_name))
                assert response.status == 403, (method, path, key_name, await response.text())
                assert (await error_of(response))["code"] == "Forbidden"
        # Nothing was changed by any refused request.
        assert env.broker.entity("parking") is not None and env.broker.entity("newq") is None
        assert [r.name for r in env.broker.entity("events/subscriptions/audit").rules] == ["$Default"]  # type: ignore[union-attr]
        # And each is allowed with its right (Manage implies the others).
        for method, path, body, _ in OPERATIONS:
            response = await env.client.request(method, path, json=body, headers=ADMIN)
            assert response.status < 400 or response.status == 404, (method, path, await response.text())

    run(test)


def test_a_key_with_exactly_the_right_is_enough() -> None:
    async def test(env: Env) -> None:
        await send(env, "orders", {"body": "hello"}, bearer("sender"))
        response = await env.client.get("/api/v1/entities/orders/$messages", headers=bearer("listener"))
        assert response.status == 200
        assert [m["body"] for m in (await response.json())["messages"]] == ["aGVsbG8="]

    run(test)


# ---- the console's login ------------------------------------------------------------------------------------


def test_login_sets_a_strict_http_only_cookie_and_changes_need_the_csrf_token() -> None:
    async def test(env: Env) -> None:
        client = env.client
        response = await client.post("/api/v1/login", json={"keyName": "admin", "key": "d3Jvbmc="})
        assert response.status == 401
        response = await client.post("/api/v1/login", json={"keyName": "admin", "key": KEY})
        assert response.status == 200
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        csrf = (await response.json())["csrfToken"]

        assert (await client.get("/api/v1/entities")).status == 200  # the cookie is enough to read
        create = {"kind": "queue", "path": "fromconsole"}
        response = await client.post("/api/v1/entities", json=create)
        assert response.status == 403 and "X-CSRF-Token" in (await error_of(response))["message"]
        response = await client.post("/api/v1/entities", json=create, headers={"X-CSRF-Token": "forged"})
        assert response.status == 403
        assert env.broker.entity("fromconsole") is None
        response = await client.post("/api/v1/entities", json=create,
                                     headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
        assert response.status == 403  # cross-origin: refused whatever the credentials
        response = await client.post("/api/v1/entities", json=create,
                                     headers={"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"})
        assert response.status == 403
        assert env.broker.entity("fromconsole") is None
        host = client.server.make_url("/").host
        port = client.server.make_url("/").port
        response = await client.post("/api/v1/entities", json=create,
                                     headers={"X-CSRF-Token": csrf, "Origin": f"http://{host}:{port}"})
        assert response.status == 201, await response.text()

        env.now[0] += api.SESSION_SECONDS + 1  # the login expires
        response = await client.get("/api/v1/entities")
        assert response.status == 401 and "expired" in (await error_of(response))["message"]
        response = await client.post("/api/v1/entities", json={"kind": "queue", "path": "late"},
                                     headers={"X-CSRF-Token": csrf})
        assert response.status == 401 and env.broker.entity("late") is None

    run(test)


def test_a_cross_origin_change_with_a_bearer_token_is_refused() -> None:
    async def test(env: Env) -> None:
        response = await env.client.post("/api/v1/entities/orders/$purge", json={},
                                         headers={**ADMIN, "Origin": "https://elsewhere.example"})
        assert response.status == 403

    run(test)


# ---- bad input -----------------------------------------------------------------------------------------------


def test_bad_input_is_a_4xx_with_a_json_error_and_changes_nothing() -> None:
    async def test(env: Env) -> None:
        client = env.client
        await send(env, "orders", {"body": "one", "applicationProperties": {"color": "red"}})
        await dead_letter_everything(env, "orders")

        response = await client.post("/api/v1/entities/orders/$send", data=b"{not json", headers=ADMIN)
        assert response.status == 400 and (await error_of(response))["code"] == "BadRequest"
        response = await client.post("/api/v1/entities/orders/$send", data=b"[1, 2]", headers=ADMIN)
        assert response.status == 400

        response = await client.get("/api/v1/entities/nosuchqueue/$messages", headers=ADMIN)
        assert response.status == 404 and (await error_of(response))["code"] == "MessagingEntityNotFound"
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"all": True, "subQueue": "deadletter", "target": "nosuchqueue"})
        assert response.status == 404

        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"filter": "color = = 'red'", "subQueue": "deadletter"})
        assert response.status == 400
        assert "color" in (await error_of(response))["message"] or "position" in (await response.text()).lower()

        huge = {"body": "x" * (api.MAX_BODY + 10)}
        response = await client.post("/api/v1/entities/orders/$send", json=huge, headers=ADMIN)
        assert response.status == 413 and (await error_of(response))["code"] == "RequestEntityTooLarge"

        response = await client.get("/api/v1/entities/orders/$messages?subQueue=sideways", headers=ADMIN)
        assert response.status == 400
        response = await client.get("/api/v1/entities/orders/$messages?count=1000", headers=ADMIN)
        assert response.status == 400
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"all": True, "filter": "1=1", "subQueue": "deadletter"})
        assert response.status == 400  # two selections at once

        counts = env.broker.entity("orders").actor.counts()  # type: ignore[union-attr]
        assert counts["dead_letter"] == 1 and counts["active"] == 0  # nothing moved, nothing sent

    run(test)


# ---- the operations ---------------------------------------------------------------------------------------------


def test_namespace_entities_and_rules_round_trip(caplog: pytest.LogCaptureFixture) -> None:
    async def test(env: Env) -> None:
        client = env.client
        caplog.set_level(logging.INFO, logger="sodalite.audit")
        namespace = await (await client.get("/api/v1/namespace", headers=ADMIN)).json()
        assert namespace["name"] == "consolens"
        assert [e["path"] for e in namespace["entities"]] == ["events", "events/subscriptions/audit", "orders",
                                                              "parking", "sessions"]
        assert namespace["stores"] == [{"name": "default", "online": True}]

        response = await client.post("/api/v1/entities", headers=ADMIN, json={
            "kind": "queue", "path": "made", "properties": {"MaxDeliveryCount": 3}})
        assert response.status == 201
        assert (await response.json())["properties"]["MaxDeliveryCount"] == 3
        response = await client.post("/api/v1/entities", headers=ADMIN, json={"kind": "queue", "path": "made"})
        assert response.status == 409
        response = await client.post("/api/v1/entities", headers=ADMIN, json={
            "kind": "queue", "path": "bad", "properties": {"MaxDeliveryCount": "many"}})
        assert response.status == 400 and env.broker.entity("bad") is None
        response = await client.post("/api/v1/entities", headers=ADMIN, json={"kind": "queue", "path": ""})
        assert response.status == 400 and "kind and path are required" in await response.text()
        response = await client.put("/api/v1/entities/made", headers=ADMIN,
                                    json={"properties": {"MaxDeliveryCount": 7}})
        assert response.status == 200 and (await response.json())["properties"]["MaxDeliveryCount"] == 7

        response = await client.post("/api/v1/entities", headers=ADMIN, json={
            "kind": "subscription", "path": "events/subscriptions/red",
            "rule": {"Name": "reds",
                     "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color='red'"}}}})
        assert response.status == 201, await response.text()
        rule = {"Name": "bad", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = = 1"}}}
        response = await client.post("/api/v1/entities/events/subscriptions/red/$rules", headers=ADMIN,
                                     json={"rule": rule})
        assert response.status == 400
        rules = await (await client.get("/api/v1/entities/events/subscriptions/red/$rules", headers=ADMIN)).json()
        assert [r["name"] for r in rules] == ["reds"]
        await send(env, "events", {"body": "r", "applicationProperties": {"color": "red"}})
        await send(env, "events", {"body": "b", "applicationProperties": {"color": "blue"}})
        red = env.broker.entity("events/subscriptions/red")
        assert red is not None and red.actor.counts()["active"] == 1
        listed = {e["path"]: e for e in await (await client.get("/api/v1/entities", headers=ADMIN)).json()}
        assert listed["events"]["messagesIn"] == 2 and listed["orders"]["messagesIn"] == 0

        assert (await client.delete("/api/v1/entities/made", headers=ADMIN)).status == 200
        assert (await client.get("/api/v1/entities/made", headers=ADMIN)).status == 404
        audit = [r.getMessage() for r in caplog.records if r.name == "sodalite.audit"]
        assert any("create-queue made by admin" in line for line in audit)
        assert any("delete-queue made by admin" in line for line in audit)
        assert any("send events by admin" in line for line in audit)

    run(test)


def test_peek_pages_show_send_resubmit_move_purge_and_cancel(caplog: pytest.LogCaptureFixture) -> None:
    async def test(env: Env) -> None:
        client = env.client
        caplog.set_level(logging.INFO, logger="sodalite.audit")
        for i in range(7):
            await send(env, "orders", {"body": {"n": i}, "contentType": "application/json", "messageId": f"m{i}",
                                       "applicationProperties": {"color": "red" if i % 2 else "blue", "n": i}})
        page = await (await client.get("/api/v1/entities/orders/$messages?count=3", headers=ADMIN)).json()
        assert [m["messageId"] for m in page["messages"]] == ["m0", "m1", "m2"]
        following = page["nextSequenceNumber"]
        page = await (await client.get(f"/api/v1/entities/orders/$messages?count=3&fromSequenceNumber={following}",
                                       headers=ADMIN)).json()
        assert [m["messageId"] for m in page["messages"]] == ["m3", "m4", "m5"]
        one = await (await client.get(f"/api/v1/entities/orders/$messages/{following}", headers=ADMIN)).json()
        assert one["messageId"] == "m3" and one["contentType"] == "application/json"
        assert json.loads(__import__("base64").b64decode(one["body"])) == {"n": 3}
        assert one["applicationProperties"] == {"color": "red", "n": 3}

        await dead_letter_everything(env, "orders")
        dlq = await (await client.get("/api/v1/entities/orders/$messages?subQueue=deadletter&count=100",
                                      headers=ADMIN)).json()
        assert len(dlq["messages"]) == 7 and dlq["messages"][0]["deadLetterReason"] == "Broken"

        preview = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                    json={"filter": "color = 'red'", "subQueue": "deadletter", "dryRun": True})
        assert await preview.json() == {"selected": 3, "moved": 0, "skipped": 0}
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"filter": "color = 'red'", "subQueue": "deadletter"})
        assert await response.json() == {"selected": 3, "moved": 3, "skipped": 0}
        first = dlq["messages"][0]["sequenceNumber"]
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"sequenceNumbers": [first], "subQueue": "deadletter", "target": "parking"})
        assert (await response.json())["moved"] == 1
        await counted(env, "orders", "dead_letter", 3)
        counts = env.broker.entity("orders").actor.counts()  # type: ignore[union-attr]
        assert counts["active"] == 3 and counts["dead_letter"] == 3
        active = await (await client.get("/api/v1/entities/orders/$messages", headers=ADMIN)).json()
        assert [m["messageId"] for m in active["messages"]] == ["m1", "m3", "m5"]
        assert all(m["deliveryCount"] == 0 and m["deadLetterReason"] is None for m in active["messages"])
        parked = await (await client.get("/api/v1/entities/parking/$messages", headers=ADMIN)).json()
        assert [m["messageId"] for m in parked["messages"]] == ["m0"]

        response = await client.post("/api/v1/entities/orders/$purge", headers=ADMIN, json={"subQueue": "deadletter"})
        assert await response.json() == {"purged": 3}

        later = int(time.time() * 1000) + 3_600_000
        await send(env, "orders", {"body": "later", "scheduledEnqueueTimeMs": later})
        scheduled = await (await client.get("/api/v1/entities/orders/$messages?subQueue=scheduled",
                                            headers=ADMIN)).json()
        assert len(scheduled["messages"]) == 1 and scheduled["messages"][0]["state"] == "Scheduled"
        number = scheduled["messages"][0]["sequenceNumber"]
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"sequenceNumbers": [number], "subQueue": "active", "target": "parking"})
        assert await response.json() == {"selected": 1, "moved": 0, "skipped": 1}  # not an active message
        response = await client.post("/api/v1/entities/orders/$cancel-scheduled", headers=ADMIN,
                                     json={"sequenceNumbers": [number]})
        assert response.status == 200
        assert env.broker.entity("orders").actor.counts()["scheduled"] == 0  # type: ignore[union-attr]

        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"all": True, "target": "sessions"})
        assert response.status == 400  # the target needs a SessionId the messages lack; nothing moved
        assert env.broker.entity("orders").actor.counts()["active"] == 3  # type: ignore[union-attr]
        audit = [r.getMessage() for r in caplog.records if r.name == "sodalite.audit"]
        assert any("move orders by admin" in line and "moved=3" in line for line in audit)
        assert any("purge orders by admin" in line and "count=3" in line for line in audit)

    run(test)


def test_keys_stores_openapi_and_the_console_assets() -> None:
    async def test(env: Env) -> None:
        client = env.client
        keys = await (await client.get("/api/v1/keys", headers=ADMIN)).json()
        assert {k["keyName"] for k in keys} >= {"admin", "listener", "sender"}
        response = await client.post("/api/v1/keys/regenerate", headers=ADMIN,
                                     json={"keyName": "listener", "keyType": "PrimaryKey"})
        new_key = (await response.json())["primaryKey"]
        assert new_key != KEY
        old = await client.get("/api/v1/entities/orders/$messages", headers=bearer("listener"))
        assert old.status == 401  # the old key signs no more
        fresh = await client.get("/api/v1/entities/orders/$messages", headers=bearer("listener", key=new_key))
        assert fresh.status == 200

        response = await client.post("/api/v1/stores/nosuch/offline", headers=ADMIN)
        assert response.status == 404
        response = await client.post("/api/v1/stores/default/offline", headers=ADMIN)
        assert await response.json() == [{"name": "default", "online": False}]
        response = await client.post("/api/v1/stores/default/online", headers=ADMIN)
        assert await response.json() == [{"name": "default", "online": True}]

        document = await (await client.get("/api/v1/openapi.json")).json()
        assert document["openapi"].startswith("3.")
        assert "/api/v1/entities/{path}/$move" in document["paths"]
        response = await client.get("/api/v1/nothing-here", headers=ADMIN)
        assert response.status == 404

        page = await client.get("/console/")
        assert page.status == 200 and "console.js" in await page.text()
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        script = await client.get("/console/console.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        code = (await script.text()).replace('"http://www.w3.org/2000/svg"', "")  # the SVG namespace, not a fetch
        assert "http://" not in code and "https://" not in code  # no CDN
        assert all(ref.startswith(("/console/", "data:")) for ref in
                   __import__("re").findall(r'(?:src|href)="([^"#]+)"', await page.text()))
        assert (await client.get("/console/other.js")).status == 404
        # The ATOM API is still there and still wants its own token, for an entity named like the
        # console too (only /console and /console/... are the console's).
        assert (await client.get("/$Resources/queues")).status == 401
        assert (await client.get("/consolequeue")).status == 401
        assert (await client.get("/console", allow_redirects=False)).status == 302
        for method in ("PUT", "DELETE", "POST"):  # never the ATOM API's, which would skip its token check
            for path in ("/console", "/console/", "/console/x", "/console/x/y"):
                assert (await client.request(method, path)).status == 405, (method, path)
        assert (await client.get("/console/x/y")).status == 405

    run(test)


def test_a_background_purge_reports_its_progress_and_outcome() -> None:
    async def test(env: Env) -> None:
        client = env.client
        for i in range(7):
            await send(env, "orders", {"body": f"p{i}", "messageId": f"p{i}"})
        response = await client.post("/api/v1/entities/orders/$purge", headers=bearer("sender"),
                                     json={"subQueue": "active", "background": True})
        assert response.status == 403  # purging needs Listen: refused before it starts
        response = await client.post("/api/v1/entities/orders/$purge", headers=ADMIN,
                                     json={"subQueue": "active", "background": True})
        assert response.status == 202
        operation = await response.json()
        assert operation["kind"] == "purge" and operation["source"] == "orders"
        for _ in range(200):
            operation = await (await client.get(f"/api/v1/operations/{operation['id']}", headers=ADMIN)).json()
            if operation["state"] != "running":
                break
            await asyncio.sleep(0.02)
        assert operation["state"] == "succeeded"
        assert operation["outcome"] == {"selected": 7, "moved": 7, "skipped": 0}  # moved: deleted
        assert operation["done"] == operation["total"] == 7
        assert env.broker.entity("orders").actor.counts()["active"] == 0  # type: ignore[union-attr]
        response = await client.post("/api/v1/entities/nosuch/$purge", headers=ADMIN,
                                     json={"subQueue": "active", "background": True})
        assert response.status == 404

    run(test)


def test_a_background_move_reports_its_progress_and_outcome() -> None:
    async def test(env: Env) -> None:
        client = env.client
        for i in range(12):
            await send(env, "orders", {"body": f"b{i}", "messageId": f"b{i}"})
        await dead_letter_everything(env, "orders")
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"filter": "nosuch = = 1", "subQueue": "deadletter", "background": True})
        assert response.status == 400  # checked before it starts
        response = await client.post("/api/v1/entities/orders/$move", headers=bearer("listener"),
                                     json={"all": True, "subQueue": "deadletter", "target": "parking",
                                           "background": True})
        assert response.status == 403  # no Send on the target
        response = await client.post("/api/v1/entities/orders/$move", headers=ADMIN,
                                     json={"all": True, "subQueue": "deadletter", "target": "parking",
                                           "background": True})
        assert response.status == 202
        operation = await response.json()
        assert operation["total"] == 12 and operation["source"] == "orders" and operation["target"] == "parking"
        for _ in range(200):
            operation = await (await client.get(f"/api/v1/operations/{operation['id']}", headers=ADMIN)).json()
            if operation["state"] != "running":
                break
            await asyncio.sleep(0.02)
        assert operation["state"] == "succeeded"
        assert operation["outcome"] == {"selected": 12, "moved": 12, "skipped": 0}
        assert operation["done"] == operation["total"] == 12
        assert env.broker.entity("parking").actor.counts()["active"] == 12  # type: ignore[union-attr]
        response = await client.get(f"/api/v1/operations/{operation['id']}", headers=bearer("sender"))
        assert response.status == 403  # following it needs Listen on its source
        assert (await client.get("/api/v1/operations/unknown", headers=ADMIN)).status == 404

    run(test)


def test_resubmitting_a_subscriptions_dead_letters_to_its_topic_fans_them_out_again() -> None:
    async def test(env: Env) -> None:
        client = env.client
        for i in range(3):
            await send(env, "events", {"body": f"e{i}", "messageId": f"e{i}", "applicationProperties": {"n": i}})
        await dead_letter_everything(env, "events/subscriptions/audit")
        response = await client.post("/api/v1/entities/events/subscriptions/audit/$move", headers=bearer("listener"),
                                     json={"all": True, "subQueue": "deadletter", "target": "events"})
        assert response.status == 403  # no Send on the topic; nothing moved
        response = await client.post("/api/v1/entities/events/subscriptions/audit/$move", headers=ADMIN,
                                     json={"filter": "n >= 1", "subQueue": "deadletter", "target": "events"})
        assert response.status == 200, await response.text()
        assert await response.json() == {"selected": 2, "moved": 2, "skipped": 0}
        for _ in range(1500):  # the moves land in the topic's own partition, whose activator fans them out
            active = await (await client.get("/api/v1/entities/events/subscriptions/audit/$messages",
                                             headers=ADMIN)).json()
            if len(active["messages"]) >= 2:
                break
            await asyncio.sleep(0.02)
        assert sorted(m["messageId"] for m in active["messages"]) == ["e1", "e2"]  # the topic's send, again
        assert all(m["deliveryCount"] == 0 and m["deadLetterReason"] is None for m in active["messages"])
        dlq = await (await client.get("/api/v1/entities/events/subscriptions/audit/$messages?subQueue=deadletter",
                                      headers=ADMIN)).json()
        assert [m["messageId"] for m in dlq["messages"]] == ["e0"]

    run(test)


def test_the_atom_api_and_the_json_api_are_faces_of_one_control_plane(caplog: pytest.LogCaptureFixture) -> None:
    async def test(env: Env) -> None:
        client = env.client
        caplog.set_level(logging.INFO, logger="sodalite.audit")
        atom_headers = {"Authorization": token("admin"), "Content-Type": "application/atom+xml"}
        response = await client.put("/atom-made", data=atom.request_entry(QueueProperties(max_delivery_count=6)),
                                    headers=atom_headers)
        assert response.status == 201, await response.text()
        made = await (await client.get("/api/v1/entities/atom-made", headers=ADMIN)).json()
        assert made["kind"] == "queue" and made["properties"]["MaxDeliveryCount"] == 6
        audit = [r.getMessage() for r in caplog.records if r.name == "sodalite.audit"]
        assert any(line.startswith("audit create-queue atom-made by admin") for line in audit)

        listener = {"Authorization": token("listener"), "Content-Type": "application/atom+xml"}
        response = await client.put("/atom-refused", data=atom.request_entry(QueueProperties()), headers=listener)
        assert response.status == 401  # the ATOM API's own answer for a key without Manage, as before
        assert env.broker.entity("atom-refused") is None

        queues = await (await client.get("/api/v1/entities?kind=queue", headers=ADMIN)).json()
        assert [e["path"] for e in queues] == ["atom-made", "orders", "parking", "sessions"]
        subscriptions = await (await client.get("/api/v1/entities?topic=events", headers=ADMIN)).json()
        assert [e["path"] for e in subscriptions] == ["events/subscriptions/audit"]
        topics = await (await client.get("/api/v1/entities?kind=topic", headers=ADMIN)).json()
        assert topics[0]["topicFigures"] == {"subscriptionCount": 1, "sqlFilterCount": 1, "correlationFilterCount": 0}
        response = await client.get("/api/v1/entities?kind=nosuch", headers=ADMIN)
        assert response.status == 400

        response = await client.delete("/atom-made", headers=atom_headers)
        assert response.status == 200 and env.broker.entity("atom-made") is None
        audit = [r.getMessage() for r in caplog.records if r.name == "sodalite.audit"]
        assert any(line.startswith("audit delete-queue atom-made by admin") for line in audit)

    run(test)
