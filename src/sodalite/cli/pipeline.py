"""``sodalite pipeline export|replicate|syphon|redrive``: the Spark pipelines (docs/spark.md) from the command line.

Each starts a Spark session (``--master``, default ``local[*]``), starts the pipeline's streaming
query with a checkpoint directory, shows its progress, and stops cleanly on Ctrl-C: the query stops,
the session stops, and a later run with the same checkpoint carries on where it left off.
``--available-now`` reads what is there and ends.

Progress: on a terminal, one status line rewritten in place every second (messages moved, the last
batch's rate, the lag: sequence numbers still to read, and in how many partitions); elsewhere (a
pipe, a log file) nothing but the summary at the end, unless ``--progress`` asks for a plain line
every ``--progress-interval`` seconds (with the lag of each partition that has one).
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Final

from sodalite.amqpclient import connection_string
from sodalite.cli import spark_start
from sodalite.cli.progress import Progress
from sodalite.errors import ConfigurationError, SodaliteError
from sodalite.extras import MissingExtra

PROGRESS_EVERY_S = 5.0
TERMINAL_EVERY_S = 1.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = commands.add_parser("pipeline", help="data pipelines on Spark (needs the 'spark' extra)")
    actions = pipeline.add_subparsers(dest="action", required=True)

    export = actions.add_parser("export", help="an entity or its dead-letter queue to Parquet (or another "
                                               "Spark file format), partitioned by date")
    export.add_argument("entity", help="queue name, or topic/subscriptions/subscription")
    export.add_argument("--path", required=True, help="output directory")
    export.add_argument("--dead-letter", action="store_true", help="export the dead-letter queue")
    export.add_argument("--consume", action="store_true", help="remove what has been exported")
    export.add_argument("--format", default="parquet", help="Spark file format (default parquet)")
    _common(export)
    export.set_defaults(handler=_export)

    replicate = actions.add_parser("replicate", help="entities of one namespace to another, MessageIds kept")
    replicate.add_argument("entities", nargs="+", help="queues, or topic/subscriptions/s (sent to the topic)")
    replicate.add_argument("--target-connection-string", required=True, help="namespace B")
    replicate.add_argument("--consume", action="store_true", help="move rather than copy")
    _common(replicate)
    replicate.set_defaults(handler=_replicate)

    syphon = actions.add_parser("syphon", help="the backlog queues of a paired secondary namespace into their "
                                               "entities in the primary")
    syphon.add_argument("--primary", required=True, help="connection string of the primary namespace")
    syphon.add_argument("--secondary", required=True, help="connection string of the secondary namespace")
    syphon.add_argument("--primary-namespace", default=None,
                        help="the name in the backlog queues' paths (default: from the primary's endpoint)")
    syphon.add_argument("--backlog-queue-count", type=int, default=10,
                        help="backlog queues <namespace>/x-servicebus-transfer/0..N-1 (default 10, as the client)")
    _common(syphon, source=False)
    syphon.set_defaults(handler=_syphon)

    redrive = actions.add_parser("redrive", help="dead-lettered messages matching a filter back to their entity "
                                                 "(or another), with the broker's move operation")
    redrive.add_argument("entity", help="queue name, or topic/subscriptions/subscription")
    redrive.add_argument("--api-url", default=None,
                         help="the broker's management API, e.g. http://127.0.0.1:5300 (default: the one the local "
                              "broker noted in --data-dir, as the other commands find it)")
    redrive.add_argument("--data-dir", type=Path, default=Path("sodalite-data"),
                         help="the local broker's data directory, where it notes its ports (default ./sodalite-data)")
    redrive.add_argument("--spark-sql", default=None, metavar="CONDITION",
                         help="which dead-lettered messages: a Spark SQL condition over the data source's columns "
                              "(Spark evaluates it), e.g. \"deadLetterReason = 'MaxDeliveryCountExceeded'\"; "
                              "default all")
    redrive.add_argument("--filter", dest="spark_sql", help=argparse.SUPPRESS)  # the earlier name, still accepted
    redrive.add_argument("--to", default=None, help="target queue or subscription (default: the entity itself)")
    redrive.add_argument("--ca-file", default=None, help="certificate to trust for an https API")
    redrive.add_argument("--connection-string", default=None,
                         help=f"the namespace (default ${connection_string.ENVIRONMENT_VARIABLE}, "
                              "else the local broker)")
    redrive.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    _progress_options(redrive)
    redrive.set_defaults(handler=_redrive)


def _progress_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action="store_true",
                        help="print progress lines even when the output is not a terminal (on a terminal a status "
                             "line is always shown)")
    parser.add_argument("--progress-interval", type=float, default=PROGRESS_EVERY_S, metavar="SECONDS",
                        help=f"seconds between progress lines with --progress (default {PROGRESS_EVERY_S:g})")


def _common(parser: argparse.ArgumentParser, *, source: bool = True) -> None:
    if source:
        parser.add_argument("--connection-string", default=None,
                            help=f"the source namespace (default ${connection_string.ENVIRONMENT_VARIABLE}, "
                                 "else the local broker)")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (resume from it)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--available-now", action="store_true", help="read what is there now, then stop")
    parser.add_argument("--trigger", default="10 seconds", help="micro-batch interval (default '10 seconds')")
    parser.add_argument("--max-messages-per-trigger", type=int, default=10_000,
                        help="messages per micro-batch at most (default 10000)")
    if source:
        parser.add_argument("--starting-position", default="earliest", help="earliest (default), latest or JSON")
    _progress_options(parser)


def _source_connection(args: argparse.Namespace) -> str:
    text = args.connection_string or os.environ.get(connection_string.ENVIRONMENT_VARIABLE) \
        or connection_string.DEFAULT
    connection_string.parse(text)
    return str(text)


# A finite run (--available-now) on a small machine spends most of its time starting the JVM and warming
# up: it starts with the C1 compiler alone, the serial collector and an archive of Spark's classes
# (sodalite.cli.spark_start; docs/spark-benchmarks.md, "The command line's start"). Not for a pipeline
# that runs on, and never over the user's own driver options.
QUICK_START_JVM_OPTIONS: Final = spark_start.QUICK_START_JVM_OPTIONS
_ARCHIVES: dict[int, spark_start.ClassArchive] = {}  # the session's class archive, to finish at its stop


def _session(master: str, name: str, finite: bool = False) -> Any:
    # (session: the workers on this Python unless the user or the cluster chose one)
    from sodalite.spark import _cluster_defaults, session

    config = {"spark.ui.showConsoleProgress": "false"}
    defaults = _cluster_defaults()
    chosen = "driver-java-options" in os.environ.get("PYSPARK_SUBMIT_ARGS", "") \
        or "spark.driver.extraJavaOptions" in os.environ.get("PYSPARK_SUBMIT_ARGS", "") \
        or "spark.driver.extraJavaOptions" in defaults
    archive = None
    if finite and not chosen:
        archive = spark_start.class_archive(QUICK_START_JVM_OPTIONS)
        config["spark.driver.extraJavaOptions"] = QUICK_START_JVM_OPTIONS + (
            f" {archive.java_options()}" if archive is not None else "")
    if finite and "spark.ui.enabled" not in defaults and "spark.ui.enabled" not in os.environ.get(
            "PYSPARK_SUBMIT_ARGS", ""):
        config["spark.ui.enabled"] = "false"  # no web UI to start for a run that ends by itself
    spark = session(master, name, config)
    if archive is not None:
        _ARCHIVES[id(spark)] = archive
    return spark


def _stop(spark: Any, *, archive: bool = True) -> None:
    """Stop the session; a run that writes the class archive then waits for its JVM to write it (not
    after Ctrl-C: that run leaves the archive to the next)."""
    spark.stop()
    written = _ARCHIVES.pop(id(spark), None)
    if not archive or written is None or written.part is None:
        return
    from pyspark import SparkContext

    if sys.stdout.isatty():
        print("saving Spark's classes for a faster start next time (once)...", flush=True)
    spark_start.finish_archive(written, getattr(SparkContext._gateway, "proc", None))


def _export(args: argparse.Namespace) -> int:
    from sodalite.spark import pipelines

    spark = _session(args.master, "sodalite-export", args.available_now)
    query = pipelines.export(spark, _source_connection(args), args.entity, args.path, args.checkpoint,
                             dead_letter=args.dead_letter, consume=args.consume, file_format=args.format,
                             max_messages_per_trigger=args.max_messages_per_trigger,
                             available_now=args.available_now, processing_time=args.trigger,
                             starting_position=args.starting_position)
    return _watch(spark, query, "moved" if args.consume else "exported", args)


def _replicate(args: argparse.Namespace) -> int:
    from sodalite.spark import pipelines

    spark = _session(args.master, "sodalite-replicate", args.available_now)
    connection_string.parse(args.target_connection_string)
    query = pipelines.replicate(spark, _source_connection(args), args.target_connection_string, args.entities,
                                args.checkpoint, consume=args.consume,
                                max_messages_per_trigger=args.max_messages_per_trigger,
                                available_now=args.available_now, processing_time=args.trigger,
                                starting_position=args.starting_position)
    return _watch(spark, query, "moved" if args.consume else "copied", args)


def _syphon(args: argparse.Namespace) -> int:
    from sodalite.client import backlog
    from sodalite.spark import pipelines

    connection_string.parse(args.primary)
    connection_string.parse(args.secondary)
    try:
        namespace = args.primary_namespace or backlog.namespace_of(args.primary)
        names = backlog.backlog_queue_names(namespace, args.backlog_queue_count)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    print(f"syphon: draining {names[0]} .. {names[-1]} into the primary", flush=True)
    spark = _session(args.master, "sodalite-syphon", args.available_now)
    query = pipelines.syphon(spark, args.primary, args.secondary, names, args.checkpoint,
                             max_messages_per_trigger=args.max_messages_per_trigger,
                             available_now=args.available_now, processing_time=args.trigger)
    return _watch(spark, query, "moved", args)


def _management_api(args: argparse.Namespace, connection: str) -> tuple[str, str | None]:
    """--api-url, else the management API the local broker noted in its data directory (plain HTTP when
    it serves it, else HTTPS trusting the certificate it serves)."""
    if args.api_url:
        return str(args.api_url), args.ca_file
    from sodalite.cli.commands import noted_endpoints

    noted = noted_endpoints(args.data_dir)
    host = connection_string.parse(connection).host
    if isinstance(noted.get("http_port"), int):
        return f"http://{host}:{noted['http_port']}", args.ca_file
    if isinstance(noted.get("admin_port"), int):
        certificate = noted.get("certificate")
        return f"https://{host}:{noted['admin_port']}", args.ca_file or (
            certificate if isinstance(certificate, str) else None)
    raise ConfigurationError(
        f"--api-url: not given, and no broker noted its management API in {args.data_dir / 'endpoints.json'} "
        "(pass --data-dir of the running broker, or --api-url)")


REDRIVE_POLL_S: Final = 0.5


def _redrive(args: argparse.Namespace) -> int:
    from sodalite.spark import pipelines

    connection = _source_connection(args)
    api_url, ca_file = _management_api(args, connection)
    from sodalite.spark.redrive import MoveApi

    shown = Progress("redrove", every=args.progress_interval)
    showing = shown.terminal or args.progress
    if shown.terminal:
        print(f"redriving dead-lettered messages of {args.entity} (a Spark job; the broker's move)...", flush=True)
    api = MoveApi.of(api_url, connection, ca_file)
    start = api.dead_letters(args.entity)
    spark = _session(args.master, "sodalite-redrive")
    try:
        with ThreadPoolExecutor(1) as pool:  # the job runs; this thread shows how far it is
            job = pool.submit(pipelines.redrive, spark, connection, args.entity, api_url,
                              condition=args.spark_sql, target=args.to, ca_file=ca_file)
            while not job.done():
                try:
                    done = max(0, start - api.dead_letters(args.entity))  # what left the dead-letter queue
                except SodaliteError:
                    done = shown.done
                # With a condition, how many it selects is known only at the end: no time left then.
                if showing:
                    shown.update(done, total=None if args.spark_sql else start)
                else:
                    shown.done = done
                wait([job], timeout=REDRIVE_POLL_S)
            outcome = job.result()
    finally:
        spark.stop()
    shown.finish("")
    print(f"selected {outcome.selected}, moved {outcome.moved}, skipped {outcome.skipped} (locked or gone) "
          f"in {shown.elapsed()}", flush=True)
    return 0


def lag_text(lag: dict[str, int], *, compact: bool) -> str:
    """The lag for a progress line: ``lag 1200 in 3 of 16 partitions`` (a terminal's one line), or each
    lagging partition, ``lag orders#0=700, orders#5=500`` (a log line); ``lag 0`` when read to the end."""
    lagging = {key: value for key, value in lag.items() if value}
    if not lagging:
        return "lag 0"
    if compact:
        return f"lag {sum(lagging.values())} in {len(lagging)} of {len(lag)} partitions"
    return "lag " + ", ".join(f"{key}={value}" for key, value in sorted(lagging.items()))


def _show(shown: Progress, progress: Any, showing: bool) -> None:
    if not showing:  # quiet: counted for the summary only
        shown.done = progress.moved
        return
    known = bool(progress.lag)  # (not before the first batch has reported its offsets)
    shown.update(progress.moved, remaining=sum(progress.lag.values()) if known else None, rate=progress.rate,
                 detail=lag_text(progress.lag, compact=shown.terminal) if known else "", force=not shown.terminal)


def _watch(spark: Any, query: Any, verb: str, args: argparse.Namespace | None = None,
           shown: Progress | None = None) -> int:
    """Follow the query until it ends or Ctrl-C: a status line on a terminal (count, rate, lag, time
    left from the backlog), a line every ``--progress-interval`` seconds elsewhere with ``--progress``,
    else only the summary."""
    from sodalite.spark import pipelines

    seen: dict[int, int] = {}
    interval = PROGRESS_EVERY_S if args is None else float(args.progress_interval)
    shown = shown if shown is not None else Progress(verb, every=interval)
    showing = shown.terminal or bool(args is not None and args.progress)
    ended = False  # by itself (not Ctrl-C): then a first run may wait to write the class archive
    try:
        while query.isActive:
            query.awaitTermination(TERMINAL_EVERY_S if shown.terminal else interval)
            _show(shown, pipelines.progress(query, seen), showing)
        ended = True
        failure = query.exception()
        if failure is not None:
            shown.finish(f"{verb} {shown.done} {shown.noun} in {shown.elapsed()}, then the pipeline failed")
            print(f"error: the pipeline failed: {failure}", file=sys.stderr)
            return 1
        shown.finish(f"{verb} {shown.done} {shown.noun} in {shown.elapsed()}")
        return 0
    except (KeyboardInterrupt, Exception) as exc:
        if not _interrupted(exc):
            raise
        print("\nstopping (Ctrl-C): the checkpoint keeps the position" if shown.terminal else
              "stopping (Ctrl-C): the checkpoint keeps the position", flush=True)
        try:
            query.stop()
            _show(shown, pipelines.progress(query, seen), showing)
            shown.finish(f"{verb} {shown.done} {shown.noun} in {shown.elapsed()} (stopped)")
        except Exception as error:  # the gateway went with the interrupt: the checkpoint still holds
            print(f"stopped without a last progress report ({type(error).__name__})", flush=True)
        return 130
    finally:
        try:
            _stop(spark, archive=ended)
        except Exception as error:  # the outcome above stands; say that Spark did not stop cleanly
            print(f"warning: Spark did not stop cleanly: {type(error).__name__}: {error}", file=sys.stderr)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, or what py4j raises when Ctrl-C lands inside one of its calls (it tries to cancel the
    command and fails with a Py4JError whose context is the KeyboardInterrupt)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


def run(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        print(f"error: {MissingExtra('spark', 'the Spark pipelines', exc)}", file=sys.stderr)
        return 2
    try:
        code: int = args.handler(args)
    except SodaliteError as exc:
        print(f"error: {getattr(exc, 'description', exc)}", file=sys.stderr)
        return 1
    return code
