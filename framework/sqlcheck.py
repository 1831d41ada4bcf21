"""The SQL in table specs (schemas, types, expressions) checked by Spark, before any job runs.

A spec's SQL otherwise fails only when its job runs: a DDL with a misspelt type when bronze
starts, an aggregate calling a function Spark lacks when gold plans its query. ``medallion
validate`` parses each piece here, as the job would, and reports every failure with its file
and key. Then, in flow order, each layer derives a table's schema from those of the tables it
reads (its ``plan`` in ``framework.layers``), on empty DataFrames: nothing is read or run.
Where a table's input is known (a bronze feed's DDL, a silver table without transforms) its
expressions are resolved against it, so a misspelt column is reported too; where not, an
expression naming a column is accepted as long as it parses and its functions exist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, NullType, StructType, TimestampType

from framework.config.model import Environment, Layer, ProjectConfig, SqlKind, SqlText, Table
from framework.errors import ConfigError, first_line
from framework.layers import planner

# PySpark logs every analysis error it raises with a query context, traceback included; the
# errors the check expects are reported as configuration problems instead.
ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")

# Analysis errors that only say the expression names a column the check has no schema for.
UNRESOLVED_INPUT = ("UNRESOLVED_COLUMN", "UNRESOLVED_FIELD", "UNRESOLVED_MAP_KEY")
HIDDEN_METADATA = "_metadata"

EXAMPLES = {
    SqlKind.SCHEMA: "a DDL schema such as 'id BIGINT, name STRING'",
    SqlKind.TYPE: "a Spark SQL type such as 'DECIMAL(10,2)'",
    SqlKind.EXPRESSION: "a Spark SQL expression such as 'sum(amount)' or 'quantity > 0'",
}


def parser_session(env: Environment | None = None) -> SparkSession:
    """The active session, or a bare local one: parsing needs neither the environment's cluster nor
    its catalog, so any environment's specs can be checked from any machine. An environment on Spark
    Connect (Databricks serverless included) parses on its server (its client may have no Java)."""
    if env is not None:
        from framework.session import get_spark, on_spark_connect

        if on_spark_connect(env):
            return get_spark(env, "medallion-validate")
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from framework.jvm import launch_driver
    from framework.session import JAVA_STACKS, TIME_ZONE, quiet_log_config

    # Quiet as the lake's own sessions are: Spark's log and progress bars only with
    # --log-level debug (a command's output holds its own lines); UTC unless configured.
    debug = os.environ.get(JAVA_STACKS) == "1"
    zone = env.spark_conf.get(TIME_ZONE) if env is not None else None
    settings = {"spark.master": "local[1]", "spark.app.name": "medallion-validate",
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                TIME_ZONE: zone if isinstance(zone, str) else "UTC",
                **({} if debug else {"spark.driver.extraJavaOptions":
                                     f"-Dlog4j2.configurationFile={quiet_log_config()}"})}
    launch_driver(settings, notices=debug)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def parse_schema(ddl: str) -> StructType:
    """``ddl`` parsed by Spark; ValueError (the reason) when it is not a DDL of columns."""
    try:
        schema = DataType.fromDDL(ddl)
    except AnalysisException as exc:
        raise ValueError(first_line(exc)) from exc
    if not isinstance(schema, StructType):
        raise ValueError(f"a single type ({schema.simpleString()}), not a DDL of columns")
    return schema


def planned_schemas(spark: SparkSession, tables: Sequence[Table]
                    ) -> dict[tuple[Layer, str], StructType]:
    """The schema each of ``tables`` (in flow order) will have, as Spark plans it from its spec
    and those of the tables it reads (no data read); a table whose layer cannot plan it, or
    whose SQL does not resolve, has none."""
    schemas: dict[tuple[Layer, str], StructType] = {}
    with _quiet(ERROR_LOGGERS):
        for table in tables:
            plan = planner(table.layer)
            if plan is not None:
                schema, _ = plan(spark, table, schemas)
                if schema is not None:
                    schemas[(table.layer, table.name)] = schema
    return schemas


def sql_problems(spark: SparkSession, project: ProjectConfig) -> list[ConfigError]:
    """Every piece of the tables' SQL that Spark cannot parse (or whose functions it does not
    have), then every expression naming a column its table's known input does not have; one
    error each, with the spec's file and key."""
    problems: list[ConfigError] = []
    schemas: dict[tuple[Layer, str], StructType] = {}
    with _quiet(ERROR_LOGGERS):
        for table in project.in_flow_order(project.tables):
            parsed = []
            for text in table.spec.sql_texts():
                reason = _problem(spark, text)
                if reason:
                    parsed.append(ConfigError(
                        f"expected {EXAMPLES[text.kind]}, found {text.text!r}: {reason}",
                        key=text.key))
            plan = planner(table.layer)
            if plan is not None:
                # Planned whatever the parse found: every problem of every table in one pass
                # (one already reported by the parse is not repeated).
                schema, planned = plan(spark, table, schemas)
                if schema is not None:
                    schemas[(table.layer, table.name)] = schema
                keys = {p.key for p in parsed}
                parsed += [p for p in planned if p.key not in keys]
            for problem in parsed:
                problem.file = table.source_file
            problems += parsed
    return problems


def analysis_problem(build: Callable[..., Any], *args: Any, any_column: bool = False
                     ) -> str | None:
    """Why Spark cannot analyse the DataFrame ``build(*args)`` makes, or None when it can. A
    column Spark cannot resolve is no problem with ``any_column`` (no input schema is known),
    nor one under the hidden ``_metadata`` column: a planned schema is an empty DataFrame, which
    lacks what a job's file or Delta source has there."""
    try:
        build(*args).schema  # noqa: B018 (analysis is the check)
    except AnalysisException as exc:
        unresolved = (exc.getCondition() or "").startswith(UNRESOLVED_INPUT)
        if unresolved and (any_column or f"`{HIDDEN_METADATA}`" in str(exc)):
            return None
        return first_line(exc)
    return None


def grouping_problems(df: DataFrame, described: str, columns: Sequence[tuple[str, str]],
                      aggregates: Sequence[tuple[str, str]]) -> list[ConfigError]:
    """The problems of a grouping over ``df`` (``described`` in the messages): each
    ``(key, column)`` of ``columns`` must be a column of ``df``, each ``(key, expression)`` of
    ``aggregates`` an aggregate over its columns."""
    problems = []
    for key, column in columns:
        reason = analysis_problem(lambda col: df.select(F.col(col)), column)
        if reason:
            problems.append(ConfigError(f"expected a column of {described}, found {column!r}: "
                                        f"{reason}", key=key))
    for key, text in aggregates:
        reason = analysis_problem(lambda t: df.groupBy().agg(F.expr(t)), text)
        if reason:
            problems.append(ConfigError(f"expected an aggregate over the columns of "
                                        f"{described}, found {text!r}: {reason}", key=key))
    return problems


# Words that join or compare, never a column's name at the end of an expression.
OPERATOR_WORDS = frozenset({"AND", "OR", "NOT", "IS", "IN", "LIKE", "ILIKE", "RLIKE", "REGEXP",
                            "BETWEEN", "DIV", "XOR"})


def not_event_time(df: DataFrame, column: str) -> str | None:
    """The type of ``column`` of ``df`` when a watermark cannot take it as event time (Spark
    takes a TIMESTAMP, or a window's struct whose end is one), else None; None too for a
    column ``df`` does not resolve (reported as such)."""
    try:
        kind = df.select(F.col(column)).schema.fields[0].dataType
    except AnalysisException:
        return None
    if isinstance(kind, StructType) and "end" in kind.names:
        kind = kind["end"].dataType
    return None if isinstance(kind, TimestampType | NullType) else kind.simpleString()


def quiet_query_loggers() -> Any:
    """A context in which PySpark does not log the analysis errors it raises (with their
    query context and stack): the caller reports them."""
    return _quiet(ERROR_LOGGERS)


@contextmanager
def _quiet(names: Iterable[str]) -> Iterator[None]:
    loggers = [PySparkLogger.getLogger(name) for name in names]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before, strict=True):
            logger.disabled = disabled


def _problem(spark: SparkSession, text: SqlText) -> str | None:
    if text.kind is SqlKind.EXPRESSION:
        reason = analysis_problem(spark.range(0).selectExpr, text.text, any_column=True)
        # Spark takes a trailing word for the column's alias ('amount > 0 AND' is 'amount > 0'
        # named AND), which the spec's own name replaces: in parentheses it does not parse.
        # (An alias of a name, 'x * 2 AS doubled', is the spec's to replace: left alone.)
        last = re.search(r"(\w+)\s*$", text.text)
        if reason is None and last and last.group(1).upper() in OPERATOR_WORDS and \
                analysis_problem(spark.range(0).selectExpr, f"({text.text}\n)",
                                 any_column=True):
            return ("it ends in a word Spark takes for the column's name (an alias), not part "
                    "of the expression: an operator without its right side?")
        return reason
    try:
        if text.kind is SqlKind.SCHEMA:
            parse_schema(text.text)
        else:
            DataType.fromDDL(text.text)
    except ValueError as exc:
        return str(exc)
    except AnalysisException as exc:
        return first_line(exc)
    return None
