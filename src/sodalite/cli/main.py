"""``sodalite`` command line."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import signal
import socket
import sys
from pathlib import Path

from aiohttp import web

from sodalite import __version__
from sodalite.admin.http import application
from sodalite.admin.tls import ensure_certificate, server_context
from sodalite.cli.admin_bridge import BrokerQueues
from sodalite.errors import ConfigurationError
from sodalite.model.config import NamespaceConfig, default_namespace, load_config_text
from sodalite.server.broker import Broker

DEFAULT_DATA_DIR = "sodalite-data"


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
    serve.add_argument("--admin-port", type=int, default=5443,
                       help="HTTPS port of the management API for ServiceBusAdministrationClient (default 5443; "
                            "0 picks a free one; -1 turns it off)")
    serve.add_argument("--http-port", type=int, default=-1,
                       help="also serve the management API over plain HTTP on this port (off by default)")
    serve.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
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
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "::1", "localhost") else host
    return (f"Endpoint=sb://{shown}:{port};SharedAccessKeyName={rule.key_name};"
            f"SharedAccessKey={rule.primary_key};UseDevelopmentEmulator=true;")


async def _serve_management(args: argparse.Namespace, broker: Broker) -> web.AppRunner | None:
    """The management API: HTTPS on --admin-port (and plain HTTP on --http-port, when asked)."""
    if args.admin_port < 0 and args.http_port < 0:
        return None
    runner = web.AppRunner(application(BrokerQueues(broker, datetime.datetime.now(datetime.UTC))))
    await runner.setup()
    if args.admin_port >= 0:
        cert, key = ensure_certificate(args.data_dir)
        sock = _listen(args.host, args.admin_port)
        await web.SockSite(runner, sock, ssl_context=server_context(cert, key)).start()
        port = sock.getsockname()[1]
        print(f"Management (HTTPS, trust {cert}): {connection_string(args.host, port, broker.namespace)}",
              flush=True)
    if args.http_port >= 0:
        sock = _listen(args.host, args.http_port)
        await web.SockSite(runner, sock).start()
        print(f"Management (HTTP): http://{args.host}:{sock.getsockname()[1]}", flush=True)
    return runner


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.create_server((host, port), reuse_port=False)
    sock.setblocking(False)
    return sock


async def _serve(args: argparse.Namespace, namespace: NamespaceConfig) -> None:
    broker = Broker.with_sqlite(namespace, args.data_dir, synchronous=args.sync)
    port = await broker.start(args.host, args.port)
    entities = ", ".join(sorted(e.name for e in broker.entities.values())) or "(none)"
    print(f"Sodalite {__version__} listening on {args.host}:{port}, data in {args.data_dir}", flush=True)
    print(f"Entities: {entities}", flush=True)
    runner = await _serve_management(args, broker)
    print(f"Connection string: {connection_string(args.host, port, namespace)}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if runner is not None:
        await runner.cleanup()
    await broker.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        namespace = load_namespace(args.config)
        asyncio.run(_serve(args, namespace))
    except ConfigurationError as exc:
        print(f"sodalite: invalid configuration: {exc.description}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sodalite: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
