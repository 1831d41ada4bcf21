"""Hostile names: every name that reaches SQL text is either rejected (exit 2) or read as one
literal name. None may run anything: a canary table outlives every attempt to drop it."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from framework.cli import main
from framework.config.model import Layer
from framework.config.types import IDENTIFIER
from framework.identifiers import quote, quote_name
from tests.support import Lakehouse, bronze_spec

COLUMN_MAPPING = "spark.databricks.delta.properties.defaults.columnMapping.mode"
ATTACKS = [
    "x`; DROP TABLE {canary}; --", "`", "``", "a``b", "a`b", "'); DROP TABLE {canary}; --",
    "' OR '1'='1", '"', 'a"b', "a.b", "a b", " ", "", "a\nb", "a\tb", "a\rb", "--x", "/*x*/",
    "a;b", "a,b", "(a)", "a=b", "{{x}}", "${{HOME}}", "{{{{secrets/s/k}}}}", "../x", "a/b",
    "a\\b", "a\\`b", "naïve", "表", "😀", "\u202eevil", "a\u200bb", "%s", "%(x)s", "1abc",
    "-a", "a-b", "a+b", "*", "?", "a:b", "a|b", "a&b", "a$b", "a#b", "a@b", "a!b", "a~b",
    "a^b", "a%b", "<a>", "[a]", "x" * 300, "a\x00b", "SELECT 1", "1=1", "a'b",
]


def hostile_names(canary: str = "canary") -> list[str]:
    """200 names that are not identifiers: the attacks, and each wrapped three ways."""
    found: dict[str, None] = {}
    for attack in ATTACKS:
        base = attack.format(canary=canary)
        for name in (base, f"c{base}", f"{base}_x", f"`{base}`"):
            if not IDENTIFIER.match(name):
                found.setdefault(name)
    names = list(found)[:200]
    assert len(names) == 200
    return names


def _args(lakehouse: Lakehouse, *args: str) -> list[str]:
    return [*args, "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
            "--log-format", "json"]


def _exit_code(args: list[str]) -> int:
    """The command's exit code; argparse exits 2 itself on a name it takes for an option."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def _canary(spark: SparkSession, lakehouse: Lakehouse) -> str:
    schema = lakehouse.schemas["silver"]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    name = f"spark_catalog.{schema}.canary"
    spark.sql(f"CREATE TABLE IF NOT EXISTS {quote_name(name)} (id INT) USING parquet "
              f"LOCATION '{lakehouse.path('canary')}'")
    return name


def test_every_config_field_that_names_a_table_or_column_rejects_hostile_names(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {  # layer, spec writer: the name in every field of that layer that takes one
        "bronze": lambda n: {**bronze_spec(), "name": n},
        "silver": lambda n: {"name": n, "source": {"table": n}, "event_time": n,
                             "partition_by": [n], "cluster_by": [n], "bucket_by": [n],
                             "sort_by": [n], "dedup": {"keys": [n], "delay": "1 hour"},
                             "columns": [{"name": n, "from": n}]},
        "gold": lambda n: {"name": n, "kind": "mart", "fact": {"table": n, "layer": "silver"},
                           "dimensions": [{"table": n, "on": {n: n}, "columns": [n]}],
                           "group_by": [n], "aggregates": [{"name": n, "expr": "count(*)"}]},
    }
    rejected = 0
    for name in hostile_names():
        for layer, spec in fields.items():
            path = lakehouse.add_table(layer, "t", spec(name))
            assert main(_args(lakehouse, "validate", "--no-spark")) == 2, (layer, name)
            err = capsys.readouterr().err
            assert "expected an identifier" in err, (layer, name, err)
            path.unlink()
            rejected += 1
    assert rejected == 600


def test_every_command_argument_that_names_a_table_or_column_rejects_hostile_names(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str],
    tmp_path: Path
) -> None:
    lakehouse.add_table("bronze", "feed", bronze_spec())
    lakehouse.add_table("silver", "orders", {"source": "feed"})
    canary = _canary(spark, lakehouse)
    table = lakehouse.project().table("orders", Layer.SILVER)
    spark.sql(f"CREATE TABLE {quote_name(table.full_name)} (id STRING, n BIGINT) USING DELTA "
              f"LOCATION '{table.location}'")
    a_file = tmp_path / "a.json"
    a_file.write_text("{}\n")
    for name in hostile_names():
        for args in (["run", "silver", "--table", name], ["optimize", name],
                     ["optimize", "orders", "--zorder", name], ["land", name, str(a_file)],
                     ["infer-schema", name], ["purge-archive", "--older-than", "1d",
                                              "--table", name]):
            assert _exit_code(_args(lakehouse, *args)) == 2, (args, name)
            err = capsys.readouterr().err
            assert ("expected" in err or "error:" in err) \
                and "Traceback" not in err, (args, name, err)
    assert spark.catalog.tableExists(canary)
    assert not list(lakehouse.path("landing").rglob("*"))  # nothing was landed


def test_catalog_column_names_are_read_as_literal_names(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """A fact and a dimension whose columns have hostile names (Delta's column mapping allows
    any name): the mart's SQL quotes each, so the view holds them all, by their names."""
    canary = _canary(spark, lakehouse)
    # Not empty, no NUL; not wrapped whole in backticks: Delta's check for duplicate columns
    # reads `a.b` as the name a.b, the same as an unwrapped a.b.
    names = [n for n in hostile_names(canary.split(".", 1)[1])
             if n.strip() and "\x00" not in n and not (n[:1] == n[-1:] == "`")]
    names = list({n.lower(): n for n in names}.values())  # Spark's names ignore case
    fact_cols, dim_cols = names[::2], names[1::2]
    lakehouse.add_table("gold", "wide", {
        "kind": "mart", "fact": {"table": "facts", "layer": "silver"},
        "dimensions": [{"table": "dims", "on": ["store_id"]}]})
    for short in ("facts", "dims"):
        lakehouse.add_table("silver", short, {"source": f"{short}_feed"})
        lakehouse.add_table("bronze", f"{short}_feed", bronze_spec())
    project = lakehouse.project()
    frames = {}
    for short, columns in (("facts", fact_cols), ("dims", dim_cols)):
        table = project.table(short, Layer.SILVER)
        schema = StructType([StructField("store_id", LongType()),
                             *(StructField(c, StringType()) for c in columns)])
        rows = [(s, *(f"{short}{s}:{i}" for i in range(len(columns)))) for s in (1, 2, 3)]
        df = spark.createDataFrame(rows if short == "facts" else rows[:2], schema)
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(table.schema)}")
        spark.conf.set(COLUMN_MAPPING, "name")  # for the tables created here
        try:
            df.write.format("delta").save(table.location)
        finally:
            spark.conf.unset(COLUMN_MAPPING)
        spark.sql(f"CREATE TABLE {quote_name(table.full_name)} USING DELTA "
                  f"LOCATION '{table.location}'")
        frames[short] = df

    from framework.job import RunContext
    from framework.layers import job_class

    mart = project.table("wide", Layer.GOLD)
    summary = job_class(mart)(spark, mart, RunContext()).run()

    assert summary.error is None
    want = frames["facts"].join(frames["dims"], "store_id")
    assert spark.table(mart.full_name).columns == ["store_id", *fact_cols, *dim_cols]
    # chispa resolves columns by name (which parses them); compared by position instead
    got = spark.table(mart.full_name)
    plain = [f"c{i}" for i in range(len(got.columns))]
    assert_df_equality(got.toDF(*plain), want.toDF(*plain), ignore_row_order=True,
                       ignore_nullable=True, ignore_metadata=True)
    assert spark.catalog.tableExists(canary)
    # and Z-ordering by such a column reads it as one name (Delta keeps stats on the first 32)
    no_backtick = [c for c in fact_cols[:31] if "`" not in c]
    assert main(_args(lakehouse, "optimize", "facts", "--zorder", *no_backtick[:2])) == 0
    # a name with a backtick Delta's OPTIMIZE cannot Z-order: refused before it runs
    assert _exit_code(_args(lakehouse, "optimize", "facts", "--zorder", fact_cols[0])) == 2
    assert spark.catalog.tableExists(canary)
