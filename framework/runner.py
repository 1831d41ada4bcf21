"""Run a selection of tables, layer by layer, in the order data flows."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pyspark.sql import SparkSession

from framework.config.model import Layer, ProjectConfig, Table
from framework.job import RunContext, RunStatus, RunSummary, TableRunSummary
from framework.layers import job_class
from framework.logging import get_logger


def select_tables(
    project: ProjectConfig, layer: Layer | None, names: Sequence[str] = ()
) -> list[Table]:
    """The tables of ``layer`` (all layers when None), or only those named, in flow order: by
    layer, and within a layer after the tables they read (a gold mart after its fact)."""
    if names:
        chosen = [project.table(n, layer) for n in names]
    else:
        chosen = [t for t in project.tables if layer is None or t.layer == layer]
    order = list(Layer)
    return sorted(chosen, key=lambda t: (order.index(t.layer), _depth(project, t), t.name))


def _depth(project: ProjectConfig, table: Table, seen: frozenset[str] = frozenset()) -> int:
    """How many tables of its own layer ``table`` reads through, one after another."""
    same = [name for layer, name in table.spec.upstream()
            if layer == table.layer and name not in seen]
    return max((1 + _depth(project, project.table(name, table.layer), seen | {table.name})
                for name in same), default=0)


def run_tables(
    spark: SparkSession, project: ProjectConfig, tables: Sequence[Table], ctx: RunContext
) -> RunSummary:
    """Run each table's job; after a failure or a stop request the rest are skipped."""
    summary = RunSummary(run_id=ctx.run_id, env=project.env.name)
    log = get_logger(env=project.env.name, run_id=ctx.run_id)
    started = time.monotonic()
    log.info("run.started", tables=[t.full_name for t in tables])
    for table in tables:
        if ctx.stop.is_set() or summary.status is RunStatus.FAILED:
            summary.tables.append(
                TableRunSummary(table.full_name, table.layer.value, RunStatus.SKIPPED)
            )
            continue
        job = job_class(table)(spark, table, ctx)
        summary.tables.append(job.run())
    summary.duration_s = time.monotonic() - started
    log.info("run.finished", **summary.to_dict())
    return summary
