"""Configuration: typed loading, every kind of error reported at once, secrets as references."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from bronze.spec import BronzeTableSpec, CleanSource, SourceFormat
from framework.cli import main
from framework.config.loader import load_project
from framework.config.model import AzureAuthMethod, Layer, Runtime
from framework.config.secrets import SecretRef
from framework.errors import (
    ConfigValidationError,
    DuplicateTableError,
    InvalidIdentifierError,
    LiteralSecretError,
    MissingSecretError,
    UnknownKeyError,
    WrongTypeError,
)
from tests.support import REPO, Lakehouse, silver_spec

ORDERS = {
    "source": {
        "path": "landing/orders",
        "format": "json",
        "schema": "order_id STRING, quantity INT",
    }
}


def test_sample_configs_load_into_typed_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    local = load_project(REPO / "conf", "local")
    assert local.env.runtime is Runtime.LOCAL
    orders = local.table("orders", Layer.BRONZE)
    assert isinstance(orders.spec, BronzeTableSpec)
    assert orders.spec.source.format is SourceFormat.JSON
    assert orders.spec.source.clean_source is CleanSource.ARCHIVE
    assert orders.full_name == "spark_catalog.bronze.orders"
    assert orders.checkpoint.endswith("/_checkpoints/bronze/orders")

    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.setenv(name, f"value-of-{name.lower()}")
    dev = load_project(REPO / "conf", "dev")
    assert dev.env.root.startswith("abfss://")
    assert dev.env.storage is not None
    assert dev.env.storage.auth is AzureAuthMethod.SERVICE_PRINCIPAL
    assert dev.env.storage.client_secret == SecretRef("${AZURE_CLIENT_SECRET}")
    assert dev.table("orders", Layer.BRONZE).full_name == "main.dev_bronze.orders"
    prod = load_project(REPO / "conf", "prod")
    assert prod.env.storage is not None
    assert prod.env.storage.auth is AzureAuthMethod.MANAGED_IDENTITY


def test_config_objects_are_frozen(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", ORDERS)
    project = lakehouse.project()
    with pytest.raises(ValueError, match="frozen"):
        project.env.root = "/elsewhere"  # type: ignore[misc]


def test_every_kind_of_error_is_reported_in_one_run(
    lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    lakehouse.write_env(
        shuffle_partitions="many",  # wrong type
        colour="blue",  # unknown key
        catalog="main; DROP TABLE x",  # bad identifier (SQL injection attempt)
        storage={
            "account": "acct1",
            "auth": "service_principal",
            "client_secret": "${NOT_SET_ANYWHERE}",  # missing secret reference
            "account_key": "hunter2-literal",  # literal secret
        },
    )
    lakehouse.add_table("bronze", "orders", ORDERS)
    lakehouse.add_table("bronze", "orders_again", {**ORDERS, "name": "orders"})  # duplicate

    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    err = info.value
    kinds = {type(e) for e in err.errors}
    assert {
        WrongTypeError,
        UnknownKeyError,
        InvalidIdentifierError,
        MissingSecretError,
        LiteralSecretError,
    } <= kinds

    unknown = err.of_kind(UnknownKeyError)[0]
    assert unknown.key == "colour"
    assert unknown.file.endswith("test.yaml")
    assert "valid keys:" in str(unknown) and "shuffle_partitions" in str(unknown)
    assert err.of_kind(WrongTypeError)[0].key == "shuffle_partitions"
    assert err.of_kind(MissingSecretError)[0].key == "storage.client_secret"
    assert "NOT_SET_ANYWHERE" in str(err.of_kind(MissingSecretError)[0])
    assert "hunter2-literal" not in str(err)  # a literal secret is never echoed


def test_duplicate_table_names_are_rejected(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", ORDERS)
    lakehouse.add_table("bronze", "orders_copy", {**ORDERS, "name": "orders"})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    (dup,) = info.value.of_kind(DuplicateTableError)
    assert "orders" in str(dup) and "orders_copy.yaml" in dup.file


def test_table_names_cannot_inject_sql(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", {**ORDERS, "name": "orders`; DROP TABLE t; --"})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    assert info.value.of_kind(InvalidIdentifierError)[0].key == "name"


def test_unknown_key_in_a_nested_spec_lists_the_valid_keys(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", {"source": {**ORDERS["source"], "fromat": "csv"}})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    (err,) = info.value.of_kind(UnknownKeyError)
    assert err.key == "source.fromat"
    assert "archive_dir" in str(err) and "format" in str(err)


def test_an_unknown_key_in_an_optional_block_lists_the_valid_keys(
        lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "customers", {**ORDERS, "name": "customers"})
    lakehouse.add_table("silver", "customers", silver_spec(
        name="customers", source={"table": "customers"}, mode="scd2",
        scd2={"keys": ["id"], "sequence_by": "seq", "from_snapshots": True}))
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    (err,) = info.value.of_kind(UnknownKeyError)
    assert err.key == "scd2.from_snapshots"
    assert "valid keys: deletes, except_columns, keys, sequence_by, snapshot_by, " \
           "track_history, track_history_except, truncates" in str(err)


def test_enum_values_are_checked(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", {"source": {**ORDERS["source"], "format": "xml"}})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    (err,) = info.value.of_kind(WrongTypeError)
    assert "expected one of json, csv, parquet, kafka, eventhubs, found 'xml'" in str(err)


def test_secrets_are_references_and_never_shown(
    lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_SECRET", "canary-7f3a9c")
    lakehouse.write_env(
        spark_conf={"fs.azure.account.key.acct1.dfs.core.windows.net": "${CANARY_SECRET}"},
        storage={"account": "acct1", "auth": "account_key", "account_key": "${CANARY_SECRET}"},
    )
    lakehouse.add_table("bronze", "orders", ORDERS)
    env = lakehouse.project().env
    assert "canary-7f3a9c" not in repr(env)
    assert "canary-7f3a9c" not in str(env.model_dump())
    assert env.storage is not None and env.storage.account_key is not None
    assert env.storage.account_key.resolve() == "canary-7f3a9c"


def test_literal_secret_in_spark_conf_is_rejected(lakehouse: Lakehouse) -> None:
    lakehouse.write_env(spark_conf={"fs.azure.account.key.acct1.dfs.core.windows.net": "abc123"})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    assert info.value.of_kind(LiteralSecretError)
    assert "abc123" not in str(info.value)


def test_bronze_rejects_both_trigger_limits(lakehouse: Lakehouse) -> None:
    source = {**ORDERS["source"], "max_files_per_trigger": 5, "max_bytes_per_trigger": 1000}
    lakehouse.add_table("bronze", "orders", {"source": source})
    with pytest.raises(ConfigValidationError, match="at most one of max_files_per_trigger"):
        lakehouse.project()


@pytest.mark.parametrize(
    "archive_dir",
    ["landing/orders/archive", "landing/orders", "landing"],
)
def test_validate_rejects_an_archive_dir_overlapping_the_source(
    lakehouse: Lakehouse, archive_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table(
        "bronze", "orders", {"source": {**ORDERS["source"], "archive_dir": archive_dir}}
    )
    code = main(["validate", "--conf", str(lakehouse.conf), "--env", "test"])
    err = capsys.readouterr().err
    assert code == 2
    assert "source.archive_dir" in err
    assert "picked up again" in err or "does not contain the source" in err


def test_validate_rejects_a_glob_source_matching_the_archive(lakehouse: Lakehouse) -> None:
    source = {**ORDERS["source"], "path": "feeds/*/orders", "archive_dir": "feeds/archive/orders"}
    lakehouse.add_table("bronze", "orders", {"source": source})
    with pytest.raises(ConfigValidationError, match="inside it"):
        lakehouse.project()


def hourly_totals(**aggregates: str) -> dict[str, Any]:
    """A gold spec aggregating silver orders per order and hour."""
    return {"source": "orders", "event_time": "event_time", "watermark": "10 minutes",
            "window": {"type": "tumbling", "duration": "1 hour"}, "group_by": ["order_id"],
            "aggregates": [{"name": n, "expr": e} for n, e in aggregates.items()]}


def test_validate_accepts_the_sample_configuration(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    # The sample's expressions name columns the check has no schema for; they parse, and pass.
    assert main(["validate", "--conf", str(REPO / "conf"), "--env", "local"]) == 0
    assert "configuration valid" in capsys.readouterr().out


def test_validate_has_spark_parse_every_schema_type_and_expression(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", {
        "source": {**ORDERS["source"], "schema": "order_id STRING, quantity INTT"}})
    lakehouse.add_table("silver", "orders", {
        "source": "orders",
        "columns": [{"name": "order_id"},
                    {"name": "quantity", "expr": "quantity *", "type": "decimal(10,2"},
                    {"name": "amount", "expr": "quantity * 2", "type": "decimal(12,2)"},
                    {"name": "event_time", "expr": "current_timestamp()"}],
        "expectations": [{"name": "positive", "rule": "quantity > 0"},
                         {"name": "known", "rule": "is_known(order_id)"}]})
    lakehouse.add_table("gold", "totals", hourly_totals(
        lines="count(*)", items="summ(quantity)", revenue="sum(amount)"))
    args = ["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "5 configuration problem(s)" in err
    expected = {
        "bronze/orders.yaml:source.schema": "'order_id STRING, quantity INTT': "
                                            "[UNSUPPORTED_DATATYPE]",
        "silver/orders.yaml:columns[1].expr": "'quantity *': [PARSE_SYNTAX_ERROR]",
        "silver/orders.yaml:columns[1].type": "'decimal(10,2': [PARSE_SYNTAX_ERROR]",
        "silver/orders.yaml:expectations[1].rule": "'is_known(order_id)': "
                                                   "[UNRESOLVED_ROUTINE]",
        "gold/totals.yaml:aggregates[1].expr": "'summ(quantity)': [UNRESOLVED_ROUTINE]",
    }
    lines = [line for line in err.splitlines() if line.startswith("  - ")]
    for key, found in expected.items():
        [line] = [line for line in lines if f"{key}:" in line]
        assert "expected a " in line and f"found {found}" in line, line
    # valid SQL naming columns the check cannot resolve is not a problem
    for key in ("columns[2]", "expectations[0]", "aggregates[0]", "aggregates[2]"):
        assert key not in err
    # without Spark the rest of the configuration is still checked, and is valid
    assert main([*args, "--no-spark"]) == 0


def test_validate_resolves_columns_against_the_schemas_the_tables_will_have(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    # bronze's columns come from its DDL (plus its own); silver's from its columns; gold reads
    # silver's. Each expression must name columns of the table it reads.
    lakehouse.add_table("bronze", "orders", {
        "source": {**ORDERS["source"],
                   "schema": "order_id STRING, quantity INT, event_time TIMESTAMP"}})
    lakehouse.add_table("silver", "orders", {
        "source": "orders",
        "columns": [{"name": "order_id"}, {"name": "qty", "from": "quantity", "type": "bigint"},
                    {"name": "event_time"}, {"name": "file", "from": "_source_file"}],
        "expectations": [{"name": "positive", "rule": "qty > 0"},
                         {"name": "stale", "rule": "quantity > 0"}]})
    lakehouse.add_table("silver", "doubled", {
        "source": "orders", "columns": [{"name": "total", "expr": "quantiti * 2"}]})
    # the source's hidden _metadata column exists when the job reads, not in the check
    lakehouse.add_table("silver", "lineage", {
        "source": "orders", "columns": [{"name": "order_id"},
                                        {"name": "read_from", "expr": "_metadata.file_path"}],
        "expectations": [{"name": "known", "rule": "read_from IS NOT NULL"}]})
    lakehouse.add_table("gold", "totals", hourly_totals(
        lines="count(*)", items="sum(qty)", old_items="sum(quantity)"))
    assert main(["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    assert "3 configuration problem(s)" in err
    lines = {line.split("/tables/")[1].split(": expected")[0]: line
             for line in err.splitlines() if line.startswith("  - ")}
    assert sorted(lines) == ["gold/totals.yaml:aggregates[2].expr",
                             "silver/doubled.yaml:columns[0].expr",
                             "silver/orders.yaml:expectations[1].rule"]
    bronze, silver = (lakehouse.project().table("orders", layer).full_name
                      for layer in (Layer.BRONZE, Layer.SILVER))
    assert f"over the columns of {bronze}, found 'quantiti * 2'" in \
        lines["silver/doubled.yaml:columns[0].expr"]
    assert "`quantity`" in lines["silver/doubled.yaml:columns[0].expr"]  # Spark's suggestion
    assert "[UNRESOLVED_COLUMN" in lines["silver/orders.yaml:expectations[1].rule"]
    assert f"columns of {silver}, found 'sum(quantity)'" in \
        lines["gold/totals.yaml:aggregates[2].expr"]


def test_validate_reports_every_problem_of_every_table_in_one_pass(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    # A misspelt silver column no longer hides the rule after it, the gold aggregate over the
    # table, or the mart over that aggregate: a column that does not resolve is planned as one
    # of unknown type, so what uses it by name is not reported twice.
    lakehouse.add_table("bronze", "orders", {
        "source": {**ORDERS["source"],
                   "schema": "order_id STRING, quantity INT, event_time TIMESTAMP, "
                             "store_id STRING"}})
    lakehouse.add_table("bronze", "stores", {
        "source": {**ORDERS["source"], "path": "landing/stores",
                   "schema": "store_id STRING, region STRING"}})
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("silver", "orders", {
        "source": "orders",
        "columns": [{"name": "order_id"}, {"name": "qty", "from": "quantiy"},
                    {"name": "event_time"}, {"name": "store_id"}],
        "expectations": [{"name": "positive", "rule": "qty > 0"},
                         {"name": "typo", "rule": "oder_id IS NOT NULL"}]})
    lakehouse.add_table("gold", "totals", {**hourly_totals(items="sum(qty)",
                                                           lines="count(ordr_id)"),
                                           "group_by": ["store_id"]})
    lakehouse.add_table("gold", "regional", {
        "kind": "mart", "fact": "totals",
        "dimensions": [{"table": "stores", "on": {"store_id": "store_id"}}],
        "where": "regoin = 'north'", "group_by": ["region"],
        "aggregates": [{"name": "items", "expr": "sum(items)"}]})
    assert main(["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    keys = sorted(line.split("/tables/")[1].split(": expected")[0]
                  for line in err.splitlines() if line.startswith("  - "))
    assert keys == ["gold/regional.yaml:where", "gold/totals.yaml:aggregates[1].expr",
                    "silver/orders.yaml:columns[1].from",
                    "silver/orders.yaml:expectations[1].rule"], err
    assert "4 configuration problem(s)" in err


def test_the_yarn_environment_takes_its_root_and_metastore_from_variables(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDALLION_HDFS_ROOT", "hdfs://namenode:8020/medallion")
    monkeypatch.setenv("MEDALLION_METASTORE", "/var/lib/medallion/metastore_db")
    yarn = load_project(REPO / "conf", "yarn")
    assert yarn.env.runtime is Runtime.SUBMIT
    assert yarn.table("orders", Layer.BRONZE).spec.landing(  # type: ignore[attr-defined]
        yarn.table("orders", Layer.BRONZE)) == "hdfs://namenode:8020/medallion/landing/orders"
    assert yarn.env.metastore == "/var/lib/medallion/metastore_db"
    monkeypatch.delenv("MEDALLION_METASTORE")
    with pytest.raises(ConfigValidationError, match="MEDALLION_METASTORE to be set"):
        load_project(REPO / "conf", "yarn")


@pytest.mark.parametrize("metastore, valid", [
    ("thrift://metastore:9083", True), ("/var/lib/metastore_db", True),
    ("metastore_db", False), ("jdbc:derby:x", False)])
def test_a_metastore_is_a_thrift_uri_or_an_absolute_folder(
    lakehouse: Lakehouse, metastore: str, valid: bool
) -> None:
    lakehouse.write_env(metastore=metastore)
    if valid:
        assert lakehouse.project().env.metastore == metastore
    else:
        with pytest.raises(ConfigValidationError,
                           match="expected a thrift:// URI or an absolute folder"):
            lakehouse.project()


def test_validate_warns_about_a_session_time_zone_other_than_utc(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.write_env(spark_conf={"spark.sql.session.timeZone": "UTC"})
    assert main(["validate", "--no-spark", "--conf", str(lakehouse.conf), "--env", "test"]) == 0
    assert "warning" not in capsys.readouterr().out
    lakehouse.write_env(spark_conf={"spark.sql.session.timeZone": "Europe/Paris"})
    assert main(["validate", "--no-spark", "--conf", str(lakehouse.conf), "--env", "test"]) == 0
    assert ("warning: environment 'test' sets spark.sql.session.timeZone to 'Europe/Paris'"
            in capsys.readouterr().out)


def test_validate_reports_config_and_sql_problems_together_each_value_said_once(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid rule is reported with the other problems, not after they are fixed; a rule
    must be boolean, a duration longer than zero; a message names its value once."""
    lakehouse.add_table("bronze", "orders", {
        "source": {**ORDERS["source"], "schema": "order_id STRING, quantity INT, "
                                                 "event_time TIMESTAMP"}})
    lakehouse.add_table("silver", "orders", {
        "source": "orders", "event_time": "event_time",
        "dedup": {"keys": ["order_id"], "delay": "1 dya"},  # a config-level problem
        "expectations": [{"name": "broken", "rule": "quantity >"},
                         {"name": "not_boolean", "rule": "quantity + 1"},
                         {"name": "fine", "rule": "quantity > 0"}]})
    lakehouse.add_table("silver", "plain", {
        "source": "orders", "expectations": [{"name": "number", "rule": "quantity * 2"}]})
    lakehouse.add_table("gold", "totals", {
        **hourly_totals(items="sum(quantity)"),
        "window": {"type": "tumbling", "duration": "0 seconds"}})
    assert main(["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    lines = {line.split("/tables/")[1].split(": ", 1)[0]: line.split(": ", 1)[1]
             for line in err.splitlines() if line.startswith("  - ")}
    # the rules of a spec with a problem of its own are checked too
    assert sorted(lines) == ["gold/totals.yaml:window.duration",
                             "silver/orders.yaml:dedup.delay",
                             "silver/orders.yaml:expectations[0].rule",
                             "silver/orders.yaml:expectations[1].rule",
                             "silver/plain.yaml:expectations[0].rule"], err
    assert lines["silver/orders.yaml:expectations[0].rule"].startswith(
        "expected a Spark SQL expression such as 'sum(amount)' or 'quantity > 0', found "
        "'quantity >': ")
    assert lines["silver/orders.yaml:expectations[1].rule"].endswith(
        "found 'quantity + 1' of type int")
    assert lines["silver/orders.yaml:dedup.delay"] == \
        "expected an interval such as '10 minutes' or '1 hour', found '1 dya'"
    assert lines["gold/totals.yaml:window.duration"] == \
        "expected an interval longer than zero, found '0 seconds'"
    assert lines["silver/plain.yaml:expectations[0].rule"] == \
        "expected a rule that is true or false for each row (a boolean), found 'quantity * 2' " \
        "of type int"


def test_stale_changes_name_only_what_a_refresh_fixes() -> None:
    from framework.staleness import merged, stale_changes
    from gold.spec import AggregateSpec, MartSpec
    from silver.spec import SilverTableSpec

    orders = {"name": "orders", "source": "orders", "event_time": "event_time",
              "columns": [{"name": "order_id"}, {"name": "amount", "expr": "quantity * 2"}],
              "expectations": [{"name": "positive", "rule": "amount > 0", "action": "drop"},
                               {"name": "noted", "rule": "amount < 100"}],
              "dedup": {"keys": ["order_id"], "delay": "1 hour"}}
    before = SilverTableSpec.model_validate(orders).stale_parts()
    written = merged(None, before)
    assert stale_changes(written, before) == []
    assert stale_changes(None, before) == []  # nothing recorded: nothing to compare
    # layout, descriptions and warn-only rules change no row
    same = SilverTableSpec.model_validate({
        **orders, "description": "new words", "partition_by": ["order_id"],
        "expectations": [*orders["expectations"][:1],
                         {"name": "noted", "rule": "amount < 5", "action": "warn"}]})
    assert stale_changes(written, same.stale_parts()) == []
    changed = SilverTableSpec.model_validate({
        **orders, "columns": [{"name": "order_id"},
                              {"name": "amount", "expr": "quantity * 3", "type": "bigint"}],
        "expectations": [{"name": "x", "rule": "amount < 9", "action": "quarantine"}]})
    stale = stale_changes(written, changed.stale_parts())
    assert [c.part for c in stale] == ["columns[amount]", "expectations[positive]",
                                       "expectations[x]"]
    assert [c.describe() for c in stale] == [
        "columns[amount] was 'quantity * 2', the spec now says 'quantity * 3 :: bigint'",
        "expectations[positive] was 'amount > 0 (drop)' and is no longer in the spec",
        "expectations[x] is new ('amount < 9 (quarantine)'): rows written before it never "
        "had it"]
    # rows written under both values: stale until a refresh, even with the first one back
    both = merged(written, changed.stale_parts())
    assert "columns[amount]" in [c.part for c in stale_changes(both, before)]

    window = {"name": "sales", "source": "orders", "event_time": "event_time",
              "watermark": "1 hour", "window": {"type": "tumbling", "duration": "1 hour"},
              "aggregates": [{"name": "total", "expr": "sum(amount)"}]}
    gold = merged(None, AggregateSpec.model_validate(window).stale_parts())
    wider = AggregateSpec.model_validate({**window, "window": {"type": "tumbling",
                                                               "duration": "1 day"},
                                          "description": "per day"})
    assert [c.part for c in stale_changes(gold, wider.stale_parts())] == ["window"]
    # a mart is never stale: a view reads its sources, a materialized one rebuilds itself
    mart = MartSpec.model_validate({"name": "m", "kind": "mart", "fact": "sales",
                                    "materialize": True, "where": "region = 'west'",
                                    "dimensions": [{"table": "stores", "on": "store_id"}]})
    assert mart.stale_parts() == {}
    assert mart.definition()["where"] == "region = 'west'"
