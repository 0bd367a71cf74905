"""The web console at ``/console/``: a small static front end (no build step) over the JSON API.

Every asset is served from the package by Sodalite itself (no CDN): ``index.html``, ``console.js``
and ``console.css``. The page logs in through ``POST /api/v1/login`` (key name and key), keeps the
session's CSRF token in memory, and calls the JSON API for everything, so the console can do no
more than the API lets its user do. A Content-Security-Policy of ``'self'`` keeps other origins'
scripts, styles and frames out.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

_ASSETS = {
    "": ("index.html", "text/html"),
    "index.html": ("index.html", "text/html"),
    "console.js": ("console.js", "text/javascript"),
    "console.css": ("console.css", "text/css"),
}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
}


def _asset(name: str) -> bytes:
    return resources.files("sodalite.admin").joinpath("console_static", name).read_bytes()


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/console/")


async def _serve(request: web.Request) -> web.Response:
    found = _ASSETS.get(request.match_info.get("asset", ""))
    if found is None:
        return web.Response(status=404, text="not found", headers=_HEADERS)
    name, content_type = found
    return web.Response(body=_asset(name), content_type=content_type, charset="utf-8", headers=_HEADERS)


async def _refuse(request: web.Request) -> web.Response:
    return web.Response(status=405, text="the console only serves GET", headers=_HEADERS)


def add_routes(app: web.Application) -> None:
    """Register the console's routes (before the ATOM API's catch-all entity routes). Every method on
    ``/console`` and below is the console's, so nothing there reaches the ATOM API (whose token check
    these paths skip)."""
    app.router.add_get("/console", _redirect)
    app.router.add_get("/console/", _serve)
    app.router.add_get("/console/{asset}", _serve)
    app.router.add_route("*", "/console", _refuse)
    app.router.add_route("*", "/console/{tail:.*}", _refuse)
