"""Shared access keys over the management API: who may call it, and regenerating a rule's keys.

The management API needs ``Manage``: from a namespace rule, or from a queue's or topic's own rule
for requests about that entity (its path, its subscriptions and rules, its own authorization
rules). :func:`authorize_request` decides that for the middleware in ``admin.http``.

``POST /$authorizationrules/{rule}/regeneratekeys`` (namespace rule) and
``POST /{entity}/$authorizationrules/{rule}/regeneratekeys`` (a queue's or topic's rule) take
``{"keyType": "PrimaryKey" | "SecondaryKey", "key": optional}``, as ARM's ``regenerateKeys`` does,
and answer ARM's ``AccessKeys`` shape: ``keyName``, ``primaryKey``, ``secondaryKey`` and the two
connection strings. The new key is stored by the broker before the answer; tokens signed with the
old key are refused from then on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from aiohttp import web

from sodalite.admin.control import Caller, ControlPlane, KeyRecord
from sodalite.errors import ArgumentError, EntityNotFound, Unauthorized
from sodalite.model.authorization import (
    KEY_TYPES,
    AccessRights,
    Authorization,
    AuthorizationRule,
    authorize,
    missing_right,
)

RULES_SEGMENT = "$authorizationrules"


class KeyAuthority(Protocol):
    """What the ATOM API needs to authorize its requests: the namespace's and entities' rules."""

    def namespace_rules(self) -> Sequence[AuthorizationRule]: ...

    def entity_rules(self, path: str) -> Sequence[AuthorizationRule] | None:
        """A queue's or topic's own rules (by lower-cased path); None when ``path`` is neither."""


KEYS: web.AppKey[KeyAuthority] = web.AppKey("keys", KeyAuthority)


def authorize_request(keys: KeyAuthority, token: str, path: str, method: str = "GET", host: str = "",
                      missing: Callable[[], bool] | None = None) -> Authorization:
    """The token's authorization for the management API's ``path`` (``host``: the request's host name, which
    an audience without a scheme may open with); raises Unauthorized without Manage.

    ``missing`` (a read): whether ``path`` names nothing. A valid token without Manage then gets
    EntityNotFound (404) for a queue, topic or rule, as Service Bus answers; it is told Unauthorized only
    of what exists. Subscription requests stay Unauthorized (Service Bus names the operation refused, the
    Go SDK's ``TestAdminClient_LackPermissions_Subscription``). A bad signature, an expired token or
    another audience is Unauthorized whatever the path names."""
    target = path.strip("/")
    granted = authorize(token, keys.namespace_rules(), keys.entity_rules, target, time.time(), host)
    if not granted.covers(target):
        raise Unauthorized(f"the token does not cover '/{target}'")
    if not granted.allows(AccessRights.MANAGE):
        if missing is not None and _subscription_operation(method, target) is None and missing():
            raise EntityNotFound(f"the messaging entity '/{target}' could not be found")
        raise missing_manage(method, target)
    return granted


#: The subscription operations' names in Service Bus's refusals, by method (a list is a GET of the collection).
_SUBSCRIPTION_OPERATIONS = {"GET": "GetSubscription", "PUT": "CreateOrUpdateSubscription",
                            "DELETE": "DeleteSubscription"}


def missing_manage(method: str, path: str) -> Unauthorized:
    """A request without Manage refused in Service Bus's words, which the SDKs' tests compare (the Go SDK's
    ``TestAdminClient_LackPermissions_*``): a GET or list needs ``Manage,EntityRead``, a create or update
    ``Manage,EntityWrite``, a delete ``Manage,EntityDelete``; subscription requests name the operation,
    with the sub-code Service Bus also puts in the status line (``admin.http`` does that)."""
    method = method.upper()
    operation = _subscription_operation(method, path)
    if operation is not None:
        return Unauthorized(f"{SUBCODE_PREFIX}40100: Unauthorized : Unauthorized access for '{operation}' operation")
    if method == "GET":
        return Unauthorized("Manage,EntityRead claims required for this operation.")
    if method == "PUT":
        return Unauthorized("Authorization failed for specified action: Manage,EntityWrite.")
    if method == "DELETE":
        return Unauthorized("Authorization failed for specified action: Manage,EntityDelete.")
    return missing_right(AccessRights.MANAGE)


def _subscription_operation(method: str, path: str) -> str | None:
    """The operation Service Bus names when it refuses a subscription request (None: not one)."""
    parts = [part.lower() for part in path.strip("/").split("/")]
    if len(parts) >= 3 and parts[-2] == "subscriptions":  # topic/subscriptions/name
        return _SUBSCRIPTION_OPERATIONS.get(method.upper())
    if len(parts) >= 2 and parts[-1] == "subscriptions" and method.upper() == "GET":  # topic/subscriptions
        return "EnumerateSubscriptions"
    return None


SUBCODE_PREFIX = "SubCode="  # an error description that opens with it is also the response's status line


def access_keys(record: KeyRecord) -> dict[str, str | None]:
    """ARM's ``AccessKeys`` for a key record."""
    return {
        "keyName": record.key_name,
        "primaryKey": record.primary_key,
        "secondaryKey": record.secondary_key,
        "primaryConnectionString": record.primary_connection_string,
        "secondaryConnectionString": record.secondary_connection_string,
    }


Who = Callable[[web.Request], tuple[ControlPlane, Caller]]
WHO: web.AppKey[Who] = web.AppKey("keys-who")


async def _regenerate(request: web.Request) -> web.Response:
    control, caller = request.app[WHO](request)
    entity = request.match_info.get("entity")
    try:
        body = json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise ArgumentError("the request body must be JSON: {\"keyType\": \"PrimaryKey\"|\"SecondaryKey\"}") from None
    if not isinstance(body, dict):
        raise ArgumentError("the request body must be a JSON object")
    key_type = body.get("keyType")
    if key_type not in KEY_TYPES:
        raise ArgumentError(f"keyType must be PrimaryKey or SecondaryKey, got {key_type!r}")
    key = body.get("key")
    if key is not None and not isinstance(key, str):
        raise ArgumentError("key must be a string")
    record = await control.regenerate_key(caller, entity, request.match_info["rule"], key_type, key)
    return web.json_response(access_keys(record))


def add_routes(app: web.Application, who: Who) -> None:
    """Register the regenerate-keys routes (POST; the ATOM API has no POST routes they could shadow);
    ``who`` gives the control plane, which regenerates the key, and the request's caller."""
    app[WHO] = who
    app.router.add_post(f"/{RULES_SEGMENT}/{{rule}}/regeneratekeys", _regenerate)
    app.router.add_post(f"/{{entity:.+}}/{RULES_SEGMENT}/{{rule}}/regeneratekeys", _regenerate)
