"""``sodalite``: the command line's parser and dispatch, the console script's entry point.

Only the parser is built here; each command's code (the broker for ``serve``, the AMQP and HTTP
clients for the client commands, Spark for ``pipeline``) is imported when that command runs, so
``sodalite --help`` and the client commands start without loading the broker.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sodalite import __version__
from sodalite.cli import backup as backup_commands
from sodalite.cli import commands as client_commands
from sodalite.cli import geo as geo_commands
from sodalite.cli import logging_setup
from sodalite.cli import pipeline as pipeline_commands
from sodalite.cli import syphon as syphon_command
from sodalite.server.limits import ConnectionLimits

DEFAULT_DATA_DIR = "sodalite-data"
EMULATOR_HTTP_PORT = 5300  # where the emulator serves its management API, unencrypted
AMQPS_PORT = 5671  # where the SDK dials TLS; it drops any port from the endpoint (contract 1.1)


def parser() -> argparse.ArgumentParser:
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
    # Accepted so that command lines written when there were two cores still work; not in --help.
    serve.add_argument("--core", choices=("v1", "v2"), default="v2", help=argparse.SUPPRESS)
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
    serve.add_argument("--auth-timeout", type=float, default=None, metavar="SECONDS",
                       help="seconds after its open a connection has to get a token accepted on $cbs, or it is "
                            "closed with amqp:unauthorized-access (default: --handshake-timeout)")
    serve.add_argument("--max-unauthenticated-connections", type=int, default=defaults.max_unauthenticated,
                       metavar="N",
                       help="connections not yet authenticated at most (always fewer than --max-connections); "
                            "past it the one that waited longest gives way to a newcomer "
                            f"(default {defaults.max_unauthenticated})")
    serve.add_argument("--max-sessions-per-connection", type=int, default=defaults.max_sessions,
                       help=f"AMQP sessions one connection may begin (default {defaults.max_sessions})")
    serve.add_argument("--max-links-per-connection", type=int, default=defaults.max_links,
                       help=f"links one connection may attach (default {defaults.max_links})")
    serve.add_argument("--stop-timeout", type=float, default=10.0, metavar="SECONDS",
                       help="on SIGTERM or Ctrl-C: stop accepting, let the store work in flight commit and its "
                            "replies go out for at most this long, then close every connection with "
                            "amqp:connection:forced, which the SDKs retry by reconnecting (default 10)")
    serve.add_argument("--geo-site", default=None, metavar="NAME",
                       help="geo-replication: this node's site; it serves only while its database (--store) is "
                            "the namespace's primary and answers server-busy otherwise (docs/geo-replication.md)")
    serve.add_argument("--geo-peer", default=None, metavar="NAME=postgresql://...",
                       help="geo-replication: the other site's name and database, asked to fence an old primary "
                            "and for the replication lag")
    # Test-only (hidden): append every ReceiveAndDelete transfer written, detach and restore to PATH
    # (server/delivery_trace.py), so tests count deliveries on the broker's side.
    serve.add_argument("--delivery-trace", type=Path, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    serve.add_argument("--log-format", choices=logging_setup.FORMATS, default="text",
                       help="text (default) or json: one JSON object per line with time, level, logger, "
                            "message and the record's fields (tracking_id, condition, entity, connection)")
    client_commands.register(commands)
    syphon_command.register(commands)
    pipeline_commands.register(commands)
    backup_commands.register(commands)
    geo_commands.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "pipeline":
        return pipeline_commands.run(args)
    if args.command == "geo":
        return geo_commands.run(args)
    if args.command != "serve":
        return client_commands.run(args)
    from sodalite.cli.main import serve

    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
