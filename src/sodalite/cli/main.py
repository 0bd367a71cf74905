"""``sodalite`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sodalite import __version__
from sodalite.admin import api, console
from sodalite.admin.control import ControlPlane
from sodalite.admin.http import application
from sodalite.admin.tls import certificate_host, ensure_certificate, server_context
from sodalite.amqpclient.connection_string import ENDPOINTS_FILE
from sodalite.cli import commands as client_commands
from sodalite.cli import logging_setup
from sodalite.cli import pipeline as pipeline_commands
from sodalite.cli import syphon as syphon_command
from sodalite.cli.control_bridge import BrokerControl
from sodalite.cli.key_bridge import BrokerKeys
from sodalite.cli.stores import build_broker, default_node_id, redact_url
from sodalite.errors import ConfigurationError, StoreUnavailable
from sodalite.model.config import NamespaceConfig, default_namespace, load_config_text
from sodalite.server.broker import Broker
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.limits import AcceptFailureLog, ConnectionLimits
from sodalite.server.metrics import CONTENT_TYPE, BrokerMetrics

DEFAULT_DATA_DIR = "sodalite-data"
EMULATOR_HTTP_PORT = 5300  # where the emulator serves its management API, unencrypted
AMQPS_PORT = 5671  # where the SDK dials TLS; it drops any port from the endpoint (contract 1.1)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sodalite", description="A self-hosted Azure Service Bus broker.")
    parser.add_argument("--version", action="version", version=f"sodalite {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672; 0 picks a free one)")
    serve.add_argument("--data-dir", default=DEFAULT_DATA_DIR, type=Path,
                       help=f"where the SQLite messaging store lives (default ./{DEFAULT_DATA_DIR})")
    serve.add_argument("--config", type=Path, default=None,
                       help="an emulator-format Config.json; without it one queue, queue.1, is served")
    serve.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL",
                       help="SQLite synchronous mode: FULL fsyncs every commit (default); NORMAL may lose "
                            "the last commits on power loss, never on a process crash")
    serve.add_argument("--store", default=None, metavar="postgresql://...",
                       help="keep the default messaging store in this PostgreSQL database instead of the data "
                            "directory's SQLite file (docs/postgresql.md)")
    serve.add_argument("--core", choices=("v1", "v2"), default="v2",
                       help="v2 (the only one): every queue, topic and subscription runs on the partition core and "
                            "store port v2, which keep no messages in memory. v1 was removed (refused with an "
                            "error); the option stays so existing command lines work")
    serve.add_argument("--node-id", default=None,
                       help="this node's name, recorded in the log and in PostgreSQL's application_name "
                            "(default: host name and AMQP port); several nodes on one database: docs/postgresql.md")
    serve.add_argument("--shared-poll-seconds", type=float, default=None, metavar="SECONDS",
                       help="several nodes on PostgreSQL: while LISTEN/NOTIFY works, how often a node still looks "
                            "by itself for other nodes' messages while a receiver waits (default 2; 0.25 while it "
                            "does not: a dead node's lock lapsing is never announced) and for their entity changes "
                            "(default 1)")
    serve.add_argument("--admin-port", type=int, default=5443,
                       help="HTTPS port of the management API for ServiceBusAdministrationClient (default 5443; "
                            "0 picks a free one; -1 turns it off)")
    serve.add_argument("--http-port", type=int, default=EMULATOR_HTTP_PORT,
                       help=f"the management API over plain HTTP, as the emulator serves it to .NET clients "
                            f"(default {EMULATOR_HTTP_PORT}; 0 picks a free one; -1 turns it off)")
    serve.add_argument("--amqps-port", type=int, default=AMQPS_PORT,
                       help=f"AMQP over TLS port (default {AMQPS_PORT}; 0 picks a free one; -1 turns it off)")
    serve.add_argument("--management-on-amqp-port", action=argparse.BooleanOptionalAction, default=True,
                       help="also serve the management API on the AMQP port, told apart by the first bytes: "
                            "HTTPS (with the broker's certificate) or plain HTTP, so the emulator connection "
                            "string works for ServiceBusAdministrationClient too (default on)")
    serve.add_argument("--tls-cert", type=Path, default=None,
                       help="PEM certificate (chain) for amqps and the HTTPS management API; default: one "
                            "generated into the data directory")
    serve.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    serve.add_argument("--allow-plain-sasl-without-tls", action="store_true",
                       help="offer SASL PLAIN (a key name and key, as JMS clients log in) on plain TCP to "
                            "clients on other hosts too; by default it is offered only over TLS and on loopback")
    serve.add_argument("--metrics-port", type=int, default=-1,
                       help="also serve Prometheus /metrics over plain HTTP on this port (off by default; "
                            "the management API serves /metrics too)")
    defaults = ConnectionLimits()
    serve.add_argument("--handshake-timeout", type=float, default=defaults.handshake_timeout,
                       help="seconds a new connection has to finish its AMQP/SASL handshake and open "
                            f"(default {defaults.handshake_timeout:.0f})")
    serve.add_argument("--max-connections", type=int, default=defaults.max_connections,
                       help="open connections at most; one more is refused with amqp:resource-limit-exceeded "
                            f"(default {defaults.max_connections})")
    serve.add_argument("--max-sessions-per-connection", type=int, default=defaults.max_sessions,
                       help=f"AMQP sessions one connection may begin (default {defaults.max_sessions})")
    serve.add_argument("--max-links-per-connection", type=int, default=defaults.max_links,
                       help=f"links one connection may attach (default {defaults.max_links})")
    serve.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    serve.add_argument("--log-format", choices=logging_setup.FORMATS, default="text",
                       help="text (default) or json: one JSON object per line with time, level, logger, "
                            "message and the record's fields (tracking_id, condition, entity, connection)")
    client_commands.register(commands)
    syphon_command.register(commands)
    pipeline_commands.register(commands)
    return parser


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
    sock = _listen(args.host, args.metrics_port)
    await web.SockSite(runner, sock).start()
    print(f"Metrics (HTTP): http://{args.host}:{sock.getsockname()[1]}/metrics", flush=True)
    return runner


@dataclass
class Endpoints:
    """Where this broker listens, written to ``<data-dir>/endpoints.json`` for the client commands.

    The command line run in the same directory then finds a moved management port and the
    certificate the broker serves (``--tls-cert`` included) without being told.
    """

    amqp_port: int = 0
    amqps_port: int | None = None
    admin_port: int | None = None
    http_port: int | None = None
    certificate: str | None = None

    def write(self, data_dir: Path) -> None:
        path = data_dir / ENDPOINTS_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @staticmethod
    def remove(data_dir: Path) -> None:
        """On a clean stop: no stale ports for the next client command to dial."""
        (data_dir / ENDPOINTS_FILE).unlink(missing_ok=True)


async def _management_runner(args: argparse.Namespace, broker: Broker) -> web.AppRunner | None:
    """The management API's application, when any port serves it."""
    if args.admin_port < 0 and args.http_port < 0 and not args.management_on_amqp_port:
        return None
    keys = BrokerKeys(broker, _shown_host(args.host))
    control = ControlPlane(BrokerControl(broker, int(time.time() * 1000), keys), broker.namespace.name,
                           sku=broker.namespace.sku,
                           max_message_size_in_kilobytes=broker.namespace.max_message_size_in_kilobytes)

    def faces(app: web.Application) -> None:
        api.add_routes(app, control)
        console.add_routes(app)

    app = application(control, keys=keys, faces=faces,
                      amqp=lambda: BrokerConnection(broker))  # AMQP over WebSockets, served as over TCP
    app.middlewares.append(_metrics_middleware(broker.metrics))
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
        sock = _listen(args.host, args.admin_port)
        await web.SockSite(runner, sock, ssl_context=server_context(cert, key)).start()
        port = sock.getsockname()[1]
        endpoints.admin_port, endpoints.certificate = port, str(cert.resolve())
        print(f"Management (HTTPS, trust {cert}): {connection_string(args.host, port, broker.namespace)}",
              flush=True)
    if args.http_port >= 0:
        sock = _listen(args.host, args.http_port)
        await web.SockSite(runner, sock).start()
        endpoints.http_port = sock.getsockname()[1]
        print(f"Management (HTTP): http://{args.host}:{sock.getsockname()[1]}", flush=True)


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.create_server((host, port), reuse_port=False)
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


async def _serve(args: argparse.Namespace, namespace: NamespaceConfig) -> None:
    node_id = args.node_id or default_node_id(args.port)
    broker = build_broker(namespace, args.data_dir, synchronous=args.sync, store_url=args.store, node_id=node_id,
                          core=args.core, shared_poll_seconds=args.shared_poll_seconds)
    broker.limits = ConnectionLimits(args.handshake_timeout, args.max_connections,
                                     args.max_sessions_per_connection, args.max_links_per_connection)
    broker.plain_sasl_without_tls = args.allow_plain_sasl_without_tls
    asyncio.get_running_loop().set_exception_handler(AcceptFailureLog())
    cert, key = certificate(args)  # generated whenever missing, whichever listeners are on
    tls = server_context(cert, key)
    runner = await _management_runner(args, broker)
    shared = runner if args.management_on_amqp_port else None
    port = await broker.start(args.host, args.port, tls=tls if args.amqps_port >= 0 else None,
                              tls_port=args.amqps_port,
                              management=shared.server if shared is not None else None,
                              management_tls=tls if shared is not None else None)
    entities = ", ".join(sorted(e.name for e in broker.entities.values())) or "(none)"
    listening = f"{args.host}:{port}" + (f", amqps {args.host}:{broker.amqps_port}" if args.amqps_port >= 0 else "")
    where = f"data in {args.data_dir}" if args.store is None else f"messages in {redact_url(args.store)}"
    print(f"Sodalite {__version__} node {node_id} listening on {listening}, {where}", flush=True)
    print(f"Entities: {entities}", flush=True)
    endpoints = Endpoints(amqp_port=port, amqps_port=broker.amqps_port)
    await _serve_management(args, runner, broker, endpoints)
    if shared is not None:
        print(f"Management (HTTPS or HTTP on the AMQP port, trust {cert}): "
              f"{connection_string(args.host, port, namespace)}", flush=True)
    metrics_runner = await _serve_metrics(args, broker)
    _print_amqps(args, broker, cert)
    endpoints.write(args.data_dir)
    print(f"Connection string: {connection_string(args.host, port, namespace)}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    Endpoints.remove(args.data_dir)
    for each in (runner, metrics_runner):
        if each is not None:
            await each.cleanup()
    await broker.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "pipeline":
        return pipeline_commands.run(args)
    if args.command != "serve":
        return client_commands.run(args)
    logging_setup.configure(args.log_level, args.log_format)
    try:
        namespace = load_namespace(args.config)
        asyncio.run(_serve(args, namespace))
    except ConfigurationError as exc:
        print(f"sodalite: invalid configuration: {exc.description}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"sodalite: a messaging store cannot be used: {exc.description}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sodalite: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
