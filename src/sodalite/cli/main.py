"""``sodalite`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from sodalite import __version__
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


async def _serve(args: argparse.Namespace, namespace: NamespaceConfig) -> None:
    broker = Broker.with_sqlite(namespace, args.data_dir, synchronous=args.sync)
    port = await broker.start(args.host, args.port)
    queues = ", ".join(sorted(e.name for e in broker.entities.values())) or "(none)"
    print(f"Sodalite {__version__} listening on {args.host}:{port}, data in {args.data_dir}", flush=True)
    print(f"Queues: {queues}", flush=True)
    print(f"Connection string: {connection_string(args.host, port, namespace)}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
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
