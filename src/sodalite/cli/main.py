"""``sodalite serve``: the broker process, its listeners and the management API.

The parser and the dispatch are in ``entry.py`` (the console script), which imports this module only
for ``serve``; ``main`` is kept here so ``python -m sodalite.cli.main`` works as before.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import json
import logging
import os
import signal
import socket
import ssl
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sodalite import __version__
from sodalite.admin import api, console
from sodalite.admin.control import ControlPlane
from sodalite.admin.http import application
from sodalite.admin.tls import certificate_host, ensure_certificate, server_context
from sodalite.amqpclient.connection_string import ENDPOINTS_FILE
from sodalite.cli import event_loop, logging_setup
from sodalite.cli.backup_service import BackupSource, make_backup
from sodalite.cli.data_dir_lock import DataDirectoryInUse, DataDirectoryLock, remove_own_endpoints
from sodalite.cli.entry import AMQPS_PORT
from sodalite.cli.key_bridge import BrokerKeys
from sodalite.cli.stores import build_broker, default_node_id, redact_url
from sodalite.errors import ArgumentError, ConfigurationError, StoreUnavailable
from sodalite.model.config import NamespaceConfig, default_namespace, load_config_text
from sodalite.server import delivery_trace, test_defects
from sodalite.server.broker import Broker
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.control_plane import BrokerControl
from sodalite.server.limits import AcceptFailureLog, ConnectionLimits
from sodalite.server.listener import ListenFailed
from sodalite.server.metrics import CONTENT_TYPE, BrokerMetrics

if TYPE_CHECKING:
    from sodalite.cli.geo_node import GeoGate, GeoNode


def load_namespace(path: Path | None) -> NamespaceConfig:
    if path is None:
        return default_namespace()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    namespaces = load_config_text(text)
    if len(namespaces) != 1:
        raise ConfigurationError(
            f"UserConfig.Namespaces: this broker serves exactly one namespace, the file has {len(namespaces)}")
    return namespaces[0]


def connection_string(host: str, port: int, namespace: NamespaceConfig) -> str:
    rule = namespace.authorization_rules[0]
    return (f"Endpoint=sb://{_shown_host(host)}:{port};SharedAccessKeyName={rule.key_name};"
            f"SharedAccessKey={rule.primary_key};UseDevelopmentEmulator=true;")


def _shown_host(host: str) -> str:
    return "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "::1", "localhost") else host


def amqps_connection_string(host: str, namespace: NamespaceConfig) -> str:
    """The ordinary (non-emulator) connection string: the SDK dials TLS on 5671 and drops any port."""
    rule = namespace.authorization_rules[0]
    return (f"Endpoint=sb://{_shown_host(host)}/;SharedAccessKeyName={rule.key_name};"
            f"SharedAccessKey={rule.primary_key}")


def certificate(args: argparse.Namespace) -> tuple[Path, Path]:
    """The operator's certificate and key, or the one generated into the data directory."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together")
    if args.tls_cert is not None:
        return args.tls_cert, args.tls_key
    return ensure_certificate(args.data_dir)


def _scrape(metrics: BrokerMetrics) -> web.Response:
    return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})


def _metrics_route(metrics: BrokerMetrics) -> web.RouteDef:
    async def scrape(request: web.Request) -> web.Response:
        return _scrape(metrics)

    return web.get("/metrics", scrape)


def _metrics_middleware(metrics: BrokerMetrics) -> Middleware:
    """GET /metrics on the management app, answered before its routing.

    The management app ends in a catch-all entity route (``/{name}``) that a route added after it
    would never win against; a middleware added last still runs inside the app's auth middleware.
    """
    @web.middleware
    async def serve_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/metrics":
            return _scrape(metrics)
        return await handler(request)

    return serve_metrics


async def _serve_metrics(args: argparse.Namespace, broker: Broker) -> web.AppRunner | None:
    """--metrics-port: /metrics alone, plain HTTP and no token, for scrapers."""
    if args.metrics_port < 0:
        return None
    app = web.Application()
    app.add_routes([_metrics_route(broker.metrics)])
    runner = web.AppRunner(app)
    await runner.setup()
    sock = _listen(args.host, args.metrics_port, "--metrics-port")
    await web.SockSite(runner, sock).start()
    print(f"Metrics (HTTP): http://{args.host}:{sock.getsockname()[1]}/metrics", flush=True)
    return runner


@dataclass
class Endpoints:
    """Where this broker listens, written to ``<data-dir>/endpoints.json`` for the client commands.

    The command line run in the same directory then finds a moved management port and the
    certificate the broker serves (``--tls-cert`` included) without being told. ``pid`` names the
    broker that wrote it: only that process removes it (cli/data_dir_lock.py).
    """

    amqp_port: int = 0
    amqps_port: int | None = None
    admin_port: int | None = None
    http_port: int | None = None
    certificate: str | None = None
    pid: int = 0  # the broker's process: `sodalite restore` refuses a data directory a live one holds

    def write(self, data_dir: Path) -> None:
        path = data_dir / ENDPOINTS_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @staticmethod
    def remove(data_dir: Path) -> None:
        """On a clean stop: no stale ports for the next client command to dial (a file another
        process wrote is left alone)."""
        remove_own_endpoints(data_dir / ENDPOINTS_FILE)


async def _management_runner(args: argparse.Namespace, broker: Broker,
                             geo: GeoNode | None = None) -> web.AppRunner | None:
    """The management API's application, when any port serves it."""
    if args.admin_port < 0 and args.http_port < 0 and not args.management_on_amqp_port:
        return None
    keys = BrokerKeys(broker, _shown_host(args.host))
    source = BackupSource(args.data_dir, args.config)
    control = ControlPlane(BrokerControl(broker, int(time.time() * 1000), keys,
                                         backup=functools.partial(make_backup, broker, source)),
                           broker.namespace.name,
                           sku=broker.namespace.sku,
                           max_message_size_in_kilobytes=broker.namespace.max_message_size_in_kilobytes)

    def faces(app: web.Application) -> None:
        api.add_routes(app, control)
        console.add_routes(app)

    app = application(control, keys=keys, faces=faces,
                      amqp=lambda: BrokerConnection(broker))  # AMQP over WebSockets, served as over TCP
    app.middlewares.append(_metrics_middleware(broker.metrics))
    if geo is not None:  # /health with the node's role; 503 while it does not serve
        from sodalite.cli.geo_node import management_gate

        control.geo = geo
        app.middlewares.append(management_gate(geo))
    runner = web.AppRunner(app)
    await runner.setup()
    return runner


async def _serve_management(args: argparse.Namespace, runner: web.AppRunner | None, broker: Broker,
                            endpoints: Endpoints) -> None:
    """The management API: HTTPS on --admin-port (and plain HTTP on --http-port, when asked)."""
    if runner is None:
        return
    if args.admin_port >= 0:
        cert, key = certificate(args)
        sock = _listen(args.host, args.admin_port, "--admin-port")
        await web.SockSite(runner, sock, ssl_context=_tls_context(args, cert, key)).start()
        port = sock.getsockname()[1]
        endpoints.admin_port, endpoints.certificate = port, str(cert.resolve())
        print(f"Management (HTTPS, trust {cert}): {connection_string(args.host, port, broker.namespace)}",
              flush=True)
    if args.http_port >= 0:
        sock = _listen(args.host, args.http_port, "--http-port")
        await web.SockSite(runner, sock).start()
        endpoints.http_port = sock.getsockname()[1]
        print(f"Management (HTTP): http://{args.host}:{sock.getsockname()[1]}", flush=True)
    url = console_url(args.host, endpoints)
    if url is not None:
        print(f"Console: {url}", flush=True)


def console_url(host: str, endpoints: Endpoints) -> str | None:
    """Where a browser opens the web console: the plain-HTTP management port when it is on (no
    certificate to trust), else the HTTPS one."""
    if endpoints.http_port is not None:
        return f"http://{_shown_host(host)}:{endpoints.http_port}/console/"
    if endpoints.admin_port is not None:
        return f"https://{_shown_host(host)}:{endpoints.admin_port}/console/"
    return None


def _tls_context(args: argparse.Namespace, cert: Path, key: Path) -> ssl.SSLContext:
    try:
        return server_context(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        where = "--tls-cert/--tls-key" if args.tls_cert is not None else "the generated certificate"
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise BadOption(f"{where} {cert}, {key}: cannot be loaded as a PEM certificate chain and its "
                        f"private key: {reason}") from None


def _listen(host: str, port: int, option: str) -> socket.socket:
    try:
        sock = socket.create_server((host, port), reuse_port=False)
    except OSError as exc:
        raise ListenFailed(option, host, port, exc) from None
    sock.setblocking(False)
    return sock


def _tls_host(args: argparse.Namespace, cert: Path) -> str:
    """The host a TLS client must name: the operator certificate's first DNS name, else the listen host.

    A client verifies the certificate against the host it dials, so with ``--tls-cert`` for
    ``broker.example.com`` the banner says ``sb://broker.example.com/`` whatever ``--host`` binds.
    """
    if args.tls_cert is not None:
        name = certificate_host(cert)
        if name is not None:
            return name
    return _shown_host(args.host)


def _print_amqps(args: argparse.Namespace, broker: Broker, cert: Path) -> None:
    port = broker.amqps_port
    if port is None:
        return
    host = _tls_host(args, cert)
    line = f"Connection string (amqps, trust {cert}): {amqps_connection_string(host, broker.namespace)}"
    if port != AMQPS_PORT:
        line += (f" (port {port}: pass custom_endpoint_address=\"sb://{host}:{port}\", "
                 "transport_type=TransportType.Amqp)")
    print(line, flush=True)


def _broker(args: argparse.Namespace, namespace: NamespaceConfig, node_id: str) -> Broker:
    """The broker the options ask for, with its connection limits (refused if out of range)."""
    if args.core != "v2":  # the hidden --core: old command lines name the one core there is, v2
        raise ConfigurationError(
            f"--core {args.core}: the version-1 path (messages loaded into memory) was removed in favour of the "
            "store-backed partition core; leave --core out, or pass --core v2")
    broker = build_broker(namespace, args.data_dir, synchronous=args.sync, store_url=args.store, node_id=node_id,
                          shared_poll_seconds=args.shared_poll_seconds)
    if args.max_unauthenticated_connections < 1:
        raise ConfigurationError("--max-unauthenticated-connections must be at least 1")
    if args.auth_timeout is not None and args.auth_timeout <= 0:
        raise ConfigurationError("--auth-timeout must be more than 0 seconds")
    broker.limits = ConnectionLimits(args.handshake_timeout, args.max_connections,
                                     args.max_sessions_per_connection, args.max_links_per_connection,
                                     max_unauthenticated=args.max_unauthenticated_connections,
                                     auth_timeout=args.auth_timeout)
    broker.plain_sasl_without_tls = args.allow_plain_sasl_without_tls
    return broker


async def _await_primary(args: argparse.Namespace, broker: Broker, geo: GeoNode, tls: ssl.SSLContext,
                         stop: asyncio.Event) -> tuple[GeoGate, asyncio.Task[None]] | None:
    """A geo node waits until its site is the namespace's primary: the health endpoint answers, and the
    AMQP port closes every connection at its open with server-busy (cli/geo_node.py); the broker loads
    nothing from a standby. The gate and the follow of the namespace's sites, or None if stopped first."""
    from sodalite.cli.geo_node import GeoGate, refusing_listener

    gate = GeoGate(broker, geo.site)
    amqps = args.amqps_port >= 0
    gate.stand_in = stand_in = await refusing_listener(broker.namespace.name, args.host, args.port, geo,
                                                       tls=tls if amqps else None, tls_port=args.amqps_port)
    args.port = stand_in.port
    if amqps:
        args.amqps_port = stand_in.amqps_port or args.amqps_port  # the real broker takes the same port
    following = asyncio.create_task(geo.follow(gate.apply))
    print(f"Geo: site {geo.site}; serving once this site is the namespace's primary", flush=True)
    waiting = asyncio.create_task(gate.primary.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    stopping.cancel()
    gate.stand_in = None
    await stand_in.stop()  # the port is the real broker's now
    if stop.is_set():
        following.cancel()
        return None
    return gate, following


def _print_started(args: argparse.Namespace, broker: Broker, port: int, node_id: str) -> None:
    entities = ", ".join(sorted(e.name for e in broker.entities.values())) or "(none)"
    listening = f"{args.host}:{port}" + (f", amqps {args.host}:{broker.amqps_port}" if args.amqps_port >= 0 else "")
    where = f"data in {args.data_dir}" if args.store is None else f"messages in {redact_url(args.store)}"
    print(f"Sodalite {__version__} node {node_id} listening on {listening}, {where}", flush=True)
    print(f"Entities: {entities}", flush=True)


async def _serve(args: argparse.Namespace, namespace: NamespaceConfig) -> None:
    if args.delivery_trace is not None:
        delivery_trace.start(args.delivery_trace)
    node_id = args.node_id or default_node_id(args.port)
    broker = _broker(args, namespace, node_id)
    asyncio.get_running_loop().set_exception_handler(AcceptFailureLog())
    cert, key = certificate(args)  # generated whenever missing, whichever listeners are on
    tls = _tls_context(args, cert, key)
    geo = geo_node(args, broker)
    runner = await _management_runner(args, broker, geo)
    shared = runner if args.management_on_amqp_port else None
    endpoints = Endpoints(pid=os.getpid())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    primary: tuple[GeoGate, asyncio.Task[None]] | None = None
    if geo is not None:
        await _serve_management(args, runner, broker, endpoints)
        primary = await _await_primary(args, broker, geo, tls, stop)
        if primary is None:  # stopped while waiting
            if runner is not None:
                await runner.cleanup()
            return
    port = await broker.start(args.host, args.port, tls=tls if args.amqps_port >= 0 else None,
                              tls_port=args.amqps_port,
                              management=shared.server if shared is not None else None,
                              management_tls=tls if shared is not None else None)
    _print_started(args, broker, port, node_id)
    endpoints.amqp_port, endpoints.amqps_port = port, broker.amqps_port
    if geo is None or primary is None:  # (a geo node serves the management API already)
        await _serve_management(args, runner, broker, endpoints)
    else:
        from sodalite.cli.geo_node import GeoCollector

        await primary[0].broker_started(geo)
        broker.metrics.registry.register(GeoCollector(geo))
    if shared is not None:
        print(f"Management (HTTPS or HTTP on the AMQP port, trust {cert}): "
              f"{connection_string(args.host, port, namespace)}", flush=True)
    metrics_runner = await _serve_metrics(args, broker)
    _print_amqps(args, broker, cert)
    endpoints.write(args.data_dir)
    print(f"Connection string: {connection_string(args.host, port, namespace)}", flush=True)
    await stop.wait()
    if primary is not None:
        primary[1].cancel()
    Endpoints.remove(args.data_dir)
    # The broker first: its connections (AMQP over WebSockets included, which the management app's
    # cleanup would otherwise wait on) are told to reconnect once their work in flight is answered.
    await broker.shutdown(args.stop_timeout)
    for each in (runner, metrics_runner):
        if each is not None:
            await each.cleanup()


def geo_node(args: argparse.Namespace, broker: Broker) -> GeoNode | None:
    """--geo-site: this node follows its site's role (cli/geo_node.py); None without it."""
    site = getattr(args, "geo_site", None)
    peers = getattr(args, "geo_peer", None)
    if site is None:
        if peers:
            raise BadOption("--geo-peer: give --geo-site too (this node's own site)")
        return None
    if args.store is None:
        raise BadOption("--geo-site: geo-replication runs on PostgreSQL: give --store postgresql://... "
                        "(this site's database)")
    from sodalite.cli.geo_node import GeoNode, parse_peer

    try:
        peer = parse_peer(peers) if peers else None
        return GeoNode(site, args.store, peer, broker.namespace.name)
    except ArgumentError as exc:
        raise BadOption(f"--geo-peer: {exc.description}") from None


class BadOption(Exception):
    """A ``serve`` option that cannot work, said in one line that names it."""


_PORT_OPTIONS: Final = (("--port", "port", False), ("--amqps-port", "amqps_port", True),
                        ("--admin-port", "admin_port", True), ("--http-port", "http_port", True),
                        ("--metrics-port", "metrics_port", True))
_LISTENER_OPTIONS: Final = {"amqp": "--port", "amqps": "--amqps-port"}


def check_options(args: argparse.Namespace) -> None:
    """Refuse options that cannot work before anything is opened, naming the option and the file."""
    for option, name, may_be_off in _PORT_OPTIONS:
        value = getattr(args, name)
        if not (-1 if may_be_off else 0) <= value <= 65535:
            raise BadOption(f"{option} {value}: a port is 0 to 65535 (0 picks a free one"
                            + ("; -1 turns it off)" if may_be_off else ")"))
    data_dir: Path = args.data_dir
    if data_dir.exists() and not data_dir.is_dir():
        raise BadOption(f"--data-dir {data_dir}: is a file, not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadOption(f"--data-dir {data_dir}: cannot create it: {exc.strerror or exc}") from None
    for option, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is None:
            continue
        if not path.exists():
            raise BadOption(f"{option} {path}: no such file")
        if not path.is_file():
            raise BadOption(f"{option} {path}: not a file")
    if args.config is not None and not args.config.is_file():
        raise BadOption(f"--config {args.config}: " + ("not a file" if args.config.exists() else "no such file"))


def _listen_failure(exc: ListenFailed) -> str:
    # A name that does not resolve (a negative getaddrinfo code) or an address not on this machine.
    if isinstance(exc.cause, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL or (exc.errno or 0) < 0:
        reason = str(exc.cause.strerror or exc.cause).split(" (while attempting", 1)[0]
        return f"--host {exc.host}: cannot listen on this address: {reason}"
    option = _LISTENER_OPTIONS.get(exc.listener, exc.listener)
    reason = os.strerror(exc.errno).lower() if exc.errno and exc.errno > 0 else str(exc.strerror)
    return f"{option} {exc.port}: cannot listen on {exc.host}:{exc.port}: {reason}"


def serve(args: argparse.Namespace) -> int:
    """Run ``sodalite serve`` until SIGINT or SIGTERM; the exit code."""
    from sodalite.cli.failures import exit_code

    logging_setup.configure(args.log_level, args.log_format)
    lock = DataDirectoryLock(args.data_dir)
    try:
        return exit_code(functools.partial(_serve_locked, args, lock), _SERVE_FAILURES)
    finally:
        lock.release()


def _serve_locked(args: argparse.Namespace, lock: DataDirectoryLock) -> int:
    check_options(args)
    namespace = load_namespace(args.config)
    if not (test_defects.ACTIVE and test_defects.on("no-data-lock")):  # test-only: the old defect
        lock.acquire()  # before anything in the data directory is touched; held until the process ends
    try:
        loop_name, loop_factory = event_loop.loop_factory()
    except ValueError as exc:
        raise BadOption(str(exc)) from None
    logging.getLogger(__name__).info("event loop: %s", loop_name)
    event_loop.run(_serve(args, namespace), loop_factory)
    return 0


_SERVE_FAILURES: Final = (  # cli.failures: the first row that matches says the line and the exit code
    (DataDirectoryInUse, 1, lambda exc: f"sodalite: {exc}"),
    (BadOption, 2, lambda exc: f"sodalite serve: {exc}"),
    (ListenFailed, 1, lambda exc: f"sodalite serve: {_listen_failure(exc)}"),
    (ConfigurationError, 2, lambda exc: f"sodalite: invalid configuration: {exc.description}"),
    (StoreUnavailable, 1, lambda exc: f"sodalite: a messaging store cannot be used: {exc.description}"),
    (OSError, 1, lambda exc: f"sodalite: {exc}"),
)


def main(argv: list[str] | None = None) -> int:
    from sodalite.cli.entry import main as entry

    return entry(argv)


if __name__ == "__main__":
    sys.exit(main())
