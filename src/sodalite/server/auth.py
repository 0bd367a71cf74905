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

A put-token names an entity (its ``name``: the entity's URI, as the SDKs send it for each link). The
token is checked first (signature, expiry, audience: 401); then the entity must exist, or the answer
is 404, as Service Bus answers (the Go SDK's live tests expect it; the Python SDK then raises
ServiceBusAuthenticationError). The name is resolved to its entity: ``/$management``,
``/$DeadLetterQueue``, ``/$Transfer[/$DeadLetterQueue]`` are dropped, a subscription's path is the
subscription's. A name with no entity path (the namespace) is not looked up. When several nodes
share the store, an entity this node has not taken up yet may have been created through another:
the store is read (the follower's pass, now) before answering 404. A 404 on a connection that still
has links on that entity (a token refresh after the entity was deleted) detaches them with
``amqp:not-found``.
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
from sodalite.server.addresses import management_entity
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

    def check_token(self, props: dict[str, Any], body: Any, hostname: str) -> tuple[Authorization, str]:
        """Check a put-token request's token (signature, expiry, audience): its grant, and the lower-cased
        entity path its ``name`` gives ("" for the namespace). Raises Unauthorized."""
        if props.get("operation") != "put-token":
            raise Unauthorized(f"unsupported $cbs operation {props.get('operation')!r}")
        if not isinstance(body, str):
            raise Unauthorized("the token must be a string")
        name = str(props.get("name") or "")
        token = sas.parse_token(body)
        host = sas.host_of(hostname)  # the open's: an audience without a scheme may open with it
        token_host, token_path = sas.audience_path(token.audience, host)
        name_host, name_path = sas.audience_path(name, host) if name else (token_host, token_path)
        grant = self.connection.broker.authorize(body, name_path, host)  # the namespace's keys, or the entity's
        if token_host != name_host or (hostname and token_host and token_host != sas.host_of(hostname)):
            raise Unauthorized(f"the audience '{token.audience}' is outside this namespace")
        if not sas.covers(token_path, name_path):
            raise Unauthorized(f"the token for '{token.audience}' does not cover '{name}'")
        return grant, name_path

    def add_grant(self, grant: Authorization) -> None:
        self.grants = [g for g in self.grants if g.expires_at > time.time()]
        self.grants.append(grant)
        self._arm_expiry()

    def entity_of(self, path: str) -> Entity | None:
        """The entity a put-token's entity path names, known to this node (None: not known)."""
        return self.connection.broker.entity(entity_name(path))

    @staticmethod
    def not_found(path: str) -> EntityNotFound:
        return EntityNotFound(f"The messaging entity '{entity_name(path)}' could not be found.")

    def detach_links_of(self, path: str) -> None:
        """Detach this connection's links on the entity ``path`` names (it is gone) with amqp:not-found."""
        conn = self.connection
        gone = entity_name(path)
        for link in conn.links():
            endpoint = link.context
            needs = endpoint.needs() if isinstance(endpoint, Endpoint) else None
            if needs is None or not link.attached or entity_name(needs[0]) != gone:
                continue
            endpoint.on_detached()
            link.detach(client_error(self.not_found(path), conn.broker.metrics, conn.peer, gone))
        conn.flush_soon()

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


def entity_name(path: str) -> str:
    """The entity a lower-cased path is about: ``q/$management``, ``q/$deadletterqueue``,
    ``q/$transfer/$deadletterqueue`` and ``q/$transfer`` are ``q``'s; a subscription's path is its own."""
    path = path.strip("/")
    path = management_entity(path) or path
    path = SubQueue.split(path)[0]
    if path.endswith(TRANSFER_SUFFIX):
        path = path[: -len(TRANSFER_SUFFIX)]
    return path


TRANSFER_SUFFIX = "/$transfer"
_pending_lookups: set[asyncio.Task[None]] = set()  # put-tokens waiting for the store (kept from the GC)


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
        try:
            grant, path = self.auth.check_token(request.application_properties, request.body, self.hostname)
        except SodaliteError as exc:
            self._answer(link, request.message_id, exc)
            return
        if not path or self.auth.entity_of(path) is not None:
            self.auth.add_grant(grant)
            self._answer(link, request.message_id, None)
        elif conn.broker.worker.shared:  # created through another node, perhaps: read the store first
            task = asyncio.get_running_loop().create_task(self._after_store_read(link, request.message_id, grant, path))
            _pending_lookups.add(task)
            task.add_done_callback(_pending_lookups.discard)
        else:
            self._not_found(link, request.message_id, path)

    async def _after_store_read(self, link: Link, message_id: Any, grant: Authorization, path: str) -> None:
        try:
            await self.connection.broker.follow_entities()
        except Exception as exc:  # the store is away: the entity cannot be told missing
            log.warning("put-token for '%s' from %s: the store could not be read: %s", path, self.connection.peer, exc)
            self._answer(link, message_id, exc, entity_name(path))
            return
        if not link.attached:
            return  # the client went meanwhile: nothing to answer, no grant to keep
        if self.auth.entity_of(path) is not None:
            self.auth.add_grant(grant)
            self._answer(link, message_id, None)
        else:
            self._not_found(link, message_id, path)

    def _not_found(self, link: Link, message_id: Any, path: str) -> None:
        self._answer(link, message_id, self.auth.not_found(path), entity_name(path))
        self.auth.detach_links_of(path)  # a refresh after the entity went: its links go too

    def _answer(self, link: Link, message_id: Any, error: Exception | None, entity: str | None = None) -> None:
        conn = self.connection
        status, description = 202, "Accepted"
        if error is not None:
            reported, description = report(error, conn.broker.metrics, conn.peer, entity, "cbs")
            status = reported.http_status
        if not link.attached:
            return  # (the answer to a put-token that waited for the store, after the link went)
        self.respond(link, encode_response(
            message_id, {"status-code": Int(status), "status-description": description}, None))
        conn.flush_soon()
