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
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web

from sodalite.errors import ArgumentError, Unauthorized
from sodalite.model.authorization import (
    KEY_TYPES,
    AccessRights,
    Authorization,
    AuthorizationRule,
    KeyType,
    authorize,
    missing_right,
)

RULES_SEGMENT = "$authorizationrules"


class KeyAuthority(Protocol):
    """What the management plane needs from the broker to authorize requests and regenerate keys."""

    def namespace_rules(self) -> Sequence[AuthorizationRule]: ...

    def entity_rules(self, path: str) -> Sequence[AuthorizationRule] | None:
        """A queue's or topic's own rules (by lower-cased path); None when ``path`` is neither."""

    def connection_string(self, key_name: str, key: str, entity: str | None) -> str:
        """A connection string for the broker's AMQP listener with this key (and ``EntityPath``)."""

    async def regenerate_key(self, entity: str | None, key_name: str, key_type: KeyType,
                             key: str | None) -> AuthorizationRule:
        """Replace and store the key; raises EntityNotFound for an unknown entity or rule."""


KEYS: web.AppKey[KeyAuthority] = web.AppKey("keys", KeyAuthority)


def authorize_request(keys: KeyAuthority, token: str, path: str) -> Authorization:
    """The token's authorization for the management API's ``path``; raises Unauthorized without Manage."""
    target = path.strip("/")
    granted = authorize(token, keys.namespace_rules(), keys.entity_rules, target, time.time())
    if not granted.covers(target):
        raise Unauthorized(f"the token does not cover '/{target}'")
    if not granted.allows(AccessRights.MANAGE):
        raise missing_right(AccessRights.MANAGE)
    return granted


def access_keys(keys: KeyAuthority, rule: AuthorizationRule, entity: str | None) -> dict[str, str | None]:
    """ARM's ``AccessKeys`` for ``rule``."""
    def connection_string(key: str | None) -> str | None:
        return None if key is None else keys.connection_string(rule.key_name, key, entity)

    return {
        "keyName": rule.key_name,
        "primaryKey": rule.primary_key,
        "secondaryKey": rule.secondary_key,
        "primaryConnectionString": connection_string(rule.primary_key),
        "secondaryConnectionString": connection_string(rule.secondary_key),
    }


async def _regenerate(request: web.Request) -> web.Response:
    keys = request.app[KEYS]
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
    rule = await keys.regenerate_key(entity, request.match_info["rule"], key_type, key)
    return web.json_response(access_keys(keys, rule, entity))


def add_routes(app: web.Application) -> None:
    """Register the regenerate-keys routes (POST; the ATOM API has no POST routes they could shadow)."""
    app.router.add_post(f"/{RULES_SEGMENT}/{{rule}}/regeneratekeys", _regenerate)
    app.router.add_post(f"/{{entity:.+}}/{RULES_SEGMENT}/{{rule}}/regeneratekeys", _regenerate)
