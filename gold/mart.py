"""Gold marts: a fact joined to its dimensions, as a catalog view laid out for pruning.

The view holds the join, not its result: Spark inlines it into each query, so a filter on a
dimension column becomes a dynamic pruning filter on the fact's partitions when the layout
allows it, and the answer always reflects the current fact and dimensions (nothing to rebuild,
never stale). What the layout must give, and what ``medallion validate`` checks:

- the fact is partitioned by the join key (DPP filters partitions, nothing finer);
- the dimension is small enough to broadcast (``spark.sql.autoBroadcastJoinThreshold``): Spark
  only adds the pruning filter when it can reuse the dimension's broadcast
  (``spark.sql.optimizer.dynamicPartitionPruning.reuseBroadcastOnly``, on by default).

The first is known from the configuration; the second from the dimension's size, checked when
the mart is created. :func:`framework.pruning.explain_pruning` shows the evidence for a query.
"""

from __future__ import annotations

import time
from typing import cast

from pyspark.sql import SparkSession

from framework.config.model import Layer, ProjectConfig, Table
from framework.delta import sql_string
from framework.errors import JobError, MedallionError
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.logging import get_logger
from gold.spec import Dimension, GoldTableSpec


def layout_advice(spec: GoldTableSpec, table: Table, project: ProjectConfig) -> list[str]:
    """Why a configured join of this mart cannot prune the fact, one sentence per join."""
    if spec.fact is None:
        return []
    fact = project.table(spec.fact.table, spec.fact.layer)
    partitions = list(getattr(fact.spec, "partition_by", []) or [])
    advice = []
    for dim in spec.dimensions:
        if any(k in partitions for k in dim.on):
            continue
        layout = f"partitioned by {', '.join(partitions)}" if partitions else "not partitioned"
        dim_name = project.env.table_name(dim.layer, dim.table)
        advice.append(
            f"{table.full_name} joins {fact.full_name} to {dim_name} on {', '.join(dim.on)}, "
            f"but {fact.full_name} is {layout}: a filter on {dim.table} cannot prune the "
            f"fact's partitions (dynamic partition pruning skips partitions of the join key, "
            f"nothing finer); partition {fact.name} by {dim.on[0]} "
            f"(partition_by in {fact.source_file})")
    return advice


class MartJob:
    """Creates (or replaces) the mart's view; the same summary as a streaming job."""

    def __init__(self, spark: SparkSession, table: Table, ctx: RunContext) -> None:
        self.spark = spark
        self.table = table
        self.spec = cast(GoldTableSpec, table.spec)
        self.log = get_logger(env=table.env.name, layer=Layer.GOLD.value,
                              table=table.full_name, run_id=ctx.run_id)

    def run(self) -> TableRunSummary:
        started = time.monotonic()
        summary = TableRunSummary(self.table.full_name, Layer.GOLD.value, RunStatus.SUCCEEDED)
        try:
            summary.counts = self._create_view()
        except MedallionError as exc:
            summary.status, summary.error = RunStatus.FAILED, str(exc)
            self.log.error("job.failed", step="view", error=str(exc))
        except Exception as exc:
            error = JobError(self.table.full_name, "view", exc)
            summary.status, summary.error = RunStatus.FAILED, str(error)
            self.log.error("job.failed", step="view", error=str(error))
        summary.duration_s = time.monotonic() - started
        self.log.info("job.finished", status=summary.status.value, counts=summary.counts)
        return summary

    # ------------------------------------------------------------------ the view
    def _name(self, layer: Layer, name: str) -> str:
        return self.table.env.table_name(layer, name)

    def _create_view(self) -> dict[str, int]:
        fact_ref = self.spec.fact
        assert fact_ref is not None  # checked with the config
        fact = self._name(fact_ref.layer, fact_ref.table)
        self._require(fact)
        columns = [(f"f.{c.name}", c.name, c.description or "")
                   for c in self.spark.catalog.listColumns(fact)]
        joins = []
        threshold = _bytes(self.spark.conf.get("spark.sql.autoBroadcastJoinThreshold") or "10MB")
        counts = {"dimensions": len(self.spec.dimensions), "dimensions_too_big_to_broadcast": 0}
        taken = {name for _, name, _ in columns}
        for i, dim in enumerate(self.spec.dimensions):
            name = self._name(dim.layer, dim.table)
            self._require(name)
            alias = f"d{i}"
            described = {c.name: c.description or "" for c in self.spark.catalog.listColumns(name)}
            wanted = dim.columns or [c for c in described if c not in dim.on
                                     and not c.startswith("_")]
            for c in wanted:
                if c not in described:
                    raise JobError(self.table.full_name, "view",
                                   f"expected column {c} in {name} (columns: "
                                   f"{', '.join(described)}), found none")
                if c in taken:
                    raise JobError(self.table.full_name, "view",
                                   f"expected dimension columns not already in the mart, "
                                   f"found {c} in {name} and in an earlier table")
                taken.add(c)
                columns.append((f"{alias}.{c}", c, described[c] or f"From {name}"))
            joins.append(self._join(dim, name, alias))
            size = self._size(name)
            if size > threshold >= 0:
                counts["dimensions_too_big_to_broadcast"] += 1
                self.log.warning("gold.mart.dimension_too_big", dimension=name, bytes=size,
                                 broadcast_threshold=threshold,
                                 reason="Spark adds a dynamic pruning filter only when it "
                                        "broadcasts the dimension; filters on it will not "
                                        "prune the fact")
        column_list = ", ".join(f"{alias_name} COMMENT {sql_string(comment)}"
                                for _, alias_name, comment in columns)
        select = ", ".join(f"{expr} AS {alias_name}" for expr, alias_name, _ in columns)
        comment = self.spec.description or f"{fact} joined to its dimensions"
        self.spark.sql(
            f"CREATE OR REPLACE VIEW {self.table.full_name} ({column_list}) "
            f"COMMENT {sql_string(comment)} AS SELECT {select} FROM {fact} f {' '.join(joins)}")
        counts["columns"] = len(columns)
        self.log.info("gold.mart.created", view=self.table.full_name, fact=fact, **counts)
        return counts

    def _join(self, dim: Dimension, name: str, alias: str) -> str:
        on = " AND ".join(f"f.{k} = {alias}.{k}" for k in dim.on)
        kind = "LEFT JOIN" if dim.how.value == "left" else "JOIN"
        return f"{kind} {name} {alias} ON {on}"

    def _require(self, name: str) -> None:
        if not self.spark.catalog.tableExists(name):
            raise JobError(self.table.full_name, "view",
                           f"expected table {name} to exist, found none (run its layer first)")

    def _size(self, name: str) -> int:
        """The size the optimizer estimates for the table: what it compares with the
        broadcast threshold."""
        plan = self.spark.table(name)._jdf.queryExecution().optimizedPlan()
        return int(str(plan.stats().sizeInBytes()))


def _bytes(value: str) -> int:
    """A Spark byte size (``10MB``, ``10485760b``, ``-1``) in bytes."""
    text = value.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)
