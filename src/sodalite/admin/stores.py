"""The messaging stores over the management API: their state, and the operator's outage switch.

``GET /$stores`` lists the stores and whether each is online; ``POST /$stores/{name}/offline`` and
``POST /$stores/{name}/online`` take one out of service and bring it back (Manage, as every call of
this API). Offline, the store's partitions refuse work with a retryable server-busy error and a
partitioned entity's keyless sends go to its other partitions (outages seed); back online, every
acknowledged message is there again. Sodalite's own API: Service Bus has no such call.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web


class StoreSwitch(Protocol):
    def store_status(self) -> list[dict[str, Any]]:
        """``[{"name": ..., "online": bool}]``, the default store first."""

    def set_store_online(self, name: str, online: bool) -> None:
        """Raises EntityNotFound for an unknown store."""


STORES: web.AppKey[StoreSwitch] = web.AppKey("stores", StoreSwitch)


async def _status(request: web.Request) -> web.Response:
    return web.json_response({"stores": request.app[STORES].store_status()})


async def _switch(request: web.Request) -> web.Response:
    stores = request.app[STORES]
    stores.set_store_online(request.match_info["name"], request.match_info["state"] == "online")
    return web.json_response({"stores": stores.store_status()})


def add_routes(app: web.Application, stores: StoreSwitch) -> None:
    """Register before the catch-all entity routes (``GET /{name}`` would take ``/$stores``)."""
    app[STORES] = stores
    app.router.add_get("/$stores", _status)
    app.router.add_post("/$stores/{name}/{state:offline|online}", _switch)
