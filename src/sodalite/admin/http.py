"""The Service Bus management REST API (ATOM/XML) over HTTP(S), for ServiceBusAdministrationClient.

Theory of operation: an aiohttp application maps the SDK's requests (sdk-wire-contract.md 8.2) to
the control plane, through :class:`~sodalite.admin.service.AtomService` (records to ATOM
descriptions), and answers with the entries and feeds it can parse (8.3). Every request but
``GET /health`` carries a SAS token for the ``https://host[:port]`` audience, checked against the
namespace's keys. Errors are Sodalite errors translated here, at the edge, to their HTTP status
and a ``<Error><Code/><Detail/></Error>`` body.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from urllib.parse import quote

from aiohttp import web

from sodalite.admin import atom
from sodalite.admin import keys as _keys
from sodalite.admin import stores as _stores
from sodalite.admin import websocket as _websocket
from sodalite.admin.control import Caller, ControlPlane, kind_of
from sodalite.admin.service import AtomService, Found
from sodalite.errors import ArgumentError, EntityNotFound, InternalError, SodaliteError, Unauthorized
from sodalite.model import sas
from sodalite.model.entities import QueueProperties, RuleDescription, SubscriptionProperties, TopicProperties

log = logging.getLogger(__name__)

ENTRY = {"Content-Type": "application/atom+xml;type=entry;charset=utf-8"}
FEED = {"Content-Type": "application/atom+xml;type=feed;charset=utf-8"}
CONTROL: web.AppKey[ControlPlane] = web.AppKey("atom-control", ControlPlane)
CALLER: web.RequestKey[Caller] = web.RequestKey("caller", Caller)  # who the middleware found the caller to be

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _error(exc: SodaliteError) -> web.Response:
    """The error response, its ``Detail`` ending in a tracking id that is also in the log line."""
    tracking_id = uuid.uuid4().hex
    detail = f"{exc.description} TrackingId:{tracking_id}"
    expected = exc.http_status in (404, 409)  # not found, already exists: routine for a management client
    log.log(logging.INFO if expected else logging.WARNING, "management API error %s %s: %s",
            exc.http_status, exc.condition, detail,
            extra={"tracking_id": tracking_id, "condition": exc.condition, "status": exc.http_status, "kind": "http"})
    # Service Bus puts a sub-coded refusal in the status line too ("401 SubCode=40100: Unauthorized : ..."),
    # which is what the Go SDK's error text shows.
    reason = exc.description if exc.description.startswith(_keys.SUBCODE_PREFIX) else None
    return web.Response(status=exc.http_status, reason=reason, body=atom.error_body(exc.http_status, detail),
                        content_type="application/xml")


UNAUTHENTICATED = frozenset({"/health", "/metrics"})
OWN_AUTHORIZATION = ("/api/v1/", "/console/")  # the JSON API and the console authorize their own requests


@web.middleware
async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        # /health and /metrics are for probes and scrapers, which carry no token.
        # AMQP over WebSockets authenticates inside the AMQP connection, as AMQP over TCP does; the JSON API
        # and the console check their own tokens and sessions.
        own = request.path == "/console" or request.path.startswith(OWN_AUTHORIZATION)
        if request.path not in UNAUTHENTICATED and not own and not _websocket.is_websocket_path(request.path):
            token = request.headers.get("Authorization") or request.headers.get("ServiceBusAuthorization")
            if not token:
                raise Unauthorized("the request has no SharedAccessSignature Authorization header")
            authority = request.app.get(_keys.KEYS)
            if authority is not None:
                granted = _keys.authorize_request(  # Manage, namespace- or entity-wide
                    authority, token, request.path, request.method, sas.host_of(request.host),
                    (lambda: _names_nothing(request)) if request.method in ("GET", "HEAD") else None)
                request[CALLER] = Caller(token, granted.key_name, granted)
            else:  # the control plane authorizes the token itself
                request[CALLER] = Caller(token, sas.parse_token(token).key_name)
        return await handler(request)
    except SodaliteError as exc:
        return _error(exc)  # logged there, once, with its tracking id
    except web.HTTPException:
        raise  # aiohttp's own answers (no route, wrong method)
    except Exception as exc:
        log.exception("management request failed: %s %s", request.method, request.path)
        return _error(InternalError(f"internal error: {exc}"))


def _names_nothing(request: web.Request) -> bool:
    """Whether a read's path names an entity or rule that does not exist (not a list or the namespace)."""
    path = request.path.strip("/")
    if not path or path.startswith("$") or path.startswith(OWN_AUTHORIZATION):
        return False
    control = request.app.get(CONTROL)
    if control is None:
        return False
    entity, marker, rule = path.partition("/rules/")
    # A list of a topic's subscriptions or of a subscription's rules names its owner.
    entity = entity.removesuffix("/rules").removesuffix("/subscriptions")
    record = control.runtime.entity_record(entity)
    if record is None:
        return True
    return bool(marker and rule) and not any(r.name.lower() == rule.lower() for r in control.runtime.rules(record.path))


def _manager(request: web.Request) -> AtomService:
    return AtomService(request.app[CONTROL], request[CALLER])


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def namespace_info(request: web.Request) -> web.Response:
    manager = _manager(request)
    # The JavaScript client reads every entry's <id>; the service writes one here too.
    body = atom.namespace_info_entry(manager.control.namespace, _now(), base_url=_base(request))
    return web.Response(body=body, headers=ENTRY)


def _paging(request: web.Request) -> tuple[int, int]:
    try:
        return max(0, int(request.query.get("$skip", "0"))), max(1, int(request.query.get("$top", "100")))
    except ValueError:
        raise ArgumentError("$skip and $top must be integers") from None


def _page(request: web.Request, names: list[str], lookup: Callable[[str], Found | None],
          path: Callable[[str], str], collection: str, title: str) -> web.Response:
    """One page of a list (``$skip``/``$top``), with a next link while more remain (contract 8.3)."""
    skip, top = _paging(request)
    base = _base(request)
    entries = []
    for name in names[skip : skip + top]:
        found = lookup(name)
        if found is not None:  # deleted since it was listed
            entries.append(atom.entity_entry(path(found.name), found.name, found.description, found.runtime,
                                             base, _now()))
    more = skip + top < len(names)
    collection_url = f"{base}/{quote(collection, safe='/$')}"
    next_link = f"{collection_url}?$skip={skip + top}&$top={top}" if more else None
    return web.Response(body=atom.feed(entries, base, title, next_link, path=collection, now=_now()), headers=FEED)


def _entry(request: web.Request, path: str, found: Found | None, status: int = 200) -> web.Response:
    """The entity's entry, or (for GET of a missing one) the empty feed the service answers with."""
    if found is None:
        # The service answers an unknown entity with an empty feed; the SDK makes that ResourceNotFoundError.
        return web.Response(body=atom.empty_feed(_base(request)), headers=FEED)
    body = atom.entity_entry(path, found.name, found.description, found.runtime, _base(request), _now())
    return web.Response(status=status, body=body, headers=ENTRY)


def _updating(request: web.Request) -> bool:
    """``If-Match: *`` makes a PUT an update (200, 404 when missing); without it, a create (201, 409)."""
    return "If-Match" in request.headers


def _created(what: str, found: Found | None) -> Found:
    if found is None:  # deleted between the change and the read-back
        raise EntityNotFound(f"the {what} could not be found")
    return found


# ---- queues and topics (one name space: PUT tells them apart by the body's description) -------------


async def list_queues(request: web.Request) -> web.Response:
    manager = _manager(request)
    return _page(request, manager.queue_names(), lambda name: manager.entity(name, "queue"), lambda name: name,
                 "$Resources/Queues", "Queues")


async def list_topics(request: web.Request) -> web.Response:
    manager = _manager(request)
    return _page(request, manager.topic_names(), lambda name: manager.entity(name, "topic"), lambda name: name,
                 "$Resources/Topics", "Topics")


async def get_entity(request: web.Request) -> web.Response:
    manager = _manager(request)
    name = request.match_info["name"]
    found = manager.queue_or_topic(name)
    return _entry(request, found.name if found else name, found)


async def put_entity(request: web.Request) -> web.Response:
    manager = _manager(request)
    name = request.match_info["name"]
    parsed = atom.parse_description(await request.read())
    if parsed.kind not in ("QueueDescription", "TopicDescription"):
        raise ArgumentError(f"entry.content: PUT /{name} takes a QueueDescription or a TopicDescription, "
                            f"got {parsed.kind}")
    description = parsed.description()
    if not isinstance(description, QueueProperties | TopicProperties):
        raise ArgumentError(f"entry.content: expected a QueueDescription or a TopicDescription, got {parsed.kind}")
    updating = _updating(request)
    current = manager.queue_or_topic(name) if updating else None
    _check_message_size(request, manager.control, description.max_message_size_in_kilobytes, current)
    if (current is not None and current.size_factor > 1 and isinstance(current.description, type(description))
            and description.max_size_in_megabytes == current.description.max_size_in_megabytes):
        # The shown size (per partition times the partitions) sent back as it was read: unchanged.
        description = replace(description,
                              max_size_in_megabytes=description.max_size_in_megabytes // current.size_factor)
    await manager.put_entity(name, description, create=not updating)
    found = _created(f"entity '{name}'", manager.entity(name, kind_of(description)))
    return _entry(request, found.name, found, 200 if updating else 201)


OLD_API_VERSION = "2017-04"  # the schema before MaxMessageSizeInKilobytes existed


def _check_message_size(request: web.Request, plane: ControlPlane, requested: int | None,
                        current: Found | None) -> None:
    """MaxMessageSizeInKilobytes may be chosen only in a Premium namespace and from api-version 2021-05.

    Elsewhere the value is refused with 400, as Service Bus does, unless it is the one the entity
    already has (an entity as read back can be written back).
    """
    if requested is None:
        return
    old_api = request.query.get("api-version") == OLD_API_VERSION
    if plane.sku == "Premium" and not old_api:
        return
    existing = getattr(current.description, "max_message_size_in_kilobytes", None) if current else None
    if requested == (existing or plane.max_message_size_in_kilobytes):
        return
    if old_api:
        raise ArgumentError(f"MaxMessageSizeInKilobytes is not part of api-version {OLD_API_VERSION}; "
                            "use api-version 2021-05 or later in a Premium namespace")
    raise ArgumentError(f"MaxMessageSizeInKilobytes cannot be set in a {plane.sku} namespace: only Premium "
                        f"namespaces choose their message size (this one allows "
                        f"{plane.max_message_size_in_kilobytes} KB)")


async def delete_entity(request: web.Request) -> web.Response:
    # Service Bus answers DELETE of a missing entity with 404 (the SDKs raise ResourceNotFoundError).
    manager = _manager(request)
    name = request.match_info["name"]
    if not await manager.delete_entity(name, "queue") and not await manager.delete_entity(name, "topic"):
        raise EntityNotFound(f"the messaging entity '{name}' could not be found")
    return web.Response(status=200)


# ---- subscriptions ------------------------------------------------------------------------------------


# Entry ids spell the collections as the service does, ``Subscriptions`` and ``Rules``: the
# JavaScript client takes the topic, subscription and rule names from the id by those spellings.
def _subscription_path(topic: str, name: str) -> str:
    return f"{topic}/Subscriptions/{name}"


async def list_subscriptions(request: web.Request) -> web.Response:
    manager = _manager(request)
    topic = request.match_info["topic"]
    return _page(request, manager.subscription_names(topic), lambda name: manager.subscription(topic, name),
                 lambda name: _subscription_path(topic, name), f"{topic}/Subscriptions", "Subscriptions")


async def get_subscription(request: web.Request) -> web.Response:
    topic, name = request.match_info["topic"], request.match_info["subscription"]
    found = _manager(request).subscription(topic, name)
    return _entry(request, _subscription_path(topic, found.name if found else name), found)


async def put_subscription(request: web.Request) -> web.Response:
    manager = _manager(request)
    topic, name = request.match_info["topic"], request.match_info["subscription"]
    parsed = atom.parse_description(await request.read())
    if parsed.kind != "SubscriptionDescription":
        raise ArgumentError(f"entry.content: expected a SubscriptionDescription, got {parsed.kind}")
    description = parsed.description()
    assert isinstance(description, SubscriptionProperties)
    updating = _updating(request)
    if updating:
        await manager.update_subscription(topic, name, description)
    else:
        await manager.create_subscription(topic, name, description, parsed.default_rule_description())
    found = _created(f"subscription '{name}' of '{topic}'", manager.subscription(topic, name))
    return _entry(request, _subscription_path(topic, found.name), found, 200 if updating else 201)


async def delete_subscription(request: web.Request) -> web.Response:
    topic, name = request.match_info["topic"], request.match_info["subscription"]
    if not await _manager(request).delete_subscription(topic, name):
        raise EntityNotFound(f"the subscription '{name}' of '{topic}' could not be found")
    return web.Response(status=200)


# ---- rules ---------------------------------------------------------------------------------------------


def _rule_path(topic: str, subscription: str, name: str) -> str:
    return f"{topic}/Subscriptions/{subscription}/Rules/{name}"


async def list_rules(request: web.Request) -> web.Response:
    manager = _manager(request)
    topic, subscription = request.match_info["topic"], request.match_info["subscription"]
    return _page(request, manager.rule_names(topic, subscription),
                 lambda name: manager.rule(topic, subscription, name),
                 lambda name: _rule_path(topic, subscription, name),
                 f"{_subscription_path(topic, subscription)}/Rules", "Rules")


async def get_rule(request: web.Request) -> web.Response:
    topic, subscription = request.match_info["topic"], request.match_info["subscription"]
    name = request.match_info["rule"]
    found = _manager(request).rule(topic, subscription, name)
    return _entry(request, _rule_path(topic, subscription, found.name if found else name), found)


async def put_rule(request: web.Request) -> web.Response:
    manager = _manager(request)
    topic, subscription = request.match_info["topic"], request.match_info["subscription"]
    name = request.match_info["rule"]
    parsed = atom.parse_description(await request.read())
    if parsed.kind != "RuleDescription":
        raise ArgumentError(f"entry.content: expected a RuleDescription, got {parsed.kind}")
    rule = parsed.description(name)  # the path names the rule, whatever the body says
    assert isinstance(rule, RuleDescription)
    updating = _updating(request)
    if updating:
        await manager.update_rule(topic, subscription, rule)
    else:
        await manager.create_rule(topic, subscription, rule)
    found = _created(f"rule '{name}'", manager.rule(topic, subscription, name))
    return _entry(request, _rule_path(topic, subscription, found.name), found, 200 if updating else 201)


async def delete_rule(request: web.Request) -> web.Response:
    topic, subscription, name = (request.match_info["topic"], request.match_info["subscription"],
                                 request.match_info["rule"])
    if not await _manager(request).delete_rule(topic, subscription, name):
        raise EntityNotFound(f"the rule '{name}' of subscription '{subscription}' of '{topic}' could not be found")
    return web.Response(status=200)


def _who(request: web.Request) -> tuple[ControlPlane, Caller]:
    return request.app[CONTROL], request[CALLER]


def application(control: ControlPlane, *, keys: _keys.KeyAuthority | None = None,
                amqp: _websocket.AmqpEndpoint | None = None,
                faces: Callable[[web.Application], None] | None = None) -> web.Application:
    """The ATOM API; ``faces`` registers more routes (the JSON API, the console) before its catch-alls; with
    ``amqp``, also AMQP over WebSockets at ``/$servicebus/websocket``."""
    app = web.Application(middlewares=[errors_and_auth], client_max_size=4 * 1024 * 1024)
    app[CONTROL] = control
    if amqp is not None:
        _websocket.install(app, amqp)
    if faces is not None:
        faces(app)
    _stores.add_routes(app, _who)  # the outage switch
    _keys.add_routes(app, _who)  # the regenerate-keys routes
    if keys is not None:  # rights-aware authorization
        app[_keys.KEYS] = keys
    app.router.add_get("/health", health)
    # Paths are case-insensitive, as the service's are: the Python client asks for
    # '/$Resources/queues' and 't/subscriptions/s', the JavaScript one for '/$Resources/Queues' and
    # 't/Subscriptions/s/Rules/' (a trailing slash on its lists).
    app.router.add_get("/{_:(?i:\\$namespaceinfo)}", namespace_info)
    app.router.add_get("/{_:(?i:\\$resources/queues)}{_s:/?}", list_queues)
    app.router.add_get("/{_:(?i:\\$resources/topics)}{_s:/?}", list_topics)
    # The most specific first: a topic's name may hold '/', so '{topic:.+}' would swallow the rest.
    subscriptions, rules = "{_:(?i:subscriptions)}", "{_r:(?i:rules)}"
    rule = f"/{{topic:.+}}/{subscriptions}/{{subscription:[^/]+}}/{rules}/{{rule:[^/]+}}"
    app.router.add_get(rule, get_rule)
    app.router.add_put(rule, put_rule)
    app.router.add_delete(rule, delete_rule)
    app.router.add_get(f"/{{topic:.+}}/{subscriptions}/{{subscription:[^/]+}}/{rules}{{_s:/?}}", list_rules)
    subscription = f"/{{topic:.+}}/{subscriptions}/{{subscription:[^/]+}}"
    app.router.add_get(subscription, get_subscription)
    app.router.add_put(subscription, put_subscription)
    app.router.add_delete(subscription, delete_subscription)
    app.router.add_get(f"/{{topic:.+}}/{subscriptions}{{_s:/?}}", list_subscriptions)
    app.router.add_get("/{name:.+}", get_entity)
    app.router.add_put("/{name:.+}", put_entity)
    app.router.add_delete("/{name:.+}", delete_entity)
    return app
