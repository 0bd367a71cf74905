"""The auth step: ``$cbs`` put-tokens, the grants they give, and the checks made with them.

Theory of operation. A client proves its rights by sending a SAS token to the ``$cbs`` node
(sdk-wire-contract.md 2); the put-token is always accepted at the transfer level and answered on
the response link with a status (202, or the error's HTTP status). A valid token becomes a grant
on this connection: an audience path and the rights of the key that signed it, until it expires.

* At attach the router asks :meth:`ConnectionAuth.authorise` whether a live grant covers the entity
  with the right the link needs (Send for a client sender, Listen for a receiver; ``$management``
  operations check theirs per request).
* One timer per connection fires at the earliest expiry of a live grant; then every link whose
  endpoint ``needs()`` a right no live grant still gives is detached with ``amqp:unauthorized-access``.
* A client may instead log in with SASL PLAIN, a rule's key name and key as user name and password
  (what a JMS client does, as with Service Bus Premium): :meth:`ConnectionAuth.key_login` turns them
  into grants that do not expire (``model.authorization.key_grants``: a namespace rule namespace-wide,
  an entity's own rule on that entity only). They last while the rule still has that key: when keys
  or rules change, :meth:`ConnectionAuth.key_still_valid` tells the connection whether to close.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from sodalite.amqp import events as ev
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Accepted
from sodalite.amqp.types import Int
from sodalite.errors import EntityNotFound, SodaliteError, Unauthorized
from sodalite.model import sas
from sodalite.model.authorization import AccessRights, Authorization, key_grants, missing_right
from sodalite.server.amqp_errors import client_error, report
from sodalite.server.endpoint import ConnectionPort, ControlLink, Endpoint
from sodalite.server.entity_settings import SubQueue
from sodalite.server.messages import decode_request, encode_response
from sodalite.server.registry import Entity

log = logging.getLogger(__name__)

EXPIRY_SLACK_S = 0.05  # the expiry timer fires this long after the earliest expiry, so the grant is gone


class ConnectionAuth:
    """The grants of one connection and the checks made against them."""

    __slots__ = ("_expiry", "_key", "_key_grants", "connection", "grants", "key_name")

    def __init__(self, connection: ConnectionPort) -> None:
        self.connection = connection
        self.grants: list[Authorization] = []  # from this connection's put-tokens (and its SASL PLAIN login)
        self._expiry: asyncio.TimerHandle | None = None
        self.key_name: str | None = None  # the rule a SASL PLAIN login named, once it succeeded
        self._key: str | None = None
        self._key_grants: tuple[Authorization, ...] = ()

    @property
    def authenticated(self) -> bool:
        """The client proved a key: a SASL PLAIN login, or a put-token that was accepted."""
        return self.key_name is not None or bool(self.grants)

    def key_login(self, key_name: str, key: str) -> bool:
        """SASL PLAIN with a rule's key name and key: True (and the rule's rights, as grants that do not
        expire) if the key is one of that rule's keys, on the namespace or on a queue or topic."""
        grants = key_grants(key_name, key, self.connection.broker.authorization_rules,
                            self.connection.broker.entity_scopes())
        if not grants:
            return False
        self.key_name, self._key, self._key_grants = key_name, key, grants
        self.grants.extend(grants)
        return True

    def key_still_valid(self) -> bool:
        """After keys or rules changed: whether the key this connection logged in with still grants what
        it granted (False: it was regenerated, or its rule deleted or changed; the connection must go)."""
        if self.key_name is None or self._key is None:
            return True
        now = key_grants(self.key_name, self._key, self.connection.broker.authorization_rules,
                         self.connection.broker.entity_scopes())
        return set(self._key_grants) <= set(now)

    def authorise(self, path: str, right: AccessRights | None) -> None:
        """Raise Unauthorized unless a live token on this connection covers ``path`` with ``right``."""
        now = time.time()
        covering = [g for g in self.grants if g.expires_at > now and g.covers(path)]
        if not covering:
            if self.key_name is not None:
                raise Unauthorized(f"the key '{self.key_name}' this connection logged in with does not grant "
                                   f"access to '{path}'")
            raise Unauthorized(f"no valid token covers '{path}'; send a put-token to $cbs first")
        if right is not None and not any(g.allows(right) for g in covering):
            raise missing_right(right)

    def authorised_entity(self, path: str, right: AccessRights | None) -> tuple[Entity, SubQueue]:
        """The entity and sub-queue ``path`` names, if a live token on this connection covers the path."""
        self.authorise(path, right)
        main, sub_queue = SubQueue.split(path)
        entity = self.connection.broker.entity(main)
        if entity is None:
            raise EntityNotFound(f"the messaging entity '{path}' could not be found")
        return entity, sub_queue

    def put_token(self, props: dict[str, Any], body: Any, hostname: str) -> None:
        """Check a put-token request and add its grant; raises the error the response reports."""
        if props.get("operation") != "put-token":
            raise Unauthorized(f"unsupported $cbs operation {props.get('operation')!r}")
        if not isinstance(body, str):
            raise Unauthorized("the token must be a string")
        name = str(props.get("name") or "")
        token = sas.parse_token(body)
        token_host, token_path = sas.audience_path(token.audience)
        name_host, name_path = sas.audience_path(name) if name else (token_host, token_path)
        grant = self.connection.broker.authorize(body, name_path)  # the namespace's keys, or the entity's own
        if token_host != name_host or (hostname and token_host and token_host != sas.host_of(hostname)):
            raise Unauthorized(f"the audience '{token.audience}' is outside this namespace")
        if not sas.covers(token_path, name_path):
            raise Unauthorized(f"the token for '{token.audience}' does not cover '{name}'")
        self.grants = [g for g in self.grants if g.expires_at > time.time()]
        self.grants.append(grant)
        self._arm_expiry()

    # ---- token expiry ----------------------------------------------------------------------------

    def _arm_expiry(self) -> None:
        """One timer, at the earliest expiry of a live grant: then links no grant covers any more go."""
        self.cancel()
        now = time.time()
        live = [g.expires_at for g in self.grants if now < g.expires_at < math.inf]
        if live:
            self._expiry = asyncio.get_running_loop().call_later(min(live) - now + EXPIRY_SLACK_S, self._on_expiry)

    def _on_expiry(self) -> None:
        self._expiry = None
        conn = self.connection
        now = time.time()
        self.grants = [g for g in self.grants if g.expires_at > now]
        for link in conn.links():
            endpoint = link.context
            needs = endpoint.needs() if isinstance(endpoint, Endpoint) else None
            if needs is None or not link.attached:
                continue
            try:
                self.authorise(*needs)
            except Unauthorized as exc:
                error = Unauthorized(f"the token for '{needs[0]}' expired: {exc.description}")
                endpoint.on_detached()
                link.detach(client_error(error, conn.broker.metrics, conn.peer, needs[0]))
        conn.flush_soon()
        self._arm_expiry()

    def cancel(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None


class CbsLink(ControlLink):
    """A link of the ``$cbs`` node: put-token requests in, their responses out."""

    __slots__ = ("auth", "hostname")

    def __init__(self, connection: ConnectionPort, node: str, auth: ConnectionAuth, hostname: str) -> None:
        super().__init__(connection, node)
        self.auth = auth
        self.hostname = hostname  # the open's hostname: a token's audience must name this namespace

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        conn = self.connection
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())  # never reject a put-token (contract 2)
        try:
            request = decode_request(delivery.payload)
        except SodaliteError as exc:
            log.info("malformed put-token from %s: %s", conn.peer, exc)
            return
        status, description = 202, "Accepted"
        try:
            self.auth.put_token(request.application_properties, request.body, self.hostname)
        except SodaliteError as exc:
            status, description = exc.http_status, report(exc, conn.broker.metrics, conn.peer, None, "cbs")[1]
        self.respond(link, encode_response(
            request.message_id, {"status-code": Int(status), "status-description": description}, None))
