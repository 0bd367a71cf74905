"""``sodalite geo status`` and ``sodalite geo promote``: the two sites of a geo-replicated namespace.

Both name the sites by their databases, ``--site NAME=postgresql://...`` twice (the names are the
nodes' ``--geo-site``), and talk to the databases directly, so they work while every node of a site
is down. The same operations are on every geo node's management API (``/api/v1/geo``) and console.
"""

from __future__ import annotations

import argparse
import datetime
import json

from sodalite.cli.failures import exit_code
from sodalite.errors import ArgumentError, SodaliteError


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    geo = subcommands.add_parser("geo", help="geo-replication: the two sites' roles and lag; promote a site "
                                             "(docs/geo-replication.md)")
    actions = geo.add_subparsers(dest="geo_command", required=True)
    status = actions.add_parser("status", help="each site's role, the secondary's replication lag (bytes and "
                                               "seconds), its last replayed transaction's time and LSN")
    _sites(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    promote = actions.add_parser("promote", help="make SITE the namespace's primary")
    promote.add_argument("site_name", metavar="SITE", help="the site to promote (its database is the standby now)")
    how = promote.add_mutually_exclusive_group(required=True)
    how.add_argument("--planned", action="store_true",
                     help="stop the primary, wait until SITE has replayed everything, promote it: nothing is lost "
                          "(both sites must answer)")
    how.add_argument("--forced", action="store_true",
                     help="promote SITE now, whether or not the primary answers; messages acknowledged after the "
                          "reported bound (SITE's last replayed transaction) may be lost")
    promote.add_argument("--catch-up-seconds", type=float, default=60.0, metavar="SECONDS",
                         help="--planned: how long SITE may take to replay everything before the primary is put "
                              "back and nothing is promoted (default 60)")
    _sites(promote)
    promote.add_argument("--json", action="store_true", help="print the outcome as JSON")


def _sites(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", action="append", default=[], metavar="NAME=postgresql://...",
                        help="a site and its database (give both sites)")


def sites_of(values: list[str]) -> dict[str, str]:
    """The two ``--site NAME=URL`` options, checked: exactly two, named differently."""
    from sodalite.cli.geo_node import parse_peer  # imports psycopg: only when the command runs

    if len(values) != 2:
        raise ArgumentError(f"give both sites, --site NAME=postgresql://... twice (got {len(values)})")
    parsed = [parse_peer(v) for v in values]
    if parsed[0].site == parsed[1].site:
        raise ArgumentError(f"the two --site options name the same site '{parsed[0].site}'")
    return {p.site: p.url for p in parsed}


def run(args: argparse.Namespace) -> int:
    def say(exc: SodaliteError) -> str:
        return f"sodalite geo {args.geo_command}: {exc.description}"

    return exit_code(lambda: _run(args), ((ArgumentError, 2, say), (SodaliteError, 1, say)))


def _run(args: argparse.Namespace) -> int:
    sites = sites_of(args.site)
    if args.geo_command == "status":
        return _status(sites, args.json)
    return _promote(args, sites)


def _status(sites: dict[str, str], as_json: bool) -> int:
    from sodalite.cli.geo_node import site_report
    from sodalite.store.postgres import geo as pg_geo

    (a, a_url), (b, b_url) = sites.items()
    first, second = pg_geo.probe(a_url), pg_geo.probe(b_url)
    report = site_report("", [(a, first, second), (b, second, first)])
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    for site in report["sites"]:
        database = site["database"]
        line = f"{site['site']}: {site['role']} ({site['reason']})"
        if database["reachable"]:
            line += f"; timeline {database['timeline']}, LSN {database['lsn']}, epoch {database['epoch']}"
        else:
            line += f"; {database['error']}"
        print(line)
        if "lag" in site:
            lag = site["lag"]
            seconds = "?" if lag["seconds"] is None else f"{lag['seconds']:.3f} s"
            print(f"  lag: {lag['bytes']} bytes, {seconds} ({lag['mode']}); last replayed "
                  f"{site['lastReplayedLsn']} at {_when(site['lastReplayedTime'])}")
    return 0


def _promote(args: argparse.Namespace, sites: dict[str, str]) -> int:
    from sodalite.model.geo import PromotionMode
    from sodalite.store.postgres import geo as pg_geo

    if args.site_name not in sites:
        raise ArgumentError(f"there is no site '{args.site_name}' among --site ({', '.join(sites)})")
    other = next(name for name in sites if name != args.site_name)
    mode = PromotionMode.PLANNED if args.planned else PromotionMode.FORCED
    say = None if args.json else (lambda text: print(f"  {text}", flush=True))
    report = pg_geo.promote(mode, args.site_name, sites[args.site_name], other, sites[other],
                            catch_up_seconds=args.catch_up_seconds, say=say)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    print(f"site '{report.site}' is the primary (epoch {report.epoch}), {report.seconds:.2f} s")
    if mode is PromotionMode.FORCED:
        print(f"loss bound: messages acknowledged after {_when(report.bound_time)} (LSN {report.lsn}) may be "
              "lost; none acknowledged before it")
    else:
        print(f"nothing lost: '{report.site}' replayed everything up to {report.lsn}")
    if report.old_primary_fenced:
        print(f"site '{other}' is read-only: rejoin it as the secondary (pg_rewind; docs/geo-replication.md)")
    return 0


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "(no transaction replayed)"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="milliseconds")
