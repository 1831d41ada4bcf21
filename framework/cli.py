"""The ``medallion`` command.

Exit codes: 0 success (a run stopped on request is a success), 1 a job failed, 2 the
configuration or the command line is invalid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from framework import __version__
from framework.config.loader import load_project
from framework.config.model import Layer, ProjectConfig, Table
from framework.errors import (
    ConfigError,
    ConfigValidationError,
    MedallionError,
    QueryError,
    TableNotFoundError,
    UsageError,
)
from framework.logging import LogFormat, configure_logging, get_logger
from framework.text import render_table

if TYPE_CHECKING:
    from framework.job import RunSummary

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--conf", help="configuration folder (default: $MEDALLION_CONF or ./conf)")
    common.add_argument("--env", help="environment name (default: $MEDALLION_ENV or local)")
    common.add_argument(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default=LogFormat.AUTO.value,
        help="auto: readable on a terminal, JSON otherwise",
    )
    common.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"],
        help="default: info; warning for the demo, whose progress lines say what happens"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="medallion",
        description="Configuration-driven medallion ingestion on Spark and Delta Lake.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", parents=[common], help="load and check all configuration",
                       description="Load conf/ for the environment; report every problem at once. "
                       "The specs' SQL (schemas, types, expressions) is parsed by Spark.")
    p.add_argument("--no-spark", action="store_true",
                   help="skip the checks that need Spark's SQL parser (no JVM started)")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("run", parents=[common], help="run a layer's tables",
                       description="Run the streaming jobs of a layer (or 'all' layers in order).")
    p.add_argument("layer", choices=[*(layer.value for layer in Layer), "all"])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--table", action="append", default=[], metavar="T",
                       help="a table to run (repeatable); default: all tables of the layer")
    which.add_argument("--all", action="store_true", help="all tables of the layer (default)")
    p.add_argument("--continuous", action="store_true",
                   help="keep running with a processing-time trigger (default: availableNow)")
    p.add_argument("--summary", metavar="PATH", help="also write the run summary as JSON here")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("status", parents=[common], help="tables, row counts, checkpoints",
                       description="For each configured table: rows, Delta version, last "
                       "committed batch of its checkpoint, and files waiting in landing.")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("sql", parents=[common], help="run a SQL query and print the result",
                       description="Run SQL on the lakehouse (tables by name) and print a table.")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=100, help="rows to print (default 100)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.add_argument("--explain-pruning", action="store_true",
                   help="run the query and print what its scans pruned (dynamic pruning in "
                   "the plan; partitions and files read of each table's total) instead of rows")
    p.set_defaults(handler=cmd_sql)

    p = sub.add_parser("demo", parents=[common], help="generate a sample feed and run it",
                       description="Generate a dirty retail feed (duplicates, re-delivered "
                       "files, late events, malformed lines, an extra column, an unreadable "
                       "file) in the local lakehouse once, run bronze, silver and gold on it "
                       "and print what each layer did and a gold query that prunes.")
    p.add_argument("--fresh", action="store_true", help="delete the lakehouse root first")
    p.add_argument("--orders", type=int,
                   default=int(os.environ.get("MEDALLION_DEMO_ORDERS", 500_000)),
                   help="orders in the generated feed (default $MEDALLION_DEMO_ORDERS or "
                   "500000)")
    p.add_argument("--files", type=int,
                   default=int(os.environ.get("MEDALLION_DEMO_FILES", 100)),
                   help="landing files they are spread over (default $MEDALLION_DEMO_FILES "
                   "or 100)")
    p.add_argument("--summary", metavar="PATH", help="also write the summary as JSON here")
    p.set_defaults(handler=cmd_demo)

    p = sub.add_parser("optimize", parents=[common], help="compact and lay out a Delta table",
                       description="OPTIMIZE a configured Delta table: a clustered table "
                       "(cluster_by) is laid out by its clustering columns; with --zorder a "
                       "table that is not clustered is Z-ordered by those columns.")
    p.add_argument("table")
    p.add_argument("--zorder", nargs="+", default=[], metavar="COLUMN")
    p.set_defaults(handler=cmd_optimize)

    p = sub.add_parser("init", parents=[common], help="create the lake's layout",
                       description="Create the root (on ADLS: its file system) and the folders "
                       "every configured table uses: landing, archive and quarantine of each "
                       "bronze feed, tables and checkpoints. Safe to repeat.")
    p.set_defaults(handler=cmd_init)

    p = sub.add_parser("land", parents=[common], help="upload files into a feed's landing",
                       description="Upload local files into a bronze feed's landing folder, "
                       "in the order given: each appears whole (written under a hidden name, "
                       "then renamed) with a later modification time than the one before, so "
                       "the feed is read in that order.")
    p.add_argument("table")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--keep-times", action="store_true",
                   help="give each file its own local modification time instead (local "
                   "stores only): the feed is read in the order of those times")
    p.set_defaults(handler=cmd_land)

    p = sub.add_parser("purge-archive", parents=[common],
                       help="delete archived landing files past their retention",
                       description="Delete the archived files of bronze feeds archived longer "
                       "ago than the retention (from the archive's manifests; a file archived "
                       "before manifests were kept is aged from its modification time).")
    p.add_argument("--older-than", required=True, metavar="AGE",
                   help="retention: 30d, 12h or 90m")
    p.add_argument("--table", action="append", default=[], metavar="T",
                   help="a bronze table (repeatable); default: all")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    p.set_defaults(handler=cmd_purge_archive)

    p = sub.add_parser("infer-schema", parents=[common],
                       help="infer a bronze feed's schema once and write it into its spec",
                       description="Read the feed's landing files in batch, infer a schema, and "
                       "write it as DDL into the spec file (it is never inferred at run time).")
    p.add_argument("table")
    p.add_argument("--force", action="store_true", help="replace an existing schema")
    p.set_defaults(handler=cmd_infer_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level or ("warning" if args.command == "demo" else "info")
    fmt = configure_logging(args.log_format, level)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        if level != "debug":  # PySpark logs each analysis error with its JVM stack
            with quiet_query_loggers():
                return handler(args)
        return handler(args)
    except ConfigValidationError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CONFIG
    except UsageError as exc:
        _report(args.command, exc, fmt, level)
        return EXIT_CONFIG
    except MedallionError as exc:
        _report(args.command, exc, fmt, level)
        return EXIT_FAILED
    except Exception as exc:  # not one the framework knows: its first line, stack on request
        _report(args.command, exc, fmt, level, unexpected=True)
        return EXIT_FAILED


def _report(command: str, exc: Exception, fmt: LogFormat, level: str,
            unexpected: bool = False) -> None:
    """An error, once: a JSON event where logs are JSON, else one plain line; the stack only
    with ``--log-level debug``. An error the framework did not expect is shown by its type
    and first line (a Java exception's text holds its whole stack)."""
    lines = str(exc).strip().splitlines()
    text = str(exc) if not unexpected else \
        f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    if unexpected and level != "debug":
        text += " (--log-level debug shows the stack)"
    if fmt is LogFormat.JSON:
        get_logger().error("command.failed", command=command, error=text,
                           exc_info=exc if level == "debug" else None)
        return
    print(f"error: {text}", file=sys.stderr)
    if level == "debug":
        traceback.print_exception(exc, file=sys.stderr)


def quiet_query_loggers() -> Any:
    """PySpark's query-context loggers muted (they need pyspark; nothing if it is absent)."""
    try:
        from framework.sqlcheck import quiet_query_loggers as quiet
    except ImportError:  # pragma: no cover - the wheel without Spark: validate --no-spark
        return contextlib.nullcontext()
    return quiet()


def _project(args: argparse.Namespace) -> ProjectConfig:
    return load_project(args.conf, args.env)


def _spark(project: ProjectConfig, app: str) -> Any:
    from framework.session import get_spark

    return get_spark(project.env, app)


def cmd_validate(args: argparse.Namespace) -> int:
    project = _project(args)
    if not args.no_spark:
        from framework.sqlcheck import parser_session, sql_problems

        problems = sql_problems(parser_session(), project)
        if problems:
            raise ConfigValidationError(problems)
    by_layer: dict[str, list[str]] = {}
    for t in project.tables:
        by_layer.setdefault(t.layer.value, []).append(t.full_name)
    print(f"configuration valid: environment {project.env.name!r}, {len(project.tables)} table(s)")
    for layer, names in by_layer.items():
        print(f"  {layer}: {', '.join(names)}")
    for t in project.tables:
        for advice in t.spec.advise(t, project):
            print(f"warning: {t.source_file}: {advice}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from framework.job import RunStatus
    from framework.runner import select_tables

    project = _project(args)
    layer = None if args.layer == "all" else Layer(args.layer)
    tables = select_tables(project, layer, args.table)
    if not tables:
        print(f"no tables configured for layer {args.layer!r}", file=sys.stderr)
        return EXIT_CONFIG
    summary = _run(_spark(project, f"medallion-{args.layer}"), project, tables, args.continuous)
    print(summary.render())
    if args.summary:
        _write_json(args.summary, summary.to_dict())
    return EXIT_FAILED if summary.status is RunStatus.FAILED else EXIT_OK


def _run(spark: Any, project: ProjectConfig, tables: Sequence[Table], continuous: bool,
         watch: Callable[..., None] | None = None) -> RunSummary:
    """Run ``tables`` in order; SIGTERM/SIGINT stop them at a batch boundary."""
    import contextlib

    from framework.job import RunContext, TriggerPolicy
    from framework.listener import ProgressListener
    from framework.runner import run_tables

    ctx = RunContext(
        trigger=TriggerPolicy(continuous=continuous, interval=project.env.processing_interval)
    )
    watching = (ProgressListener.install(spark).watching(watch) if watch
                else contextlib.nullcontext())
    with ctx.stop.on_signals(signal.SIGTERM, signal.SIGINT), watching:
        return run_tables(spark, project, tables, ctx)


def _write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, default=str)


def cmd_demo(args: argparse.Namespace) -> int:
    from framework import demo
    from framework.config.model import Runtime
    from framework.job import RunStatus
    from framework.runner import select_tables

    project = _project(args)
    if project.env.runtime not in (Runtime.LOCAL, Runtime.AUTO) or "://" in project.env.root:
        print(f"the demo runs on a local environment, found {project.env.name!r} "
              f"({project.env.root})", file=sys.stderr)
        return EXIT_CONFIG
    if args.fresh:
        demo.reset(project)
    try:
        feed, generated = demo.generate(project, orders=args.orders, files=args.files)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"lakehouse: {project.env.root}: "
          + (f"generated {feed.files} order files ({feed.records:,} lines)" if generated else
             "feed generated by an earlier run; running again ingests nothing new"), flush=True)
    print("running bronze, silver and gold (availableNow); a line per micro-batch:", flush=True)
    spark = _spark(project, "medallion-demo")
    if args.log_level is None:  # Spark's own warnings would bury the progress lines
        spark.sparkContext.setLogLevel("ERROR")
    tables = select_tables(project, None)
    runs = [_run(spark, project, tables, False, watch=_print_progress)]
    later = demo.deliver_later(project) if runs[0].status is RunStatus.SUCCEEDED else []
    if later:
        fed = project.fed_by([project.table("orders", Layer.BRONZE)])
        print(f"a later delivery lands ({', '.join(os.path.basename(f) for f in later)}): "
              f"running {', '.join(t.full_name for t in fed)} again", flush=True)
        runs.append(_run(spark, project, fed, False, watch=_print_progress))
    result = demo.summarize(spark, project, demo.combine([r.to_dict() for r in runs]), feed,
                            generated)
    print()
    print(demo.render(result))
    for summary in runs:
        if summary.status is not RunStatus.SUCCEEDED:
            print()
            print(summary.render())
    if args.summary:
        _write_json(args.summary, result)
    failed = any(r.status is RunStatus.FAILED for r in runs)
    return EXIT_FAILED if failed else EXIT_OK


def _print_progress(query: str | None, batch: Any, rows: int) -> None:
    seconds = batch.duration_ms.get("triggerExecution", 0) / 1000
    rate = f"{rows / seconds:>9,.0f} rows/s" if seconds else ""
    print(f"  {query or '?':<22} batch {batch.batch_id:>3}  {rows:>9,} rows  {seconds:6.1f} s"
          f"  {rate}", flush=True)


def cmd_status(args: argparse.Namespace) -> int:
    from framework.status import table_status

    project = _project(args)
    spark = _spark(project, "medallion-status")
    rows = [table_status(spark, t) for t in project.tables]
    _print_table(
        ["table", "kind", "rows", "version", "last batch", "pending files", "pending bytes"],
        [[r.table, r.kind, r.rows, r.version, r.last_batch, r.pending_files, r.pending_bytes]
         for r in rows],
    )
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    project = _project(args)
    spark = _spark(project, "medallion-sql")
    if args.explain_pruning:
        from framework.pruning import explain_pruning

        with query_errors():
            evidence = explain_pruning(spark, args.query)
        print(json.dumps(evidence.to_dict()) if args.json else evidence.render())
        return EXIT_OK
    with query_errors():
        df = spark.sql(args.query)
        rows = df.limit(args.limit).collect()
    if args.json:
        for r in rows:
            print(json.dumps(r.asDict(recursive=True), default=str))
    else:
        _print_table(df.columns, [list(r) for r in rows])
    return EXIT_OK


@contextlib.contextmanager
def query_errors() -> Iterator[None]:
    """Spark's rejection of a query given by a person, as one line (a :class:`QueryError`)."""
    from pyspark.errors import AnalysisException

    from framework.sqlcheck import first_line

    try:
        yield
    except AnalysisException as exc:
        raise QueryError(f"Spark cannot run the query: {first_line(exc)}") from exc


def cmd_optimize(args: argparse.Namespace) -> int:
    from framework.delta import optimize

    project = _project(args)
    table = project.table(args.table)
    spark = _spark(project, "medallion-optimize")
    if not spark.catalog.tableExists(table.full_name):
        raise TableNotFoundError(f"expected table {table.full_name} to exist, found none "
                                 "(run its layer first)")
    if getattr(table.spec, "format", "delta") != "delta":
        raise ConfigError(f"expected a Delta table, found {table.full_name} stored as "
                          f"{table.spec.format}", file=table.source_file, key="format")  # type: ignore[attr-defined]
    result = optimize(spark, table.full_name, zorder_by=args.zorder)
    print(f"{table.full_name}: optimized " + " ".join(f"{k}={v}" for k, v in result.items()))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from bronze.spec import CleanSource
    from framework.storage import storage_for

    project = _project(args)
    env = project.env
    folders = [env.path("tables"), env.path("_checkpoints")]
    for table in project.of_layer(Layer.BRONZE):
        spec: Any = table.spec
        folders += [spec.landing_folder(table), spec.quarantine_dir(table)]
        if spec.source.clean_source is CleanSource.ARCHIVE:
            folders.append(spec.archive_dir(table))
    store = storage_for(env.root, env)
    store.makedirs(env.root)
    for folder in dict.fromkeys(folders):
        store.makedirs(folder)
        print(f"ready: {folder}")
    return EXIT_OK


def cmd_land(args: argparse.Namespace) -> int:
    from framework.storage import FileInfo, land, storage_for

    project = _project(args)
    table = project.table(args.table, Layer.BRONZE)
    landing: str = table.spec.landing(table)  # type: ignore[attr-defined]
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"expected files to upload, found none at: {', '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    store = storage_for(landing, project.env)
    if args.keep_times and store.resolution_ms(landing) != 1:
        raise UsageError(f"expected a store whose files' times can be set for --keep-times, "
                         f"found {landing}, whose store sets them itself when a file is "
                         "written; land without --keep-times (each file then gets a later "
                         "time than the one before)")
    log = get_logger(env=project.env.name, table=table.full_name)

    def landed(local_file: str, info: FileInfo) -> None:
        log.info("landing.uploaded", file=local_file, target=info.path, bytes=info.size,
                 modified_ms=info.modified_ms)
        print(f"landed: {info.path}", flush=True)

    land(store, args.files, landing, keep_times=args.keep_times, on_landed=landed)
    return EXIT_OK


def cmd_purge_archive(args: argparse.Namespace) -> int:
    import time

    from bronze.reconcile import purge_archive
    from bronze.spec import CleanSource
    from framework.storage import parse_retention, storage_for

    project = _project(args)
    retention = parse_retention(args.older_than)
    tables = ([project.table(t, Layer.BRONZE) for t in args.table] if args.table
              else list(project.of_layer(Layer.BRONZE)))
    now = int(time.time() * 1000)
    rows = []
    for table in tables:
        spec: Any = table.spec
        if spec.source.clean_source is not CleanSource.ARCHIVE:
            continue
        archive = spec.archive_dir(table)
        purged = purge_archive(storage_for(archive, project.env), archive, retention, now,
                               dry_run=args.dry_run)
        size = sum(f.size for f in purged)
        get_logger(env=project.env.name, table=table.full_name).info(
            "archive.purged", archive=archive, files=len(purged), bytes=size,
            dry_run=args.dry_run, older_than=args.older_than)
        rows.append([table.full_name, archive, len(purged), size])
    _print_table(["table", "archive", "would delete" if args.dry_run else "deleted", "bytes"],
                 rows)
    return EXIT_OK


def cmd_infer_schema(args: argparse.Namespace) -> int:
    from bronze.schema import infer_schema, write_schema

    project = _project(args)
    table = project.table(args.table, Layer.BRONZE)
    spark = _spark(project, "medallion-infer-schema")
    ddl = infer_schema(spark, table)
    write_schema(table, ddl, force=args.force)
    print(f"{table.source_file}: schema: {ddl}")
    return EXIT_OK


def _print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(render_table(header, rows))
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


if __name__ == "__main__":
    sys.exit(main())
