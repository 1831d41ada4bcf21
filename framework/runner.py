"""Run a selection of tables, layer by layer, in the order data flows."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from framework.config.model import Layer, ProjectConfig, Table
from framework.errors import OperationOpenError
from framework.identifiers import quote_name
from framework.job import (
    RunContext,
    RunStatus,
    RunSummary,
    StopSignal,
    TableRunSummary,
    TriggerPolicy,
)
from framework.layers import job_class
from framework.listener import ProgressListener
from framework.logging import get_logger


def run_until_stopped(spark: SparkSession, project: ProjectConfig, tables: Sequence[Table],
                      continuous: bool, watch: Callable[..., None] | None = None,
                      run_id: str | None = None, stop: StopSignal | None = None
                      ) -> RunSummary:
    """Run ``tables`` in order (:func:`run_tables`); SIGTERM and SIGINT stop them at a batch
    boundary. ``watch`` is called with each micro-batch's progress; ``run_id`` is the lake
    lease's, when the command took one; ``stop``, the command's stop request, if it listened
    for signals before (a stop asked for before any table started skips them all)."""
    ctx = RunContext(
        trigger=TriggerPolicy(continuous=continuous, interval=project.env.processing_interval)
    )
    if run_id:
        ctx.run_id = run_id
    if stop is not None:
        ctx.stop = stop
    watching = (ProgressListener.install(spark).watching(watch) if watch
                else contextlib.nullcontext())
    with ctx.stop.on_signals(signal.SIGTERM, signal.SIGINT), watching:
        from framework.refresh import finish_open

        still_open = finish_open(spark, project, ctx, run_tables)  # (a refresh left open)
        if still_open and not ctx.stop.is_set():
            # its tables hold part of their rows: no job may write them until it is done
            raise OperationOpenError(f"expected the refresh left open to complete before "
                                     f"the tables run, found it still open: {still_open}")
        return run_tables(spark, project, tables, ctx)


def select_tables(
    project: ProjectConfig, layer: Layer | None, names: Sequence[str] = ()
) -> list[Table]:
    """The tables of ``layer`` (all layers when None), or only those named, in flow order: by
    layer, and within a layer after the tables they read (a gold mart after its fact)."""
    if names:
        chosen = [project.table(n, layer) for n in names]
    else:
        chosen = [t for t in project.tables if layer is None or t.layer == layer]
    return project.in_flow_order(chosen)


def create_schemas(spark: SparkSession, tables: Sequence[Table]) -> list[str]:
    """Create the catalog schema of every layer ``tables`` write, before any job runs (a gold
    view made before any gold table would otherwise find no schema); returns them."""
    schemas = list(dict.fromkeys(f"{t.env.catalog}.{t.schema}" for t in tables))
    for schema in schemas:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote_name(schema)}")
    return schemas


def run_tables(
    spark: SparkSession, project: ProjectConfig, tables: Sequence[Table], ctx: RunContext
) -> RunSummary:
    """Run each table's job, in order. A table that reads (directly or through others) a
    table that failed, or was skipped, is skipped; the others run. After a stop request the
    rest are skipped."""
    summary = RunSummary(run_id=ctx.run_id, env=project.env.name)
    log = get_logger(env=project.env.name, run_id=ctx.run_id)
    started = time.monotonic()
    log.info("run.started", tables=[t.full_name for t in tables])
    create_schemas(spark, tables)
    not_run: dict[tuple[Layer, str], str] = {}  # failed ("") or skipped (why)
    for table in tables:
        reason = _skip_reason(project, table, not_run, ctx)
        if reason is not None:
            not_run[(table.layer, table.name)] = reason
            log.warning("job.skipped", table=table.full_name, reason=reason)
            summary.stopped = summary.stopped or ctx.stop.is_set()
            summary.tables.append(TableRunSummary(table.full_name, table.layer.value,
                                                  RunStatus.SKIPPED, error=reason))
            continue
        job = job_class(table)(spark, table, ctx)
        done = job.run()
        summary.tables.append(done)
        if done.status is RunStatus.FAILED:
            not_run[(table.layer, table.name)] = ""
    summary.duration_s = time.monotonic() - started
    log.info("run.finished", **summary.to_dict())
    return summary


def _skip_reason(project: ProjectConfig, table: Table, not_run: dict[tuple[Layer, str], str],
                 ctx: RunContext) -> str | None:
    """Why ``table`` is not run: a stop was requested, or a table it reads did not run."""
    if ctx.stop.is_set():
        return f"a stop was requested ({ctx.stop.reason})"
    for upstream in table.spec.upstream():
        if upstream in not_run:
            name = project.env.table_name(*upstream)
            why = not_run[upstream]
            return f"it reads {name}, which " + (f"was skipped: {why}" if why else "failed")
    return None
