"""The control plane's JSON API under ``/api/v1/``, and the console's login, on the management ports.

Theory of operation: each route reads its request into the control plane's typed arguments, calls
one :class:`~sodalite.admin.control.ControlPlane` operation and answers its record as JSON; it
composes nothing of its own. The OpenAPI document at ``/api/v1/openapi.json`` describes every
route (no token needed to read it).

Who calls: ``Authorization: Bearer <SAS token>`` (a ``SharedAccessSignature ...`` token, as the
SDK makes them; the rights come from its rule), or the session cookie the console's login set.
The login (``POST /api/v1/login`` with a key name and key) signs a SAS token with that key, checks
it against the namespace's rules, and keeps it server-side behind a random session id; the cookie
is HttpOnly and SameSite=Strict, and a request that changes something with the cookie must carry
the session's CSRF token in ``X-CSRF-Token``. A request that changes something from another origin
(``Origin`` not this host, or ``Sec-Fetch-Site: cross-site``) is refused whatever its credentials.

Errors are 4xx/5xx with a Service Bus-style JSON body, ``{"error": {"code", "message", "condition",
"status", "trackingId"}}``; every check (authorization, body, arguments, filter syntax) runs before
anything changes, so a refused request changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from sodalite.admin.control import (
    KINDS,
    MAX_PEEK,
    Caller,
    ControlPlane,
    EntityProperties,
    Selection,
    SendRequest,
    SubQueueName,
    to_json,
)
from sodalite.admin.openapi import document
from sodalite.errors import (
    ArgumentError,
    EntityNotFound,
    Forbidden,
    InternalError,
    PayloadTooLarge,
    SodaliteError,
    Unauthorized,
)
from sodalite.model import sas
from sodalite.model.entities import RuleDescription

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
COOKIE = "sodalite_session"
CSRF_HEADER = "X-CSRF-Token"
MAX_BODY = 1024 * 1024 + 64 * 1024  # a 1 MB message body, base64 and JSON aside
SESSION_SECONDS = 3600
CONTROL: web.AppKey[ControlPlane] = web.AppKey("control", ControlPlane)
Clock = Callable[[], float]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CODES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "MessagingEntityNotFound",
          409: "MessagingEntityAlreadyExists", 413: "RequestEntityTooLarge", 500: "InternalServerError",
          503: "ServerBusy"}


@dataclass(slots=True)
class Session:
    token: str
    key_name: str
    csrf: str
    expires_at: float


class Sessions:
    """The console's logins, kept in memory: a restart logs everyone out."""

    def __init__(self, clock: Clock = time.time, lifetime: float = SESSION_SECONDS) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self._sessions: dict[str, Session] = {}

    def open(self, token: str, key_name: str) -> tuple[str, Session]:
        now = self.clock()
        for sid in [s for s, v in self._sessions.items() if v.expires_at <= now]:
            del self._sessions[sid]
        sid = secrets.token_urlsafe(32)
        session = Session(token, key_name, secrets.token_urlsafe(24), now + self.lifetime)
        self._sessions[sid] = session
        return sid, session

    def get(self, sid: str) -> Session:
        session = self._sessions.get(sid)
        if session is None:
            raise Unauthorized("the login is unknown or has ended: log in again")
        if session.expires_at <= self.clock():
            del self._sessions[sid]
            raise Unauthorized("the login has expired: log in again")
        return session

    def close(self, sid: str) -> None:
        self._sessions.pop(sid, None)


SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)


def error_response(exc: SodaliteError) -> web.Response:
    tracking_id = uuid.uuid4().hex
    status = exc.http_status
    code = _CODES.get(status, "Error")
    log.log(logging.INFO if status < 500 else logging.WARNING, "JSON API error %s %s: %s TrackingId:%s",
            status, exc.condition, exc.description, tracking_id,
            extra={"tracking_id": tracking_id, "condition": exc.condition, "status": status, "kind": "http"})
    body = {"error": {"code": code, "message": f"{exc.description} TrackingId:{tracking_id}",
                      "condition": exc.condition, "status": status, "trackingId": tracking_id}}
    return web.json_response(body, status=status)


def _changes(request: web.Request) -> bool:
    return request.method not in ("GET", "HEAD", "OPTIONS")


def _check_origin(request: web.Request) -> None:
    """Refuse a change coming from another origin (the browser says so in Origin / Sec-Fetch-Site)."""
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        raise Forbidden("a cross-origin request cannot change anything")
    origin = request.headers.get("Origin")
    if origin is not None and origin != "null":
        if urlsplit(origin).netloc.lower() != request.host.lower():
            raise Forbidden(f"a request from {origin} cannot change anything here")
    elif origin == "null":
        raise Forbidden("a request from an opaque origin cannot change anything")


def caller_of(request: web.Request) -> Caller:
    """The caller, from the bearer token or the session cookie (with its CSRF token on changes)."""
    header = request.headers.get("Authorization", "")
    if header:
        token = header[len("Bearer "):].strip() if header.lower().startswith("bearer ") else header.strip()
        parsed = sas.parse_token(token)
        return Caller(token, parsed.key_name)
    sid = request.cookies.get(COOKIE)
    if not sid:
        raise Unauthorized("no credentials: send 'Authorization: Bearer <SAS token>' or log in")
    session = request.app[SESSIONS].get(sid)
    if _changes(request) and not secrets.compare_digest(request.headers.get(CSRF_HEADER, ""), session.csrf):
        raise Forbidden(f"the {CSRF_HEADER} header is missing or does not match the login")
    return Caller(session.token, session.key_name)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors of the JSON API as JSON (the ATOM API's middleware leaves these paths alone)."""
    if not request.path.startswith(PREFIX + "/"):
        return await handler(request)
    try:
        if _changes(request):
            _check_origin(request)
        return await handler(request)
    except SodaliteError as exc:
        return error_response(exc)
    except web.HTTPRequestEntityTooLarge:
        return error_response(PayloadTooLarge(f"the request body is over the limit of {MAX_BODY} bytes"))
    except web.HTTPException as exc:
        if exc.status >= 400:
            return error_response(_http_error(exc))
        raise
    except Exception as exc:
        log.exception("JSON API request failed: %s %s", request.method, request.path)
        return error_response(InternalError(f"internal error: {exc}"))


def _http_error(exc: web.HTTPException) -> SodaliteError:
    """aiohttp's own refusals (no route, wrong method) as our errors."""
    if exc.status == 404:
        return EntityNotFound(f"there is no such API route ({exc.reason})")
    if exc.status == 405:
        return ArgumentError("the API route does not take this method")
    return ArgumentError(exc.reason)


# ---- request parsing ---------------------------------------------------------------------------------


async def _body(request: web.Request) -> dict[str, object]:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise PayloadTooLarge(f"the request body is {request.content_length} bytes, over the limit of {MAX_BODY}")
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise PayloadTooLarge(f"the request body is over the limit of {MAX_BODY} bytes")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ArgumentError("the request body must be a JSON object")
    return value


def _opt_str(body: Mapping[str, object], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"{name} must be a string")
    return value


def _required_strs(body: Mapping[str, object], *names: str) -> tuple[str, ...]:
    """The named string fields, every one present and not empty (else one error naming them all)."""
    values = tuple(_opt_str(body, name) for name in names)
    present = tuple(value for value in values if value)
    if len(present) != len(names):
        raise ArgumentError(f"{' and '.join(names)} are required")
    return present


def _opt_int(body: Mapping[str, object], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ArgumentError(f"{name} must be an integer")
    return value


def _object(body: Mapping[str, object], name: str) -> dict[str, object]:
    value = body.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ArgumentError(f"{name} must be a JSON object")
    return value


def _int_query(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, str(default)))
    except ValueError:
        raise ArgumentError(f"{name} must be an integer") from None


def _sub_queue(value: object) -> SubQueueName:
    if value is None:
        return SubQueueName.ACTIVE
    if not isinstance(value, str):
        raise ArgumentError("subQueue must be a string")
    return SubQueueName.parse(value)


def _sequence_numbers(body: Mapping[str, object]) -> tuple[int, ...] | None:
    value = body.get("sequenceNumbers")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise ArgumentError("sequenceNumbers must be a list of integers")
    return tuple(value)


def _send_request(body: Mapping[str, object]) -> SendRequest:
    text = body.get("body")
    encoded = body.get("bodyBase64")
    if text is not None and encoded is not None:
        raise ArgumentError("give body (text) or bodyBase64, not both")
    if encoded is not None:
        if not isinstance(encoded, str):
            raise ArgumentError("bodyBase64 must be a string")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ArgumentError("bodyBase64 is not valid base64") from None
    elif text is None:
        data = b""
    elif isinstance(text, str):
        data = text.encode("utf-8")
    else:
        data = json.dumps(text).encode("utf-8")  # a JSON value sent as its text
    properties = _object(body, "applicationProperties")
    for key, value in properties.items():
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise ArgumentError(f"applicationProperties.{key} must be a string, number, boolean or null")
    ttl = _opt_int(body, "timeToLiveMs")
    if ttl is not None and ttl <= 0:
        raise ArgumentError("timeToLiveMs must be positive")
    return SendRequest(
        body=data, content_type=_opt_str(body, "contentType"), message_id=_opt_str(body, "messageId"),
        session_id=_opt_str(body, "sessionId"), partition_key=_opt_str(body, "partitionKey"),
        subject=_opt_str(body, "subject"), correlation_id=_opt_str(body, "correlationId"),
        time_to_live_ms=ttl, scheduled_enqueue_time=_opt_int(body, "scheduledEnqueueTimeMs"),
        application_properties={k: v for k, v in properties.items() if v is not None})


def _path(request: web.Request) -> str:
    return request.match_info["path"].strip("/")


def _ok(value: object, status: int = 200) -> web.Response:
    return web.json_response(to_json(value), status=status)


# ---- handlers ------------------------------------------------------------------------------------------


async def login(request: web.Request) -> web.Response:
    body = await _body(request)
    key_name, key = _required_strs(body, "keyName", "key")
    sessions = request.app[SESSIONS]
    control = request.app[CONTROL]
    expiry = int(sessions.clock() + sessions.lifetime)
    token = sas.generate_token(f"sb://{request.host}/", key_name, key, max(expiry, int(time.time()) + 60))
    control.runtime.authorize(token, "")  # a wrong key or key name: Unauthorized
    sid, session = sessions.open(token, key_name)
    response = web.json_response({"keyName": key_name, "csrfToken": session.csrf,
                                  "expiresAt": int(session.expires_at * 1000), "namespace": control.namespace})
    response.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/",
                        secure=request.secure, max_age=int(sessions.lifetime))
    return response


async def logout(request: web.Request) -> web.Response:
    sid = request.cookies.get(COOKIE)
    if sid:
        request.app[SESSIONS].close(sid)
    response = web.json_response({})
    response.del_cookie(COOKIE, path="/")
    return response


async def session_info(request: web.Request) -> web.Response:
    sid = request.cookies.get(COOKIE)
    if not sid:
        raise Unauthorized("not logged in")
    session = request.app[SESSIONS].get(sid)
    return web.json_response({"keyName": session.key_name, "csrfToken": session.csrf,
                              "expiresAt": int(session.expires_at * 1000),
                              "namespace": request.app[CONTROL].namespace})


async def namespace(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].namespace_record(caller_of(request)))


async def list_entities(request: web.Request) -> web.Response:
    """Every entity, or (``?kind=queue|topic|subscription``, ``?topic=<topic>``) those of a kind or topic."""
    kind, topic = request.query.get("kind"), request.query.get("topic")
    if kind is None and topic is None:
        return _ok(request.app[CONTROL].namespace_record(caller_of(request)).entities)
    if kind is not None and kind not in KINDS:
        raise ArgumentError(f"kind must be queue, topic or subscription, got {kind!r}")
    if topic is not None and kind not in (None, "subscription"):
        raise ArgumentError("a topic lists its subscriptions: kind=subscription, or no kind")
    return _ok(request.app[CONTROL].entities(caller_of(request), kind or "subscription", topic))


async def create_entity(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    kind, path = _required_strs(body, "kind", "path")
    rule = body.get("rule")
    if rule is not None and not isinstance(rule, dict):
        raise ArgumentError("rule must be a JSON object")
    if kind not in KINDS:
        raise ArgumentError(f"kind must be queue, topic or subscription, got {kind!r}")
    properties = _properties(kind, _object(body, "properties"))
    first = RuleDescription.from_json(rule, path="rule") if rule else None
    record = await request.app[CONTROL].create_entity(caller, path.strip("/"), properties, first)
    return _ok(record, 201)


def _properties(kind: str, given: Mapping[str, object]) -> EntityProperties:
    """Config.json's names for a queue's, topic's or subscription's properties, checked."""
    return KINDS[kind].from_json(given, path="properties")


async def get_entity(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].entity(caller_of(request), _path(request)))


async def update_entity(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    control = request.app[CONTROL]
    entity = control.entity(caller, _path(request))
    properties = _properties(entity.kind, _object(body, "properties"))
    return _ok(await control.update_entity(caller, entity.path, properties))


async def delete_entity(request: web.Request) -> web.Response:
    await request.app[CONTROL].delete_entity(caller_of(request), _path(request))
    return web.json_response({})


async def peek(request: web.Request) -> web.Response:
    caller = caller_of(request)
    sub = _sub_queue(request.query.get("subQueue"))
    start = _int_query(request, "fromSequenceNumber", 0)
    count = _int_query(request, "count", 50)
    found = await request.app[CONTROL].peek(caller, _path(request), sub, start, count)
    following = found[-1].sequence_number + 1 if len(found) == count else None
    return _ok({"messages": found, "nextSequenceNumber": following})


async def show_message(request: web.Request) -> web.Response:
    caller = caller_of(request)
    sub = _sub_queue(request.query.get("subQueue"))
    try:
        seq = int(request.match_info["seq"])
    except ValueError:
        raise ArgumentError("the sequence number must be an integer") from None
    return _ok(await request.app[CONTROL].message(caller, _path(request), sub, seq))


async def send(request: web.Request) -> web.Response:
    caller = caller_of(request)
    message = _send_request(await _body(request))
    await request.app[CONTROL].send(caller, _path(request), message)
    return web.json_response({"sent": 1}, status=201)


async def purge(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    sub = _sub_queue(body.get("subQueue"))
    if body.get("background") is True:  # answered at once; its progress at /operations/{id}
        return _ok(await request.app[CONTROL].start_purge(caller, _path(request), sub), 202)
    count = await request.app[CONTROL].purge(caller, _path(request), sub)
    return web.json_response({"purged": count})


async def move(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    numbers = _sequence_numbers(body)
    sql = _opt_str(body, "filter")
    everything = body.get("all") is True
    chosen = sum((numbers is not None, bool(sql), everything))
    if chosen != 1:
        raise ArgumentError("choose the messages with exactly one of sequenceNumbers, filter, or all: true")
    control = request.app[CONTROL]
    sub, selection, target = _sub_queue(body.get("subQueue")), Selection(numbers, sql), _opt_str(body, "target")
    if body.get("background") is True:
        operation = await control.start_move(caller, _path(request), sub, selection, target)
        return _ok(operation, 202)
    return _ok(await control.move(caller, _path(request), sub, selection, target, dry_run=body.get("dryRun") is True))


async def operation(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].operation(caller_of(request), request.match_info["id"]))


async def cancel_scheduled(request: web.Request) -> web.Response:
    caller = caller_of(request)
    numbers = _sequence_numbers(await _body(request))
    if not numbers:
        raise ArgumentError("sequenceNumbers is required")
    await request.app[CONTROL].cancel_scheduled(caller, _path(request), numbers)
    return web.json_response({"cancelled": len(numbers)})


async def list_rules(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].rules(caller_of(request), _path(request)))


async def put_rule(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    rule = _object(body, "rule") or body
    name = request.match_info.get("rule")
    if name is not None:
        rule = {**rule, "Name": name}
    description = RuleDescription.from_json(rule, path="rule")
    control = request.app[CONTROL]
    entity = control.entity(caller, _path(request))
    if entity.kind != "subscription":
        raise ArgumentError(f"'{entity.path}' is a {entity.kind}: only subscriptions have rules")
    record = await control.put_rule(caller, entity.path, description, create=name is None)
    return _ok(record, 201 if name is None else 200)


async def delete_rule(request: web.Request) -> web.Response:
    await request.app[CONTROL].delete_rule(caller_of(request), _path(request), request.match_info["rule"])
    return web.json_response({})


async def keys(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].keys(caller_of(request)))


async def regenerate_key(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    key_name, key_type = _required_strs(body, "keyName", "keyType")
    return _ok(await request.app[CONTROL].regenerate_key(caller, _opt_str(body, "entity"), key_name, key_type,
                                                         _opt_str(body, "key")))


async def stores(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROL].stores(caller_of(request)))


async def switch_store(request: web.Request) -> web.Response:
    caller = caller_of(request)
    online = request.match_info["state"] == "online"
    return _ok(request.app[CONTROL].set_store_online(caller, request.match_info["name"], online))


async def backup(request: web.Request) -> web.Response:
    body = await _body(request)
    return _ok(await request.app[CONTROL].backup(caller_of(request), body.get("destination")))


async def geo_status(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL].geo_status(caller_of(request)))


async def geo_promote(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _body(request)
    return web.json_response(await request.app[CONTROL].geo_promote(caller, body.get("site"), body.get("mode")))


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document(MAX_PEEK, MAX_BODY))


def add_routes(app: web.Application, control: ControlPlane, sessions: Sessions | None = None) -> None:
    """Register the JSON API; call before the ATOM API's catch-all entity routes."""
    app[CONTROL] = control
    app[SESSIONS] = sessions if sessions is not None else Sessions()
    app.middlewares.append(json_errors)
    entity = PREFIX + "/entities/{path:[^$]+}"
    r = app.router
    r.add_get(PREFIX + "/openapi.json", openapi)
    r.add_post(PREFIX + "/login", login)
    r.add_post(PREFIX + "/logout", logout)
    r.add_get(PREFIX + "/session", session_info)
    r.add_get(PREFIX + "/namespace", namespace)
    r.add_get(PREFIX + "/entities", list_entities)
    r.add_post(PREFIX + "/entities", create_entity)
    r.add_get(entity + "/$messages", peek)
    r.add_get(entity + "/$messages/{seq}", show_message)
    r.add_post(entity + "/$send", send)
    r.add_post(entity + "/$purge", purge)
    r.add_post(entity + "/$move", move)
    r.add_post(entity + "/$cancel-scheduled", cancel_scheduled)
    r.add_get(entity + "/$rules", list_rules)
    r.add_post(entity + "/$rules", put_rule)
    r.add_put(entity + "/$rules/{rule}", put_rule)
    r.add_delete(entity + "/$rules/{rule}", delete_rule)
    r.add_get(entity, get_entity)
    r.add_put(entity, update_entity)
    r.add_delete(entity, delete_entity)
    r.add_get(PREFIX + "/operations/{id}", operation)
    r.add_get(PREFIX + "/keys", keys)
    r.add_post(PREFIX + "/keys/regenerate", regenerate_key)
    r.add_get(PREFIX + "/stores", stores)
    r.add_post(PREFIX + "/stores/{name}/{state:offline|online}", switch_store)
    r.add_post(PREFIX + "/backup", backup)
    r.add_get(PREFIX + "/geo", geo_status)
    r.add_post(PREFIX + "/geo/promote", geo_promote)
    r.add_route("*", PREFIX + "/{tail:.*}", _no_route)


async def _no_route(request: web.Request) -> web.Response:
    raise EntityNotFound(f"there is no API route {request.method} {request.path}")
