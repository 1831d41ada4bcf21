"""The ``medallion`` command.

Exit codes: 0 success (a run stopped on request is a success), 1 a job failed, 2 the
configuration or the command line is invalid, or another command holds the lake.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import __version__
from framework.commands import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    Commands,
    at_least_one,
    common_options,
    first_time,
    installed_commands,
    instant,
    lake_run_id,
    print_table,
    project_of,
    release_lake,
    spark_for,
    storage_of,
    take_lake,
    write_json,
)
from framework.config.model import Layer
from framework.contract_command import add_contract
from framework.errors import (
    ConfigError,
    ConfigValidationError,
    MedallionError,
    QueryError,
    TableNotFoundError,
    UsageError,
    first_line,
)
from framework.formats import FileFormat
from framework.layers import plugins
from framework.logging import LOG_FORMAT_ENV, LogFormat, configure_logging, get_logger
from framework.redaction import redacted_output
from framework.scaffold import Period

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.config.model import ProjectConfig
    from framework.journal import Record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="medallion",
        description="Configuration-driven medallion ingestion on Spark and Delta Lake.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = Commands(sub, common_options())
    for add_command in (_add_validate, _add_new, _add_test, _add_run, _add_refresh, _add_status,
                        _add_sql, _add_serve, _add_report, _add_optimize, _add_init,
                        add_contract):
        add_command(commands)
    for layer_plugin in plugins().values():
        if layer_plugin.commands is not None:
            layer_plugin.commands(commands)
    for add in installed_commands():
        add(commands)
    return parser


def _add_validate(commands: Commands) -> None:
    p = commands.add("validate", cmd_validate, help="load and check all configuration",
                     description="Load conf/ for the environment; report every problem at once. "
                     "The specs' SQL (schemas, types, expressions) is parsed by Spark.")
    p.add_argument("--no-spark", action="store_true",
                   help="skip the checks that need Spark's SQL parser (no JVM started)")


def _add_new(commands: Commands) -> None:
    p = commands.add("new", cmd_new, help="write a new feed's specs from sample files",
                     description="Read sample files of a feed (JSON Lines, CSV with a header, "
                     "Parquet) with Spark, infer their schema as bronze will read them, and "
                     "write commented specs to edit: conf/tables/bronze/<table>.yaml (landing "
                     "path, format, schema) and conf/tables/silver/<table>.yaml (typed columns, "
                     "the key and event time found in the samples, a not-null rule on the key, "
                     "dedup with a watermark); with --gold, conf/tables/gold/<table>_daily.yaml "
                     "(an aggregate per calendar day; --gold month: <table>_monthly.yaml, per "
                     "month), and a test case of the silver table (conf/tests/silver.<table>/"
                     "sample/). Never replaces a spec. Creates the feed's landing folder, "
                     "checks the whole configuration as 'validate' does and prints the commands "
                     "that land the samples, run the flow and query it.")
    p.add_argument("table", help="the feed's table name (letters, digits and _)")
    p.add_argument("--from", dest="samples", required=True, metavar="PATH",
                   help="a sample file, or a folder of them")
    p.add_argument("--format", choices=[f.value for f in FileFormat],
                   help="the samples' format (default: from their extension: .json, .jsonl, "
                   ".ndjson, .csv, .parquet)")
    p.add_argument("--gold", nargs="?", const=Period.DAY.value, choices=[p.value for p in Period],
                   metavar="UNIT", help="also write an aggregate of the silver table per "
                   "calendar UNIT: day (the default), week, month, quarter or year")


def _add_test(commands: Commands) -> None:
    p = commands.add("test", cmd_test, help="run the specs' own test cases, offline",
                     description="Run each test case of conf/tests/<layer.name>/<case>/ "
                     "(input rows or files, the rows expected, and optionally those expected "
                     "in the quarantine) through the table's own job on a scratch lake in a "
                     "temporary folder, and compare: PASS, or FAIL with the rows missing, "
                     "extra, and the values that differ for a key. Exit 0 when every case "
                     "passes, 1 when one fails, 2 for a case that cannot be run as given.")
    p.add_argument("table", nargs="*",
                   help="a table whose cases to run: silver.orders, or orders (default: all)")


def _add_run(commands: Commands) -> None:
    p = commands.add("run", cmd_run, help="run a layer's tables",
                     description="Run the streaming jobs of a layer (or 'all' layers in order).")
    p.add_argument("layer", choices=[*(layer.value for layer in Layer), "all"])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--table", action="append", default=[], metavar="T",
                       help="a table to run (repeatable); default: all tables of the layer")
    which.add_argument("--all", action="store_true", help="all tables of the layer (default)")
    p.add_argument("--continuous", action="store_true",
                   help="keep running with a processing-time trigger (default: availableNow)")
    p.add_argument("--summary", metavar="PATH", help="also write the run summary as JSON here")
    p.add_argument("--parallel", type=at_least_one("tables"), metavar="N",
                   help="tables run at once, those that do not read each other (default: the "
                   "cores of a local master, at most 4, or with --continuous every table; 1 "
                   "runs them one after another)")


def _add_refresh(commands: Commands) -> None:
    p = commands.add("refresh", cmd_refresh, help="rebuild tables from their sources",
                     description="Rebuild silver and gold tables from their sources: each "
                     "table's checkpoint is set aside and the table emptied, then its query "
                     "reads its source again from the start. Prints the plan first. A refresh "
                     "stopped, killed or failed halfway stays open and is completed by the "
                     "next 'refresh' or 'run' (never rolled back).")
    p.add_argument("table", nargs="+", help="a table: silver.orders, its full or short name")
    p.add_argument("--downstream", action="store_true",
                   help="refresh every table that reads them too (without it, a refresh "
                   "that would leave such tables stale is refused)")
    p.add_argument("--dry-run", action="store_true", help="print the plan only")
    p.add_argument("--since", metavar="TIME", type=instant,
                   help="a bronze feed: only the files delivered (modified) at or after TIME "
                   "are read again, and only their rows replaced (ISO 8601; UTC without a zone)")
    p.add_argument("--until", metavar="TIME", type=instant,
                   help="a bronze feed: only the files delivered before TIME")


def _add_status(commands: Commands) -> None:
    p = commands.add("status", cmd_status, help="tables, row counts, checkpoints",
                     description="For each configured table: rows, Delta version, last "
                     "committed batch of its checkpoint, and files waiting in landing; for "
                     "a Kafka or Event Hubs feed, per partition the offset reached, the "
                     "latest offset and the lag; then the table-level checks whose latest "
                     "result failed (ops.quality). On a local or ADLS root it reads the "
                     "tables' Delta logs, parquet footers, checkpoints and landing without "
                     "starting Spark and without the lake's lease, so it answers while a run "
                     "holds the lake; rows it cannot read there are NULL (a view's, a "
                     "table's whose log holds no row counts): --count counts them with Spark. "
                     "A Kafka feed's offsets, and any other root, are read with Spark.")
    p.add_argument("--count", action="store_true",
                   help="start Spark and count what the files do not say: a view's rows, a "
                   "table's whose log holds no row counts (takes the lake's lease)")


def _add_sql(commands: Commands) -> None:
    p = commands.add("sql", cmd_sql, help="run a SQL query and print the result",
                     description="Run SQL on the lakehouse (tables by name) and print a table.")
    p.add_argument("query")
    p.add_argument("--limit", type=at_least_one("rows"), default=100,
                   help="rows to print at most (default 100; says so when it cuts)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.add_argument("--explain-pruning", action="store_true",
                   help="run the query and print what its scans pruned (dynamic pruning in "
                   "the plan; partitions and files read of each table's total) instead of rows")
    p.add_argument("--serve", action="store_true",
                   help="answer through `medallion serve`, started in the background when none "
                   "serves the lake (it answers the next queries in about a second, and holds "
                   "the lake until stopped: `kill <its pid>`)")


def _add_serve(commands: Commands) -> None:
    p = commands.add("serve", cmd_serve, help="serve the tables over JDBC/ODBC",
                     description="Start Spark's Thrift JDBC/ODBC server (HiveServer2's "
                     "protocol) over the lakehouse catalog, until SIGTERM or Ctrl-C. "
                     "Without authentication it listens on loopback addresses only.")
    p.add_argument("--host", default=None,
                   help="address to listen on (default: $MEDALLION_SERVE_HOST or localhost)")
    p.add_argument("--port", type=int, default=None,
                   help="port (default: $MEDALLION_SERVE_PORT or 10000)")


def _add_report(commands: Commands) -> None:
    p = commands.add("report", cmd_report, help="write an HTML report with plots",
                     description="Write one self-contained HTML page from the run history "
                     "(<ops schema>.runs): rows per batch and throughput, quarantine, "
                     "duplicate and late rates, state rows, over time; the landing backlog; "
                     "the last failures; each table's freshness.")
    p.add_argument("--out", default="report.html", metavar="PATH",
                   help="the page to write (default report.html)")
    p.add_argument("--since", default="7d", metavar="PERIOD",
                   help="the period shown, such as 30m, 12h, 7d or 2w (default 7d)")


def _add_optimize(commands: Commands) -> None:
    p = commands.add("optimize", cmd_optimize, help="compact and lay out a Delta table",
                     description="OPTIMIZE a configured Delta table: a clustered table "
                     "(cluster_by) is laid out by its clustering columns; with --zorder a "
                     "table that is not clustered is Z-ordered by those columns.")
    p.add_argument("table")
    p.add_argument("--zorder", nargs="+", default=[], metavar="COLUMN")


def _add_init(commands: Commands) -> None:
    commands.add("init", cmd_init, help="create the lake's layout",
                 description="Create the root (on ADLS: its file system) and the folders "
                 "every configured table uses: landing, archive and quarantine of each "
                 "bronze feed, tables and checkpoints. Safe to repeat.")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``medallion`` command; everything it prints is redacted (secrets masked)."""
    with redacted_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level or getattr(args, "default_log_level", "info")
    fmt = configure_logging(args.log_format, level)
    inherited = os.environ.get(LOG_FORMAT_ENV)
    os.environ[LOG_FORMAT_ENV] = fmt.value  # the processes it starts render as it does
    try:
        return _handle(args, fmt, level)
    finally:  # (a later command of the same process decides for itself)
        if inherited is None:
            os.environ.pop(LOG_FORMAT_ENV, None)
        else:
            os.environ[LOG_FORMAT_ENV] = inherited


def _handle(args: argparse.Namespace, fmt: LogFormat, level: str) -> int:
    if level == "debug":  # Spark's log with its Java stacks (framework.session)
        os.environ["MEDALLION_JAVA_STACKS"] = "1"
    else:  # (an earlier command of the same process may have set it)
        os.environ.pop("MEDALLION_JAVA_STACKS", None)
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
    finally:
        release_lake()


def _report(command: str, exc: Exception, fmt: LogFormat, level: str,
            unexpected: bool = False) -> None:
    """An error, once: a JSON event where logs are JSON, else one plain line; the stack only with
    ``--log-level debug``. An unexpected error is shown by its type and first line (a Java
    exception's text holds its whole stack)."""
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


def cmd_validate(args: argparse.Namespace) -> int:
    """Every problem in one pass: the configuration's, then the SQL of every table whose spec
    could be read (Spark parses and plans it; none with ``--no-spark``)."""
    from framework.config.loader import load_checked

    project, problems = load_checked(args.conf, args.env, columns=True)
    lake = None
    if project is not None and not args.no_spark:
        from framework.sqlcheck import parser_session, sql_problems

        # the lake's session first, when it has tables (a bare parser session would be the
        # one every later getOrCreate returns, without Delta)
        lake = _lake_session(project)
        said = {(p.file, p.key) for p in problems}  # a key's problem is said once
        problems += [p for p in sql_problems(lake or parser_session(project.env), project)
                     if (p.file, p.key) not in said]
    if problems:
        notes = [] if args.no_spark else _unchecked(args.conf, project)
        raise ConfigValidationError(problems, notes)
    assert project is not None
    by_layer: dict[str, list[str]] = {}
    for t in project.tables:
        by_layer.setdefault(t.layer.value, []).append(t.full_name)
    print(f"configuration valid: environment {project.env.name!r}, {len(project.tables)} table(s)")
    for layer, names in by_layer.items():
        print(f"  {layer}: {', '.join(names)}")
    for advice in project.env.advise():
        print(f"warning: {advice}")
    for t in project.tables:
        for advice in t.spec.advise(t, project):
            print(f"warning: {t.source_file}: {advice}")
    if lake is not None:
        _warn_stale(lake, project)
    return EXIT_OK


def cmd_new(args: argparse.Namespace) -> int:
    """A new feed's specs from its samples (:mod:`framework.scaffold`), then the configuration
    checked as ``validate`` checks it, then the commands to run next."""
    import shlex

    from framework.config.loader import load_checked
    from framework.scaffold import (
        Scaffold,
        check_table_name,
        example_case,
        find_samples,
        next_commands,
        options_of,
        read_sample,
        targets,
        write_example_case,
        write_specs,
    )
    from framework.sqlcheck import parser_session

    period = Period(args.gold) if args.gold else None
    check_table_name(args.table, period)
    samples = find_samples(args.samples, FileFormat(args.format) if args.format else None)
    project, problems = load_checked(args.conf, args.env)
    if project is None:  # no valid environment: nowhere to write, no table names
        raise ConfigValidationError(problems)
    files = targets(project.conf_dir, args.table, period)
    spark = _lake_session(project) or parser_session(project.env)
    options = options_of(args.conf, args.env)
    origin = shlex.join(["medallion", "new", args.table, "--from", args.samples,
                         *(["--format", args.format] if args.format else []),
                         *(["--gold", *([period.value] if period is not Period.DAY else [])]
                           if period else [])])
    sample = read_sample(spark, samples)
    texts = Scaffold(args.table, sample, origin).specs(period)
    written = write_specs(files, texts)
    written += write_example_case(project.conf_dir, args.table, example_case(spark, sample))
    for file in written:
        print(f"written: {file}")
    for folder in _new_folders(args, files.values()):
        print(f"ready: {folder}")
    cmd_validate(argparse.Namespace(**{**vars(args), "no_spark": False}))
    last = Layer.GOLD if period else Layer.SILVER
    shown = project.env.table_name(last, files[last].stem)
    print("next:")
    for command in next_commands(args.table, samples, shown, options):
        print(f"  {shlex.join(['medallion', *command])}")
    return EXIT_OK


def _new_folders(args: argparse.Namespace, specs: Iterable[Path]) -> list[str]:
    """The folders the new specs' tables use (a feed's landing folder, as ``init`` makes them)
    that are local and did not exist, created: the first ``validate`` then finds them, and
    ``land`` has somewhere to copy to. A spec that does not load is left to ``validate``."""
    from framework.config.loader import load_checked

    project, _ = load_checked(args.conf, args.env)
    written = {spec.resolve() for spec in specs}
    created = []
    for table in project.tables if project is not None else []:
        if Path(table.source_file).resolve() not in written:
            continue
        for folder in table.spec.folders(table):
            if "://" not in folder and not os.path.isdir(folder):  # remote: made by 'init'
                os.makedirs(folder)
                created.append(folder)
    return created


def _unchecked(conf: str | None, project: ProjectConfig | None) -> list[str]:
    """A line for each table spec whose SQL Spark did not check: one that could not be read
    (or, without a valid environment, every one); and for each table reading one, directly
    or not, whose columns Spark could not resolve."""
    from framework.config.loader import default_conf_dir

    folder = Path(project.conf_dir if project else conf or default_conf_dir()) / "tables"
    read = {t.source_file for t in project.tables} if project else set()
    notes = [f"{spec.parent.name}.{spec.stem}: SQL not checked with Spark until the problems "
             f"above are fixed ({spec})"
             for spec in sorted(folder.glob("*/*.y*ml")) if str(spec) not in read]
    if project is None:
        return notes
    present = {(t.layer, t.name) for t in project.tables}
    layers = {layer.value for layer in Layer}
    unknown = {(Layer(s.parent.name), s.stem) for s in folder.glob("*/*.y*ml")
               if s.parent.name in layers and str(s) not in read} - present
    for t in project.in_flow_order(project.tables):
        unread = [f"{layer.value}.{name}" for layer, name in t.spec.upstream()
                  if (layer, name) in unknown]
        if unread:
            unknown.add((t.layer, t.name))
            notes.append(f"{t.layer.value}.{t.name}: columns not resolved with Spark until "
                         f"the problems of {', '.join(unread)} above are fixed")
    return notes


def _lake_session(project: ProjectConfig) -> Any:
    """The environment's session when its lake has tables (None without, or while another
    command holds the lake: said in a note)."""
    from framework.errors import LakeInUseError

    tables = project.env.path("tables")
    if not storage_of(project, tables, "medallion validate").exists(tables):
        return None
    try:
        return spark_for(project, "medallion validate")
    except LakeInUseError as exc:
        print(f"note: rows written under an earlier spec were not looked for: {exc}")
        return None


def _warn_stale(spark: Any, project: ProjectConfig) -> None:
    """A warning for each table whose rows were written under spec parts that changed since,
    naming the refresh that recomputes them."""
    from framework.staleness import refresh_command, stale_tables

    for t, changes in stale_tables(spark, project):
        print(f"warning: {t.source_file}: rows of {t.full_name} were written under another "
              f"spec: {'; '.join(c.describe() for c in changes)}. Only a refresh recomputes "
              f"them: {refresh_command(project, t)}")


def cmd_test(args: argparse.Namespace) -> int:
    """Each test case of the tables asked, PASS or FAIL with its differences
    (:mod:`framework.spectest`)."""
    from framework.spectest import SpecTestError, find_cases, run_cases, scratch_refusal

    project = project_of(args)
    cases = find_cases(project, args.table)
    refusal = scratch_refusal(project.env)
    if refusal is not None:
        raise SpecTestError(refusal)
    spark = spark_for(project, "medallion-test")
    failed = 0
    for outcome in run_cases(spark, project, cases):
        for line in outcome.lines():
            print(line, flush=True)
        failed += not outcome.passed
    print(f"{len(cases) - failed} passed, {failed} failed")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from framework.job import RunStatus, StopSignal
    from framework.runner import run_until_stopped, select_tables, up_to_date

    project = project_of(args)
    layer = None if args.layer == "all" else Layer(args.layer)
    tables = select_tables(project, layer, args.table)
    if not tables:
        print(f"no tables configured for layer {args.layer!r}", file=sys.stderr)
        return EXIT_CONFIG
    stop = StopSignal()  # a stop asked for while the lake is taken or Spark starts counts too
    with stop.on_signals(signal.SIGTERM, signal.SIGINT):
        app = f"medallion run {args.layer}"
        run_id = take_lake(project, app, writes=True)
        # nothing new anywhere: answered from the lake's files, without starting Spark
        summary = None if args.continuous else up_to_date(project, tables, run_id)
        if summary is None:
            summary = run_until_stopped(spark_for(project, app, writes=True), project, tables,
                                        args.continuous, run_id=run_id, stop=stop,
                                        parallel=args.parallel)
    print(summary.render())
    if args.summary:
        write_json(args.summary, summary.to_dict())
    return EXIT_FAILED if summary.status is RunStatus.FAILED else EXIT_OK


def cmd_refresh(args: argparse.Namespace) -> int:
    from framework.job import RunContext, RunStatus, StopSignal
    from framework.refresh import Refresh, finish_open, plan_refresh
    from framework.runner import run_tables
    from framework.timeslice import TimeSlice

    if args.since and args.until and args.since >= args.until:
        raise UsageError(f"expected --since before --until, found {args.since.isoformat()} "
                         f"and {args.until.isoformat()}")
    reread_slice = TimeSlice(args.since, args.until) if args.since or args.until else None
    project = project_of(args)
    stop = StopSignal()
    with stop.on_signals(signal.SIGTERM, signal.SIGINT):
        spark = spark_for(project, "medallion refresh", writes=not args.dry_run)
        ctx = RunContext(stop=stop)
        if lake_run_id():
            ctx.run_id = lake_run_id() or ctx.run_id
        if not args.dry_run:
            still_open = finish_open(spark, project, ctx, run_tables)  # (one left open first)
            if still_open and stop.is_set():  # (stopped as it completed it: not a failure)
                print("refresh stopped: the next 'medallion run' or 'medallion refresh' "
                      "completes it")
                return EXIT_OK
            if still_open:
                print(f"error: {still_open}", file=sys.stderr)
                return EXIT_FAILED
        refresh = Refresh(spark, project, ctx, run_tables)
        plan = plan_refresh(spark, project, args.table, args.downstream, reread_slice)
        print(plan.render(), flush=True)
        if args.dry_run:
            return EXIT_OK
        summary = refresh.begin(plan)
    if summary.tables:
        print(summary.render())
    if summary.status is RunStatus.FAILED:
        return EXIT_FAILED
    done = not refresh.journal.records()
    print("refresh done" if done else "refresh stopped: the next 'medallion run' or "
          "'medallion refresh' completes it")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from framework.status import logged_status, table_status, without_spark

    project = project_of(args)
    started: list[SparkSession] = []

    def session() -> SparkSession:  # Spark (and the lease) only for what needs them
        if not started:
            started.append(spark_for(project, "medallion-status"))
        return started[0]

    rows = [logged_status(t, session, count=args.count) if without_spark(t)
            else table_status(session(), t) for t in project.tables]
    print_table(
        ["table", "kind", "rows", "version", "last batch", "pending files", "pending bytes"],
        [[r.table, r.kind, r.rows, r.version, r.last_batch, r.pending_files, r.pending_bytes]
         for r in rows],
    )
    offsets = [[r.table, o["topic"], o["partition"], o["committed"], o["latest"], o["lag"]]
               for r in rows for o in r.offsets]
    if offsets:
        print()
        print_table(["table", "topic", "partition", "committed offset", "latest offset", "lag"],
                    offsets)
    held = [[r.table, r.held.rows, f"{r.held.oldest:%Y-%m-%d %H:%M:%S}" if r.held.oldest
             else ""] for r in rows if r.held is not None]
    if held:
        print()
        print_table(["table", "rows held", "oldest held at (UTC)"], held)
    _print_failing_checks(project, session)
    for r in rows:
        if r.skipped:
            shown = ", ".join(r.skipped[:5]) + (", ..." if len(r.skipped) > 5 else "")
            print(f"{r.table}: {len(r.skipped)} file(s) in landing will never be read: a name "
                  f"starting with '.' or '_' is skipped by Spark's file source; rename them "
                  f"to ingest them: {shown}")
    open_now = open_operation(project, started[0] if started else None)
    if open_now is not None:
        print(f"refresh {open_now.op} is open ({open_now.state.value} since {open_now.at}): "
              f"the next 'medallion run' or 'medallion refresh' completes it")
    return EXIT_OK


def _print_failing_checks(project: ProjectConfig, session: Callable[[], SparkSession]) -> None:
    """The table-level checks whose latest result failed (``<ops>.quality``), if any."""
    from framework.deltalog import readable
    from framework.quality import failing_checks

    failing = failing_checks(project.env, None if readable(project.env) else session())
    if failing:
        print()
        print_table(["table", "failing check", "kind", "action", "expected", "found", "at"],
                    [[f["table"], f["check"], f["kind"], f["action"], f["threshold"],
                      f["observed"], f["recorded_at"]] for f in failing])


def open_operation(project: ProjectConfig, spark: Any) -> Record | None:
    """The last record of the operation open in the lake's journal, if any."""
    from framework.journal import Journal
    from framework.storage import storage_for

    store = storage_for(project.env.root, project.env, spark)
    journal = Journal(store, project.env.root)
    return journal.last() if store.exists(journal.folder) else None


def cmd_serve(args: argparse.Namespace) -> int:
    from framework.serve import serve

    serve(project_of(args), args.host, args.port)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from framework.report import parse_since, write_report

    since = parse_since(args.since)
    project = project_of(args)
    report = write_report(spark_for(project, "medallion-report"), project, Path(args.out),
                          since)
    print(f"wrote {report.path}: {report.batches} batches of {report.tables} table(s), "
          f"{report.failures} failure(s), {len(report.plots)} plots, over the last "
          f"{args.since}")
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    project = project_of(args)
    if args.serve and not args.explain_pruning:
        _serve_in_background(project, args)
    if not args.explain_pruning and _served_sql(project, args):
        return EXIT_OK
    if first_time(project, "sql-without-serve"):
        get_logger().info("sql.starting_spark", hint=SERVE_HINT)
    spark = spark_for(project, "medallion-sql")
    if args.explain_pruning:
        from framework.pruning import explain_pruning

        with query_errors():
            evidence = explain_pruning(spark, args.query)
        print(json.dumps(evidence.to_dict()) if args.json else evidence.render())
        return EXIT_OK
    with query_errors():
        df = spark.sql(args.query)
        rows = df.limit(args.limit + 1).collect()  # one more: whether the output is cut
    _print_rows(args, df.columns, [list(r) for r in rows],
                [r.asDict(recursive=True) for r in rows])
    return EXIT_OK


# Said on a lake's first query that starts Spark of its own.
SERVE_HINT = ("this query starts Spark, which takes 15 to 30 s; `medallion serve` in another "
              "terminal (or `medallion sql --serve`, in the background) keeps it up and "
              "answers each query in about a second (stop it before a run: it holds the lake)")


def _serve_in_background(project: ProjectConfig, args: argparse.Namespace) -> None:
    """For ``sql --serve``: start ``medallion serve`` detached when none serves the lake, and
    say how to stop it (on stderr: stdout holds the rows)."""
    from framework.commands import served_at

    if served_at(project) is not None:
        return
    from framework.serve import start_detached

    server = start_detached(project, args.conf)
    print(f"started medallion serve (pid {server.pid}) on {server.address}: the next "
          f"`medallion sql` answers through it in about a second. It holds the lake: "
          f"`medallion run` and the other commands that take the lake are refused until it "
          f"stops. Stop it with `kill {server.pid}` (SIGTERM; its log: {server.log})",
          file=sys.stderr, flush=True)


def _served_sql(project: ProjectConfig, args: argparse.Namespace) -> bool:
    """Answer ``sql`` through a ``medallion serve`` that holds the lake (see
    :mod:`framework.served`), without a Spark session of its own; False when none does."""
    from framework.commands import served_at

    address = served_at(project)
    if address is None:
        return False
    from framework.served import query

    answer = query(project, address, args.query, args.limit + 1)
    if answer is None:
        return False
    columns, rows = answer
    get_logger(address=address).debug("sql.served", rows=len(rows))
    _print_rows(args, columns, [list(r) for r in rows],
                [dict(zip(columns, r, strict=True)) for r in rows])
    return True


def _print_rows(args: argparse.Namespace, columns: list[str], rows: list[list[Any]],
                objects: list[dict[str, Any]]) -> None:
    """At most ``--limit`` rows (fetched with one more, to know whether the output is cut):
    ``rows`` as a table, or their ``objects`` as JSON lines."""
    cut = len(rows) > args.limit
    if args.json:
        for r in objects[:args.limit]:
            print(json.dumps(r, default=str))
    else:
        print_table(columns, rows[:args.limit])
    if cut:  # on stderr for JSON lines (stdout holds rows only), under the table otherwise
        print(f"output cut at {args.limit} row{'s' if args.limit != 1 else ''}: the query "
              "returns more (--limit N shows more)", file=sys.stderr if args.json else sys.stdout)


@contextlib.contextmanager
def query_errors() -> Iterator[None]:
    """Spark's rejection of a query given by a person, as one line (a :class:`QueryError`)."""
    from pyspark.errors import AnalysisException

    try:
        yield
    except AnalysisException as exc:
        raise QueryError(f"Spark cannot run the query: {first_line(exc)}") from exc


def cmd_optimize(args: argparse.Namespace) -> int:
    from framework.delta import optimize

    project = project_of(args)
    table = project.table(args.table)
    spark = spark_for(project, "medallion-optimize", writes=True)
    if not spark.catalog.tableExists(table.full_name):
        raise TableNotFoundError(f"expected table {table.full_name} to exist, found none "
                                 "(run its layer first)")
    if getattr(table.spec, "format", "delta") != "delta":
        raise ConfigError(f"expected a Delta table, found {table.full_name} stored as "
                          f"{table.spec.format}", file=table.source_file, key="format")  # type: ignore[attr-defined]
    columns = spark.table(table.full_name).columns
    unknown = [c for c in args.zorder if c not in columns]
    if unknown:
        raise UsageError(f"expected --zorder columns of {table.full_name} "
                         f"({', '.join(columns)}), found {', '.join(map(repr, unknown))}")
    if any("`" in c for c in args.zorder):  # Delta re-reads the names unquoted, and fails
        raise UsageError("expected --zorder columns whose names hold no backtick (Delta's "
                         f"OPTIMIZE cannot Z-order them), found {args.zorder!r}")
    result = optimize(spark, table.full_name, zorder_by=args.zorder)
    print(f"{table.full_name}: optimized " + " ".join(f"{k}={v}" for k, v in result.items()))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    project = project_of(args)
    env = project.env
    folders = [env.path("tables"), env.path("_checkpoints")]
    for table in project.tables:
        folders += table.spec.folders(table)
    store = storage_of(project, env.root, "medallion-init")
    store.makedirs(env.root)
    for folder in dict.fromkeys(folders):
        store.makedirs(folder)
        print(f"ready: {folder}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
