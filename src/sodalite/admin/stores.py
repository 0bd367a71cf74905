"""The messaging stores over the management API: their state, and the operator's outage switch.

``GET /$stores`` lists the stores and whether each is online; ``POST /$stores/{name}/offline`` and
``POST /$stores/{name}/online`` take one out of service and bring it back (Manage, as every call of
this API). Offline, the store's partitions refuse work with a retryable server-busy error and a
partitioned entity's keyless sends go to its other partitions (outages seed); back online, every
acknowledged message is there again. Sodalite's own API: Service Bus has no such call. The routes
are a face of the control plane (``admin.control``), as ``/api/v1/stores`` is.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from sodalite.admin.control import Caller, ControlPlane, StoreRecord

Who = Callable[[web.Request], tuple[ControlPlane, Caller]]


def _answer(stores: list[StoreRecord]) -> web.Response:
    return web.json_response({"stores": [{"name": s.name, "online": s.online} for s in stores]})


def add_routes(app: web.Application, who: Who) -> None:
    """Register before the catch-all entity routes (``GET /{name}`` would take ``/$stores``); ``who``
    gives the control plane and the request's caller."""

    async def status(request: web.Request) -> web.Response:
        control, caller = who(request)
        return _answer(control.stores(caller))

    async def switch(request: web.Request) -> web.Response:
        control, caller = who(request)
        online = request.match_info["state"] == "online"
        return _answer(control.set_store_online(caller, request.match_info["name"], online))

    app.router.add_get("/$stores", status)
    app.router.add_post("/$stores/{name}/{state:offline|online}", switch)
