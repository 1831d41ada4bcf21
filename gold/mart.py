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

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from framework.changes import END_AT, IS_CURRENT, START_AT
from framework.config.model import Layer, Table
from framework.delta import (
    CHANGE_FEED,
    change_feed,
    create_table,
    detail,
    latest_commit,
    overwrite,
    replace_rows,
    set_properties,
    sql_string,
    table_properties,
)
from framework.errors import ConfigError, JobError
from framework.identifiers import quote, quote_all, quote_name
from framework.job import Job, RunContext, RunStatus
from framework.jvm import size_estimate
from framework.sqlcheck import analysis_problem, grouping_problems
from gold.spec import BUILT_FROM, JoinType, MartSpec

ColumnList = list[tuple[str, str]]  # (name, comment)

VERSIONS = BUILT_FROM  # table property: {table: Delta version} last built
DEFINITION = "medallion.mart.definition"  # table property: the definition last built with


@dataclass(frozen=True)
class MartPlan:
    """A mart's query, from its spec and the columns (name and comment) of its fact and
    dimensions: the join, then ``where`` and grouping. Builds the mart and, on empty tables,
    serves ``medallion validate``; a problem is a :class:`ConfigError` keyed by the spec."""

    spec: MartSpec
    fact: str
    dims: tuple[str, ...]
    columns: tuple[tuple[str, str, str], ...]  # (expression in the join, name, comment)
    versioned: tuple[bool, ...] = ()  # per dimension: SCD2 (a row per version of a key)

    @classmethod
    def of(cls, spec: MartSpec, fact: str, dims: list[str], fact_columns: ColumnList,
           dim_columns: list[ColumnList]) -> MartPlan:
        """The plan; raises the first problem (:meth:`checked` gives all of them)."""
        problems, plan = cls.checked(spec, fact, dims, fact_columns, dim_columns)
        if problems:
            raise problems[0]
        return plan

    @classmethod
    def checked(cls, spec: MartSpec, fact: str, dims: list[str], fact_columns: ColumnList,
                dim_columns: list[ColumnList]) -> tuple[list[ConfigError], MartPlan]:
        """The plan with what it cannot join: keys and columns the tables do not have."""
        problems: list[ConfigError] = []
        columns = [(f"f.{quote(name)}", name, text) for name, text in fact_columns]
        fact_names = [name for name, _ in fact_columns]
        taken = set(fact_names)
        versioned = []
        for i, (dim, name, described) in enumerate(zip(spec.dimensions, dims, dim_columns,
                                                       strict=True)):
            have = dict(described)
            versioned.append({START_AT, END_AT, IS_CURRENT} <= set(have))
            if dim.as_of and not versioned[-1]:
                problems.append(ConfigError(
                    f"expected a dimension kept as SCD type 2 (with {START_AT}, {END_AT} and "
                    f"{IS_CURRENT}) with as_of, found {name} without them",
                    key=f"dimensions[{i}].as_of"))
            if dim.as_of and dim.as_of not in fact_names:
                problems.append(ConfigError(
                    f"expected as_of among the columns of {fact} ({', '.join(fact_names)}), "
                    f"found {dim.as_of}", key=f"dimensions[{i}].as_of"))
            for fk, dk in dim.on.items():
                if fk not in fact_names:
                    problems.append(ConfigError(
                        f"expected join key {fk} among the columns of {fact} "
                        f"({', '.join(fact_names)}), found none", key=f"dimensions[{i}].on"))
                if dk not in have:
                    problems.append(ConfigError(
                        f"expected join key {dk} among the columns of {name} "
                        f"({', '.join(have)}), found none", key=f"dimensions[{i}].on"))
            wanted = dim.columns or [c for c in have if c not in dim.dim_keys
                                     and not c.startswith("_")]
            for c in wanted:
                if c not in have:
                    problems.append(ConfigError(
                        f"expected column {c} in {name} (columns: {', '.join(have)}), "
                        "found none", key=f"dimensions[{i}].columns"))
                elif c in taken:
                    problems.append(ConfigError(
                        f"expected dimension columns not already in the mart, found {c} in "
                        f"{name} and in an earlier table", key=f"dimensions[{i}].columns"))
                else:
                    taken.add(c)
                    columns.append((f"d{i}.{quote(c)}", c, have[c] or f"From {name}"))
        return problems, cls(spec, fact, tuple(dims), tuple(columns), tuple(versioned))

    def joined(self) -> str:
        """The fact joined to its dimensions, with the mart's column names."""
        select = ", ".join(f"{expr} AS {quote(name)}" for expr, name, _ in self.columns)
        joins = []
        for i, (dim, name) in enumerate(zip(self.spec.dimensions, self.dims, strict=True)):
            on = " AND ".join(f"f.{quote(fk)} = d{i}.{quote(dk)}" for fk, dk in dim.on.items())
            if self.versioned and self.versioned[i]:  # the version valid then, or the current
                at = f"f.{quote(dim.as_of)}" if dim.as_of else None
                on += (f" AND d{i}.{START_AT} <= {at} AND ({at} < d{i}.{END_AT} OR "
                       f"d{i}.{END_AT} IS NULL)") if at else f" AND d{i}.{IS_CURRENT}"
            kind = "LEFT JOIN" if dim.how is JoinType.LEFT else "JOIN"
            joins.append(f"{kind} {quote_name(name)} d{i} ON {on}")
        return f"SELECT {select} FROM {quote_name(self.fact)} f {' '.join(joins)}"

    def query(self) -> str:
        """The mart: the join, filtered by ``where``, grouped by ``group_by`` into the
        aggregates when it has any."""
        spec = self.spec
        if not spec.where and not spec.aggregates:
            return self.joined()
        where = f" WHERE {spec.where}" if spec.where else ""
        if not spec.aggregates:
            return f"SELECT * FROM ({self.joined()}) j{where}"
        select = ", ".join([*map(quote, spec.group_by),
                            *(f"{a.expr} AS {quote(a.name)}" for a in spec.aggregates)])
        group = f" GROUP BY {quote_all(spec.group_by)}" if spec.group_by else ""
        return f"SELECT {select} FROM ({self.joined()}) j{where}{group}"

    def output(self) -> list[tuple[str, str]]:
        """The mart's columns: (name, comment)."""
        if not self.spec.aggregates:
            return [(name, text) for _, name, text in self.columns]
        comments = {name: text for _, name, text in self.columns}
        return [*((g, comments.get(g, "")) for g in self.spec.group_by),
                *((a.name, a.comment or f"{a.expr} per group") for a in self.spec.aggregates)]


class MartJob(Job):
    """Creates (or replaces) the mart's view, or rebuilds its table incrementally
    (``materialize: true``)."""

    layer: ClassVar[Layer] = Layer.GOLD

    def __init__(self, spark: SparkSession, table: Table, ctx: RunContext) -> None:
        super().__init__(spark, table, ctx)
        self.spec = cast(MartSpec, table.spec)
        self.counts: dict[str, int] = {}

    def prepare(self) -> None:
        """The schema, once the tables the mart joins exist."""
        for layer, name in self.spec.upstream():
            self._require(self._name(layer, name))
        super().prepare()

    def execute(self) -> RunStatus:
        self.counts = self._step("build", self._build)
        return RunStatus.SUCCEEDED

    def finish(self) -> dict[str, int]:
        return self.counts

    # ------------------------------------------------------------------ the join
    def _name(self, layer: Layer, name: str) -> str:
        return self.table.env.table_name(layer, name)

    def _build(self) -> dict[str, int]:
        fact = self._name(self.spec.fact.layer, self.spec.fact.table)
        dims = [self._name(d.layer, d.table) for d in self.spec.dimensions]
        listed = [[(c.name, c.description or "") for c in self.spark.catalog.listColumns(n)]
                  for n in (fact, *dims)]
        try:
            plan = MartPlan.of(self.spec, fact, dims, listed[0], listed[1:])
        except ConfigError as exc:
            raise JobError(self.table.full_name, "build", exc.detail) from exc
        threshold = _bytes(self.spark.conf.get("spark.sql.autoBroadcastJoinThreshold") or "10MB")
        counts = {"dimensions": len(self.spec.dimensions), "dimensions_too_big_to_broadcast": 0}
        for name in dims:
            size = self._size(name)
            if size > threshold >= 0:
                counts["dimensions_too_big_to_broadcast"] += 1
                self.log.warning("gold.mart.dimension_too_big", dimension=name, bytes=size,
                                 broadcast_threshold=threshold,
                                 reason="Spark adds a dynamic pruning filter only when it "
                                        "broadcasts the dimension; filters on it will not "
                                        "prune the fact")
        query = plan.query()
        comment = self.spec.description or (f"{fact} joined to its dimensions" if dims else fact)
        columns = plan.output()
        counts["columns"] = len(columns)
        if self.spec.materialize:
            counts.update(self._materialize(query, fact, dims, comment, dict(columns)))
        else:
            column_list = ", ".join(f"{quote(name)} COMMENT {sql_string(text)}"
                                    for name, text in columns)
            self.spark.sql(f"CREATE OR REPLACE VIEW {quote_name(self.table.full_name)} "
                           f"({column_list}) "
                           f"COMMENT {sql_string(comment)} AS {query}")
        self.log.info("gold.mart.built", mart=self.table.full_name, fact=fact,
                      materialized=self.spec.materialize, **counts)
        return counts

    # ------------------------------------------------------------------ a materialized mart
    def _materialize(self, query: str, fact: str, dims: list[str], comment: str,
                     comments: dict[str, str]) -> dict[str, int]:
        """Write the join into a Delta table partitioned as the fact, rebuilding only the fact
        partitions changed since the last run (from the fact's change data feed, which gold
        aggregates record), or all of it when a dimension or the mart's columns changed, or the
        feed cannot say (not recorded for the versions in between). The versions built from
        are kept in the table's properties, written after the data: a run interrupted in
        between rebuilds the same partitions again, with the same result."""
        spark = self.spark
        fact_detail = detail(spark, fact)
        versions = {fact: _version(spark, fact, fact_detail),
                    **{name: _version(spark, name) for name in dims}}
        mart = self.table.full_name
        df, partitions = _commented(spark.sql(query), comments, fact_detail)
        created = create_table(spark, mart, df.schema, self.table.location,
                               partition_by=partitions, comment=comment)
        properties = {} if created else table_properties(spark, mart)
        definition = json.dumps(self.spec.definition(), sort_keys=True)
        new_columns = not created and _columns(spark.table(mart).schema) != _columns(df.schema)
        reason, changed = self._rebuild_scope(properties, definition, new_columns, versions,
                                              (fact, fact_detail["location"]), dims, partitions)
        self._write(df, partitions, reason, changed, new_columns)
        set_properties(spark, mart, {VERSIONS: json.dumps(versions, sort_keys=True),
                                     DEFINITION: definition})
        self.log.info("gold.mart.materialized", mart=mart, built_from=versions,
                      full_rebuild=reason, partitions_rebuilt=changed)
        return {"full_rebuild": int(reason is not None),
                "partitions_rebuilt": len(changed or [])}

    def _rebuild_scope(self, properties: dict[str, str], definition: str, new_columns: bool,
                       versions: dict[str, int | None], fact_at: tuple[str, str],
                       dims: list[str], partitions: list[str]
                       ) -> tuple[str | None, list[tuple[str | None, ...]] | None]:
        """Why the mart is rebuilt whole, or None and the fact partitions whose rows changed
        since the versions it was built from (kept in its ``properties``). ``versions``: those
        of the fact and of ``dims`` now; ``fact_at``: the fact's name and location."""
        fact, fact_location = fact_at
        built = json.loads(properties.get(VERSIONS, "{}"))
        reason = "the mart's columns changed" if new_columns else \
            _full_rebuild_reason(built, versions, fact, dims, partitions)
        if reason is None and properties.get(DEFINITION, definition) != definition:
            # (a mart built before definitions were recorded has none: taken as the same)
            reason = "the mart's definition changed (its filter, grouping, aggregates or joins)"
        if reason is not None:
            return reason, None
        changed = _changed_partitions(self.spark, fact_location, built[fact], versions[fact],
                                      partitions)
        if changed is None:
            return (f"the change data feed of {fact} cannot say what changed between "
                    f"versions {built[fact]} and {versions[fact]} (not recorded, "
                    f"{CHANGE_FEED} is off, or its schema changed)"), None
        return None, changed

    def _write(self, df: DataFrame, partitions: list[str], reason: str | None,
               changed: list[tuple[str | None, ...]] | None, new_columns: bool) -> None:
        """Overwrite the mart whole (``reason``: why), or replace the ``changed`` partitions."""
        mart = self.table.full_name
        self.log.debug("gold.mart.writing", mart=mart, full_rebuild=reason,
                       partitions=len(changed or []))
        if reason is not None:
            overwrite(df, self.table.location, new_schema=new_columns)
            self.log.info("gold.mart.rebuilt", mart=mart, reason=reason)
        elif changed:
            condition = " OR ".join(
                "(" + " AND ".join(f"{quote(c)} <=> {sql_string(v) if v is not None else 'NULL'}"
                                   for c, v in zip(partitions, values, strict=True)) + ")"
                for values in changed)
            replace_rows(df.where(condition), self.table.location, condition)

    def _require(self, name: str) -> None:
        if not self.spark.catalog.tableExists(name):
            raise JobError(self.table.full_name, "prepare",
                           f"expected table {name} to exist, found none (run its layer first)")

    def _size(self, name: str) -> int:
        """The optimizer's size estimate for the table, compared with the broadcast threshold."""
        return size_estimate(self.spark, name)


def planned_schema(spark: SparkSession, table: Table, inputs: Mapping[tuple[Layer, str],
                  StructType]) -> tuple[StructType | None, list[ConfigError]]:
    """The mart's query (:class:`gold.mart.MartPlan`) on empty tables of its inputs' schemas:
    join keys and columns the tables lack, then ``where``, ``group_by`` and each aggregate
    resolved against the joined columns (``framework.layers.Planner``)."""
    spec = cast(MartSpec, table.spec)
    refs = spec.upstream()
    if any(ref not in inputs for ref in refs):
        return None, []
    views = [f"_medallion_plan_{table.name}_{i}" for i in range(len(refs))]
    for view, ref in zip(views, refs, strict=True):
        spark.createDataFrame([], inputs[ref]).createOrReplaceTempView(view)
    try:
        listed = [[(f.name, "") for f in inputs[ref].fields] for ref in refs]
        problems, plan = MartPlan.checked(spec, views[0], views[1:], listed[0], listed[1:])
        if problems:
            return None, problems
        joined = spark.sql(plan.joined())
        names = ", ".join(joined.columns)
        if spec.where:
            reason = analysis_problem(joined.where, spec.where)
            if reason:
                problems.append(ConfigError(f"expected a filter over the mart's columns "
                                            f"({names}), found {spec.where!r}: {reason}",
                                            key="where"))
        problems += grouping_problems(
            joined, f"the mart ({names})",
            [(f"group_by[{i}]", key) for i, key in enumerate(spec.group_by)],
            [(f"aggregates[{i}].expr", a.expr) for i, a in enumerate(spec.aggregates)])
        if problems:
            return None, problems
        return spark.sql(plan.query()).schema, problems
    finally:
        for view in views:
            spark.catalog.dropTempView(view)


def _commented(df: DataFrame, comments: dict[str, str], fact_detail: dict[str, Any]
               ) -> tuple[DataFrame, list[str]]:
    """The join's rows with their columns' comments, which a rebuild with new columns keeps,
    and its partition columns: the fact's when it keeps them all (a mart grouping them away is
    rebuilt whole)."""
    partitions = list(fact_detail["partitionColumns"] or [])
    if not all(c in df.columns for c in partitions):
        partitions = []
    return df.select(*[F.col(quote(f.name)).alias(f.name, metadata={"comment": comments[f.name]})
                       for f in df.schema]), partitions


def _version(spark: SparkSession, name: str,
             found: dict[str, Any] | None = None) -> int | None:
    """The table's current Delta version; None for a table that is not Delta (``found``: its
    detail, when read already)."""
    if (found if found is not None else detail(spark, name)).get("format") != "delta":
        return None
    last = latest_commit(spark, name)
    return last.version if last is not None else None


def _columns(schema: StructType) -> list[tuple[str, str]]:
    """Names and types, without comments."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _full_rebuild_reason(built: dict[str, int | None], versions: dict[str, int | None],
                         fact: str, dims: list[str], partitions: list[str]) -> str | None:
    if not built:
        return "first build"
    if not partitions:
        return f"the mart is not partitioned like {fact} (it is not, or the mart groups its " \
               "partition columns away)"
    last, now = built.get(fact), versions[fact]
    if last is None or now is None:
        return f"no version of {fact} to start from"
    if last > now:
        return f"{fact} is older than the mart (restored?)"
    for dim in dims:
        if versions[dim] is None or built.get(dim) != versions[dim]:
            return f"dimension {dim} changed"
    return None


def _changed_partitions(spark: SparkSession, location: str, since: int | None, until: int | None,
                        columns: list[str]) -> list[tuple[str | None, ...]] | None:
    """The partitions (values of ``columns``) in which the fact's commits after ``since`` up to
    ``until`` inserted, updated or deleted rows, from the fact's change data feed; None when
    the feed cannot say (not recorded for those versions, or a commit changed the schema)."""
    if since is None or until is None:
        return None
    if until == since:
        return []
    try:
        changes = (change_feed(spark, location, since + 1, until)
                   .select(*[F.col(c).cast("string") for c in columns]).distinct().collect())
    except AnalysisException:  # no change data for a version in the range, or a schema change
        return None
    return sorted((tuple(r[c] for c in columns) for r in changes), key=str)


def _bytes(value: str) -> int:
    """A Spark byte size (``10MB``, ``10485760b``, ``-1``) in bytes."""
    text = value.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)
