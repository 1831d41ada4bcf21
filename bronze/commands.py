"""Bronze's ``medallion`` commands: ``land``, ``purge-archive``, ``infer-schema``,
``schema`` and ``backfill``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from bronze.spec import BronzeTableSpec, CleanSource
from framework.commands import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    instant,
    print_table,
    project_of,
    spark_for,
    storage_of,
)
from framework.config.model import Layer, Table
from framework.errors import OperationOpenError, UsageError
from framework.layers import Commands
from framework.logging import get_logger
from framework.storage import FileInfo, land, local_path, parse_retention, scheme_of


def add_commands(commands: Commands) -> None:
    for add in (_add_land, _add_purge_archive, _add_infer_schema, _add_schema, _add_backfill):
        add(commands)


def _add_land(commands: Commands) -> None:
    p = commands.add(
        "land", cmd_land, help="upload files into a feed's landing",
        description="Upload local files into a bronze feed's landing folder, in the order "
        "given: each appears whole (written under a hidden name, then renamed) with a later "
        "modification time than the one before, so the feed is read in that order.")
    p.add_argument("table")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--keep-times", action="store_true",
                   help="give each file its own local modification time instead (local "
                   "stores only): the feed is read in the order of those times")


def _add_purge_archive(commands: Commands) -> None:
    p = commands.add(
        "purge-archive", cmd_purge_archive,
        help="delete archived landing files past their retention",
        description="Delete the archived files of bronze feeds archived longer ago than the "
        "retention (from the archive's manifests; a file archived before manifests were kept "
        "is aged from its modification time).")
    p.add_argument("--older-than", required=True, metavar="AGE",
                   help="retention: 30d, 12h or 90m")
    p.add_argument("--table", action="append", default=[], metavar="T",
                   help="a bronze table (repeatable); default: all")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")


def _add_infer_schema(commands: Commands) -> None:
    p = commands.add(
        "infer-schema", cmd_infer_schema,
        help="infer a bronze feed's schema once and write it into its spec",
        description="Read the feed's landing files in batch, infer a schema, and write it as "
        "DDL into the spec file (it is never inferred at run time).")
    p.add_argument("table")
    p.add_argument("--force", action="store_true", help="replace an existing schema")


def _add_schema(commands: Commands) -> None:
    p = commands.add(
        "schema", cmd_schema, help="print every schema a feed has had (or add columns)",
        description="Print the schema history of a bronze feed of files: each version with "
        "the batch it took effect at, why (created, spec, addNewColumns, added) and the "
        "columns added or widened. With --add, add columns to the feed's table (nullable, at "
        "the end) from the next batch on: the way to accept new columns that "
        "failOnNewColumns refused.")
    p.add_argument("table")
    p.add_argument("--add", metavar="DDL",
                   help="columns to add, e.g. \"channel STRING, qty BIGINT\"")


def _add_backfill(commands: Commands) -> None:
    p = commands.add(
        "backfill", cmd_backfill, help="ingest a historical folder of files into a feed, once",
        description="Ingest the files of a folder (years of history, say) into a bronze feed "
        "through its own job, where they are: nothing there is moved. Exactly once: run "
        "again, or after a kill, it reads only the files it has not; a file the landing feed "
        "ingested (the same path under landing and size) is left out, and a landing file a "
        "backfill ingested is archived by the next run without being read again. The "
        "landing feed goes on as before.")
    p.add_argument("table")
    p.add_argument("--from", dest="folder", required=True, metavar="PATH",
                   help="the folder of files (read recursively, with the feed's "
                   "path_glob_filter)")
    p.add_argument("--since", metavar="TIME", type=instant,
                   help="only files modified at or after TIME (ISO 8601; UTC without a zone)")
    p.add_argument("--until", metavar="TIME", type=instant,
                   help="only files modified before TIME")
    p.add_argument("--max-files", type=int, default=500, metavar="N",
                   help="files per batch (default 500)")


def cmd_backfill(args: argparse.Namespace) -> int:
    from bronze.backfill import Backfill, BackfillJob, check_folder
    from framework.job import RunContext, RunStatus, RunSummary, StopSignal
    from framework.refresh import finish_open
    from framework.runner import run_tables

    project = project_of(args)
    table = project.table(args.table, Layer.BRONZE)
    _spec(table)
    if args.since and args.until and args.since >= args.until:
        raise UsageError(f"expected --since before --until, found {args.since.isoformat()} "
                         f"and {args.until.isoformat()}")
    if args.max_files < 1:
        raise UsageError(f"expected --max-files of 1 or more, found {args.max_files}")
    folder = args.folder if scheme_of(args.folder) not in ("", "file") \
        else os.path.abspath(local_path(args.folder))  # one spelling: the key, the file keys
    check_folder(table, folder)
    backfill = Backfill(folder, args.since, args.until, args.max_files)
    stop = StopSignal()
    with stop.on_signals(signal.SIGTERM, signal.SIGINT):
        spark = spark_for(project, "medallion backfill", writes=True)
        ctx = RunContext(stop=stop, operation=backfill.operation)
        # a refresh left open is completed first: until then the feed holds part of its rows
        still_open = finish_open(spark, project, RunContext(stop=stop), run_tables)
        if still_open and not stop.is_set():
            raise OperationOpenError(f"expected the refresh left open to complete before a "
                                     f"backfill, found it still open: {still_open}")
        if stop.is_set():
            return EXIT_OK
        started = time.perf_counter()
        result = BackfillJob(spark, table, ctx, backfill).run()
    summary = RunSummary(run_id=ctx.run_id, env=project.env.name, tables=[result],
                         duration_s=time.perf_counter() - started)
    print(summary.render())
    return EXIT_FAILED if summary.status is RunStatus.FAILED else EXIT_OK


def _spec(table: Table) -> BronzeTableSpec:
    """The spec of a feed of files; a clear error for a Kafka or Event Hubs feed."""
    if not isinstance(table.spec, BronzeTableSpec):
        kind = getattr(getattr(table.spec, "source", None), "format", "no files")
        raise UsageError(f"expected a feed of landing files, found {table.full_name} reading "
                         f"{kind} (source.format in {table.source_file})")
    return table.spec


def cmd_land(args: argparse.Namespace) -> int:
    project = project_of(args)
    table = project.table(args.table, Layer.BRONZE)
    landing = _spec(table).landing(table)
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"expected files to upload, found none at: {', '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    store = storage_of(project, landing, "medallion-land")
    if args.keep_times and store.resolution_ms(landing) != 1:
        raise UsageError(f"expected a store whose files' times can be set for --keep-times, "
                         f"found {landing}, whose store sets them itself when a file is "
                         "written; land without --keep-times (each file then gets a later "
                         "time than the one before)")
    log = get_logger(env=project.env.name, table=table.full_name)

    def landed(local_file: str, info: FileInfo) -> None:  # one line a file: the print's
        log.debug("landing.uploaded", file=local_file, target=info.path, bytes=info.size,
                 modified_ms=info.modified_ms)
        print(f"landed: {info.path}", flush=True)

    land(store, args.files, landing, keep_times=args.keep_times, on_landed=landed)
    return EXIT_OK


def cmd_purge_archive(args: argparse.Namespace) -> int:
    from bronze.reconcile import purge_archive

    project = project_of(args)
    retention = parse_retention(args.older_than)
    tables = ([project.table(t, Layer.BRONZE) for t in args.table] if args.table
              else [t for t in project.of_layer(Layer.BRONZE)
                    if isinstance(t.spec, BronzeTableSpec)])
    now = int(time.time() * 1000)
    rows = []
    for table in tables:
        spec = _spec(table)
        if spec.source.clean_source is not CleanSource.ARCHIVE:
            continue
        archive = spec.archive_dir(table)
        store = storage_of(project, archive, "medallion-purge")
        purged = purge_archive(store, archive, retention, now, dry_run=args.dry_run)
        size = sum(f.size for f in purged)
        get_logger(env=project.env.name, table=table.full_name).info(
            "archive.purged", archive=archive, files=len(purged), bytes=size,
            dry_run=args.dry_run, older_than=args.older_than)
        rows.append([table.full_name, archive, len(purged), size])
    print_table(["table", "archive", "would delete" if args.dry_run else "deleted", "bytes"],
                rows)
    return EXIT_OK


def cmd_infer_schema(args: argparse.Namespace) -> int:
    from bronze.schema import infer_schema, write_schema

    project = project_of(args)
    table = project.table(args.table, Layer.BRONZE)
    _spec(table)  # a feed of files
    spark = spark_for(project, "medallion-infer-schema")
    ddl = infer_schema(spark, table)
    write_schema(table, ddl, force=args.force)
    print(f"{table.source_file}: schema: {ddl}")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from bronze.batch import METADATA_FIELDS
    from bronze.evolution import SchemaCause, SchemaHistory
    from framework.checkpoint import last_committed_batch
    from framework.sqlcheck import parse_schema

    project = project_of(args)
    table = project.table(args.table, Layer.BRONZE)
    spec = _spec(table)
    spark = spark_for(project, "medallion-schema", writes=bool(args.add))
    internal = [*([spec.rescued_column] if spec.rescued_column else []),
                *[f.name for f in METADATA_FIELDS]]
    history = SchemaHistory(spark, name=table.qualified("schemas"),
                            location=table.companion_location("schemas"),
                            bronze=table.location, internal=internal,
                            log=get_logger(env=project.env.name, table=table.full_name))
    location = table.companion_location("schemas")
    if not storage_of(project, location, "medallion-schema").exists(f"{location}/_delta_log"):
        raise UsageError(f"expected the schema history of {table.full_name}, found none: the "
                         f"feed has not run yet ('medallion run bronze --table {table.name}')")
    if args.add:
        try:
            added = parse_schema(args.add)
        except ValueError as exc:
            raise UsageError(f"expected columns as DDL for --add (e.g. \"channel STRING\"), "
                             f"found {args.add!r}: {exc}") from exc
        have = {f.name.lower() for f in history.table_records().fields}
        taken = [f.name for f in added.fields if f.name.lower() in have]
        if taken:
            raise UsageError(f"expected new columns for --add, found {', '.join(taken)} "
                             f"already in {table.full_name}")
        next_batch = last_committed_batch(table.checkpoint, storage_of(
            project, table.checkpoint, "medallion-schema")) + 1
        history.add_columns({f.name: f.dataType for f in added.fields}, next_batch,
                            cause=SchemaCause.ADDED)
    rows = [[r["version"], r["batch_id"], str(r["recorded_at"])[:19], r["cause"],
             r["added"] or "", r["widened"] or "", r["schema"]] for r in history.rows()]
    print_table(["version", "from batch", "recorded", "cause", "added", "widened", "schema"],
                rows)
    return EXIT_OK
