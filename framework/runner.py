"""Run a selection of tables in the order data flows, independent ones at once."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from graphlib import TopologicalSorter

from pyspark.sql import SparkSession

from framework.config.model import Environment, Layer, ProjectConfig, Table
from framework.errors import MedallionError, OperationOpenError, first_line
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
from framework.pending import Marks
from framework.session import local_cores
from framework.storage import storage_for

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
    """Run ``tables`` in flow order, up to ``parallel`` at once (:func:`run_tables`; by default
    :func:`default_parallel`, or all of them when ``continuous``). ``watch`` is called with each
    micro-batch's progress; ``run_id`` is the lake lease's, if any; ``stop``, the command's stop
    request, which its caller turns SIGTERM and SIGINT into (a stop before any table started skips
    them all); without one, SIGTERM and SIGINT stop the tables at a batch boundary."""
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
    signals = contextlib.nullcontext() if stop is not None \
        else ctx.stop.on_signals(signal.SIGTERM, signal.SIGINT)
    if stop is not None:
        ctx.stop = stop
    watching = (ProgressListener.install(spark).watching(watch) if watch
                else contextlib.nullcontext())
    with signals, watching:
        from framework.refresh import finish_open

        still_open = finish_open(spark, project, ctx, run_tables)  # (a refresh left open)
        if still_open and not ctx.stop.is_set():
            # its tables hold part of their rows: no job may write them until it is done
            raise OperationOpenError(f"expected the refresh left open to complete before "
                                     f"the tables run, found it still open: {still_open}")
        return run_tables(spark, project, tables, ctx)


def up_to_date(project: ProjectConfig, tables: Sequence[Table],
               run_id: str | None = None) -> RunSummary | None:
    """The summary of a run that has nothing to do, found without Spark: every table of
    ``tables`` up to date (:mod:`framework.pending`) and no refresh left open. None when some
    table has work, or the lake can only be read with Spark: the run starts Spark and runs."""
    from framework.journal import Journal

    began = time.monotonic()
    marks = Marks(project.env)
    if not marks.enabled or not tables:
        return None
    store = storage_for(project.env.root, project.env)
    if store.exists(Journal(store, project.env.root).folder):
        return None  # (a refresh left open is completed first, with Spark)
    if any(marks.pending(t) is not None for t in tables):
        return None
    summary = RunSummary(run_id=run_id or RunContext().run_id, env=project.env.name,
                         tables=[_up_to_date(t) for t in tables],
                         duration_s=time.monotonic() - began)
    get_logger(env=project.env.name, run_id=summary.run_id).info(
        "run.finished", **summary.to_dict())
    return summary


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
    """Run each table's job. A table that reads (directly or through others) one that failed or
    was skipped is skipped, and after a stop request all the rest are. Outside a refresh, a table
    up to date when its turn comes (:mod:`framework.pending`: nothing new upstream or in its own
    source since its last run) is not run: it ends ``up_to_date``.

    With ``ctx.parallel`` above 1, up to that many tables run at once, each on a thread of its own
    in the one session, as Spark's declarative pipelines run independent flows: a table starts
    once every table it reads among ``tables`` has ended (the bronze feeds at once, then each
    silver table as soon as its sources are in). The summary lists them in flow order still."""
    summary = RunSummary(run_id=ctx.run_id, env=project.env.name)
    log = get_logger(env=project.env.name, run_id=ctx.run_id)
    started = time.monotonic()
    log.info("run.started", tables=[t.full_name for t in tables],
             **({"parallel": ctx.parallel} if ctx.parallel > 1 else {}))
    create_schemas(spark, tables)
    not_run: dict[tuple[Layer, str], str] = {}  # failed ("") or skipped (why)
    ended: dict[tuple[Layer, str], TableRunSummary] = {}
    marks = Marks(project.env) if ctx.operation is None and not ctx.trigger.continuous \
        else None

    def skip(table: Table) -> TableRunSummary | None:
        reason = _skip_reason(project, table, not_run, ctx)
        return _skipped(table, reason) if reason is not None else None

    def current(table: Table) -> TableRunSummary | None:
        if marks is None or marks.pending(table) is not None:
            return None
        log.info("job.up_to_date", table=table.full_name)
        return _up_to_date(table)

    def end(table: Table, result: TableRunSummary) -> None:
        ended[(table.layer, table.name)] = result
        if result.status is RunStatus.FAILED:
            not_run[(table.layer, table.name)] = ""
        elif result.status is RunStatus.SKIPPED:
            not_run[(table.layer, table.name)] = result.error or ""
            log.warning("job.skipped", table=table.full_name, reason=result.error)
            summary.stopped = summary.stopped or ctx.stop.is_set()

    if ctx.parallel > 1 and len(tables) > 1:
        _run_at_once(spark, tables, ctx, skip, current, end)
    else:
        for table in tables:
            end(table, skip(table) or current(table) or run_job(spark, table, ctx))
    summary.tables = [ended[(t.layer, t.name)] for t in tables]
    summary.duration_s = time.monotonic() - started
    log.info("run.finished", **summary.to_dict())
    return summary


def run_job(spark: SparkSession, table: Table, ctx: RunContext) -> TableRunSummary:
    """Run the table's job. Outside a refresh, a job that completes marks the table up to date
    against what it read (:mod:`framework.pending`); the mark is removed as the job begins."""
    marks = Marks(table.env)
    try:
        upstream = marks.begin(table)
    except MedallionError as exc:
        return TableRunSummary(table.full_name, table.layer.value, RunStatus.FAILED,
                               error=str(exc))
    result = job_class(table)(spark, table, ctx).run()
    if upstream is not None and result.status is RunStatus.SUCCEEDED and ctx.operation is None:
        try:
            marks.complete(table, upstream)
        except MedallionError as exc:  # (no mark: the next run runs the table again)
            get_logger(table=table.full_name, run_id=ctx.run_id).warning(
                "job.mark.unwritten", error=str(exc))
    return result


def _skipped(table: Table, reason: str) -> TableRunSummary:
    return TableRunSummary(table.full_name, table.layer.value, RunStatus.SKIPPED, error=reason)


def _up_to_date(table: Table) -> TableRunSummary:
    return TableRunSummary(table.full_name, table.layer.value, RunStatus.UP_TO_DATE)


def _run_at_once(spark: SparkSession, tables: Sequence[Table], ctx: RunContext,
                 skip: Callable[[Table], TableRunSummary | None],
                 current: Callable[[Table], TableRunSummary | None],
                 end: Callable[[Table, TableRunSummary], None]) -> None:
    """Run ``tables`` up to ``ctx.parallel`` at once (see :func:`run_tables`), scheduled by
    :class:`graphlib.TopologicalSorter` over the tables each reads among ``tables``.

    This thread starts each ready table on a daemon thread of its own and hands every result to
    ``end`` (also the summary ``skip`` or, once there is room, ``current`` gives), so the
    bookkeeping stays on one thread. A second stop signal, which only this thread receives, ends
    the run at once, as for one table at a time: the queries still running are stopped and their
    tables end failed ("interrupted by a second signal"), whatever step their job was in; the next
    run takes what they left, as after a kill."""
    by_key = {(t.layer, t.name): t for t in tables}
    order = {key: i for i, key in enumerate(by_key)}
    graph = TopologicalSorter({key: [u for u in t.spec.upstream() if u in by_key]
                               for key, t in by_key.items()})
    graph.prepare()
    ready: list[tuple[Layer, str]] = []
    running: dict[tuple[Layer, str], Table] = {}
    done: set[tuple[Layer, str]] = set()
    results: queue.Queue[tuple[Table, TableRunSummary]] = queue.Queue()

    def take(table: Table, result: TableRunSummary) -> None:
        key = (table.layer, table.name)
        running.pop(key, None)
        done.add(key)
        graph.done(key)
        end(table, result)

    with ctx.stop.forwarding():
        while graph.is_active() and not ctx.stop.is_forced():
            ready = sorted([*ready, *graph.get_ready()], key=order.__getitem__)
            for key in list(ready):  # (in flow order)
                table = by_key[key]
                result = skip(table)
                if result is None and len(running) >= ctx.parallel:
                    continue
                ready.remove(key)
                result = result or current(table)
                if result is not None:
                    take(table, result)
                    continue
                running[key] = table
                threading.Thread(target=_work, args=(spark, table, ctx, results), daemon=True,
                                 name=f"job {table.full_name}").start()
            if running:
                with contextlib.suppress(queue.Empty):
                    take(*results.get(timeout=1.0))
        if ctx.stop.is_forced():
            with contextlib.suppress(queue.Empty):
                while True:  # (what ended before)
                    take(*results.get_nowait())
            _interrupt(spark, list(running.values()), ctx, take)
            for key in [k for k in by_key if k not in done]:
                end(by_key[key], _skipped(by_key[key], f"a stop was requested ({ctx.stop.reason})"))


def _work(spark: SparkSession, table: Table, ctx: RunContext,
          results: queue.Queue[tuple[Table, TableRunSummary]]) -> None:
    """Run ``table``'s job on this thread, its summary put on ``results``."""
    try:
        result = run_job(spark, table, ctx)
    except BaseException as exc:  # (a job ends in a summary; anything else still ends it)
        result = TableRunSummary(table.full_name, table.layer.value, RunStatus.FAILED,
                                 error=f"{type(exc).__name__}: {first_line(exc)}")
    results.put((table, result))


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
