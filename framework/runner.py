"""Run a selection of tables in the order data flows, independent ones at once."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from framework.config.model import Environment, Layer, ProjectConfig, Table
from framework.errors import OperationOpenError, first_line
from framework.identifiers import quote_name
from framework.job import (
    RunContext,
    RunStatus,
    RunSummary,
    StopSignal,
    TableRunSummary,
    TriggerPolicy,
)
from framework.jvm import is_connect
from framework.layers import job_class
from framework.listener import ProgressListener
from framework.logging import get_logger
from framework.session import local_cores

# Tables run at once by default at most: while one query plans and commits on the driver,
# another's tasks use the cores; past a few, queries only queue for the same cores.
MAX_DEFAULT_PARALLEL = 4


def default_parallel(env: Environment) -> int:
    """Tables run at once unless ``--parallel`` says: the cores of a local master (of this
    machine, for any other), at most :data:`MAX_DEFAULT_PARALLEL`."""
    cores = local_cores(env.master) or os.cpu_count() or 1
    return max(1, min(MAX_DEFAULT_PARALLEL, cores))


def run_until_stopped(spark: SparkSession, project: ProjectConfig, tables: Sequence[Table],
                      continuous: bool, watch: Callable[..., None] | None = None,
                      run_id: str | None = None, stop: StopSignal | None = None,
                      parallel: int | None = None) -> RunSummary:
    """Run ``tables`` in flow order, up to ``parallel`` at once (:func:`run_tables`; by
    default :func:`default_parallel`, or all of them when ``continuous``); SIGTERM and
    SIGINT stop them at a batch boundary.
    ``watch`` is called with each micro-batch's progress; ``run_id`` is the lake lease's,
    when the command took one; ``stop``, the command's stop request, if it listened for
    signals before (a stop asked for before any table started skips them all)."""
    at_once = parallel or (max(1, len(tables)) if continuous
                           else default_parallel(project.env))
    if is_connect(spark) and at_once > 1:
        # Commands sent from several threads through one Spark Connect session fail in the
        # client (an AssertionError as each job prepares): over Connect, one at a time.
        if parallel and parallel > 1:
            get_logger(env=project.env.name).warning(
                "run.parallel.refused", asked=parallel,
                reason="over Spark Connect the tables run one after another")
        at_once = 1
    ctx = RunContext(
        trigger=TriggerPolicy(continuous=continuous, interval=project.env.processing_interval),
        # (with a processing-time trigger a table runs until stopped: every table that reads
        # none of the others runs from the start)
        parallel=at_once,
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
    """Run each table's job. A table that reads (directly or through others) a table that
    failed, or was skipped, is skipped; the others run. After a stop request the rest are
    skipped.

    With ``ctx.parallel`` above 1, up to that many tables run at once, each on a thread of
    its own in the one session, as Spark's declarative pipelines run independent flows: a
    table starts once every table it reads among ``tables`` has ended (the bronze feeds at
    once, then each silver table as soon as its sources are in). The summary lists the
    tables in flow order all the same."""
    summary = RunSummary(run_id=ctx.run_id, env=project.env.name)
    log = get_logger(env=project.env.name, run_id=ctx.run_id)
    started = time.monotonic()
    log.info("run.started", tables=[t.full_name for t in tables],
             **({"parallel": ctx.parallel} if ctx.parallel > 1 else {}))
    create_schemas(spark, tables)
    not_run: dict[tuple[Layer, str], str] = {}  # failed ("") or skipped (why)
    ended: dict[tuple[Layer, str], TableRunSummary] = {}

    def skip_reason(table: Table) -> str | None:
        return _skip_reason(project, table, not_run, ctx)

    def end(table: Table, result: TableRunSummary) -> None:
        ended[(table.layer, table.name)] = result
        if result.status is RunStatus.FAILED:
            not_run[(table.layer, table.name)] = ""
        elif result.status is RunStatus.SKIPPED:
            not_run[(table.layer, table.name)] = result.error or ""
            log.warning("job.skipped", table=table.full_name, reason=result.error)
            summary.stopped = summary.stopped or ctx.stop.is_set()

    if ctx.parallel > 1 and len(tables) > 1:
        _run_at_once(spark, tables, ctx, skip_reason, end)
    else:
        for table in tables:
            reason = skip_reason(table)
            end(table, _skipped(table, reason) if reason is not None
                else job_class(table)(spark, table, ctx).run())
    summary.tables = [ended[(t.layer, t.name)] for t in tables]
    summary.duration_s = time.monotonic() - started
    log.info("run.finished", **summary.to_dict())
    return summary


def _skipped(table: Table, reason: str) -> TableRunSummary:
    return TableRunSummary(table.full_name, table.layer.value, RunStatus.SKIPPED, error=reason)


def _run_at_once(spark: SparkSession, tables: Sequence[Table], ctx: RunContext,
                 skip_reason: Callable[[Table], str | None],
                 end: Callable[[Table, TableRunSummary], None]) -> None:
    """Run ``tables`` up to ``ctx.parallel`` at once (see :func:`run_tables`).

    This thread starts each table on a daemon thread of its own once the tables it reads
    have ended, and hands every result to ``end`` (skips too, with ``skip_reason``'s
    reason), so the bookkeeping stays on one thread.

    A second stop signal, which only this thread receives, ends the run at once, as it ends a
    run of one table at a time: the streaming queries still running are stopped and their
    tables end failed ("interrupted by a second signal"), whatever step their job was in;
    the next run takes what they left, as after a kill."""
    selected = {(t.layer, t.name) for t in tables}
    waits_for = {(t.layer, t.name): {u for u in t.spec.upstream() if u in selected}
                 for t in tables}
    pending = list(tables)
    running: dict[tuple[Layer, str], Table] = {}
    ended: set[tuple[Layer, str]] = set()
    results: queue.Queue[tuple[Table, TableRunSummary]] = queue.Queue()

    def work(table: Table) -> None:
        try:
            result = job_class(table)(spark, table, ctx).run()
        except BaseException as exc:  # (a job ends in a summary; anything else still ends it)
            result = TableRunSummary(table.full_name, table.layer.value, RunStatus.FAILED,
                                     error=f"{type(exc).__name__}: {first_line(exc)}")
        results.put((table, result))

    def take(table: Table, result: TableRunSummary) -> None:
        del running[(table.layer, table.name)]
        ended.add((table.layer, table.name))
        end(table, result)

    with ctx.stop.forwarding():
        while pending or running:
            if ctx.stop.is_forced():
                with contextlib.suppress(queue.Empty):
                    while True:  # (what ended before)
                        take(*results.get_nowait())
                _interrupt(spark, list(running.values()), ctx, take)
                for table in pending:
                    end(table, _skipped(table, f"a stop was requested ({ctx.stop.reason})"))
                return
            for table in list(pending):
                key = (table.layer, table.name)
                if not waits_for[key] <= ended:
                    continue
                reason = skip_reason(table)
                if reason is None and len(running) >= ctx.parallel:
                    continue
                pending.remove(table)
                if reason is not None:
                    ended.add(key)
                    end(table, _skipped(table, reason))
                    continue
                running[key] = table
                threading.Thread(target=work, args=(table,), daemon=True,
                                 name=f"job {table.full_name}").start()
            if not running:
                if pending:  # (in flow order, a table reads only tables before it)
                    raise RuntimeError(f"expected tables that read each other in flow order, "
                                       f"found {[t.full_name for t in pending]} waiting")
                continue
            with contextlib.suppress(queue.Empty):
                take(*results.get(timeout=1.0))


def _interrupt(spark: SparkSession, tables: Sequence[Table], ctx: RunContext,
               take: Callable[[Table, TableRunSummary], None]) -> None:
    """End ``tables``, whose jobs still run, failed by a second stop signal, their streaming
    queries stopped (a job in its query's loop stops it too, and says so itself)."""
    for table in tables:
        get_logger(env=table.env.name, layer=table.layer.value, table=table.full_name,
                   run_id=ctx.run_id).warning("job.stop.forced", signal=ctx.stop.forced_by)
        take(table, TableRunSummary(table.full_name, table.layer.value, RunStatus.FAILED,
                                    error="interrupted by a second signal"))
    for query in spark.streams.active:
        try:
            query.stop()
        except Exception as exc:  # (the JVM may be going: the next run takes what is left)
            get_logger(run_id=ctx.run_id).warning("job.stop.failed", error=first_line(exc))


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
