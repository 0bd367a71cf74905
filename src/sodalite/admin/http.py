"""The Service Bus management REST API (ATOM/XML) over HTTP(S), for ServiceBusAdministrationClient.

Theory of operation: an aiohttp application maps the SDK's requests (sdk-wire-contract.md 8.2) to
the QueueManager and answers with the entries and feeds it can parse (8.3). Every request but
``GET /health`` carries a SAS token for the ``https://host[:port]`` audience, checked against the
namespace's keys. Errors are Sodalite errors translated here, at the edge, to their HTTP status
and a ``<Error><Code/><Detail/></Error>`` body.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from sodalite.admin import atom
from sodalite.admin.service import QueueManager
from sodalite.errors import ArgumentError, EntityNotFound, SodaliteError, Unauthorized
from sodalite.model import sas
from sodalite.model.entities import QueueProperties

log = logging.getLogger(__name__)

ENTRY = {"Content-Type": "application/atom+xml;type=entry;charset=utf-8"}
FEED = {"Content-Type": "application/atom+xml;type=feed;charset=utf-8"}
MANAGER: web.AppKey[QueueManager] = web.AppKey("manager", QueueManager)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _error(exc: SodaliteError) -> web.Response:
    return web.Response(status=exc.http_status, body=atom.error_body(exc.http_status, exc.description),
                        content_type="application/xml")


@web.middleware
async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        if request.path != "/health":
            token = request.headers.get("Authorization") or request.headers.get("ServiceBusAuthorization")
            if not token:
                raise Unauthorized("the request has no SharedAccessSignature Authorization header")
            sas.validate_token(token, request.app[MANAGER].sas_keys(), time.time())
        return await handler(request)
    except SodaliteError as exc:
        if exc.http_status >= 500:
            log.exception("management request failed: %s %s", request.method, request.path)
        return _error(exc)


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def namespace_info(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    return web.Response(body=atom.namespace_info_entry(manager.namespace, _now()), headers=ENTRY)


def _paging(request: web.Request) -> tuple[int, int]:
    try:
        return max(0, int(request.query.get("$skip", "0"))), max(1, int(request.query.get("$top", "100")))
    except ValueError:
        raise ArgumentError("$skip and $top must be integers") from None


async def list_queues(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    skip, top = _paging(request)
    names = manager.queue_names()
    page = names[skip : skip + top]
    entries = []
    for name in page:
        found = manager.queue(name)
        if found is not None:
            entries.append(atom.queue_entry(found[0], found[1], found[2], _base(request), _now()))
    more = skip + top < len(names)
    next_link = f"{_base(request)}/$Resources/queues?$skip={skip + top}&$top={top}" if more else None
    return web.Response(body=atom.queue_feed(entries, _base(request), "Queues", next_link), headers=FEED)


async def get_queue(request: web.Request) -> web.Response:
    found = request.app[MANAGER].queue(request.match_info["name"])
    if found is None:
        # The service answers an unknown entity with an empty feed; the SDK makes that ResourceNotFoundError.
        return web.Response(body=atom.empty_feed(_base(request)), headers=FEED)
    return web.Response(body=atom.queue_entry(found[0], found[1], found[2], _base(request), _now()),
                        headers=ENTRY)


async def put_queue(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    name = request.match_info["name"]
    properties = QueueProperties.from_json(atom.parse_queue_description(await request.read()),
                                           path="QueueDescription")
    updating = "If-Match" in request.headers
    if updating:
        await manager.update_queue(name, properties)
    else:
        await manager.create_queue(name, properties)
    found = manager.queue(name)
    if found is None:
        raise EntityNotFound(f"the queue '{name}' could not be found")
    body = atom.queue_entry(found[0], found[1], found[2], _base(request), _now())
    return web.Response(status=200 if updating else 201, body=body, headers=ENTRY)


async def delete_queue(request: web.Request) -> web.Response:
    await request.app[MANAGER].delete_queue(request.match_info["name"])
    return web.Response(status=200)


def application(manager: QueueManager) -> web.Application:
    app = web.Application(middlewares=[errors_and_auth], client_max_size=4 * 1024 * 1024)
    app[MANAGER] = manager
    app.router.add_get("/health", health)
    app.router.add_get("/$namespaceinfo", namespace_info)
    app.router.add_get("/$Resources/queues", list_queues)
    app.router.add_get("/{name:.+}", get_queue)
    app.router.add_put("/{name:.+}", put_queue)
    app.router.add_delete("/{name:.+}", delete_queue)
    return app
