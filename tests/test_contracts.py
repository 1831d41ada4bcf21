"""``medallion contract export|check|init``: ODCS v3 data contracts out of the specs, checked
against them and the live tables, and a new feed's specs from a producer's contract."""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from chispa import assert_df_equality
from open_data_contract_standard.model import OpenDataContractStandard
from pyspark.sql import SparkSession

from framework.cli import main
from framework.config.model import Layer
from tests.support import REPO, Lakehouse, QuickstartLake, bronze_spec, cli, write_json_lines

DEMO_TABLES = ["bronze.customers", "bronze.orders", "bronze.stores", "silver.customers",
               "silver.orders", "silver.stores", "gold.regional_sales", "gold.segment_sales",
               "gold.store_sales"]
EXAMPLE = REPO / "examples" / "contracts" / "shipments.odcs.yaml"


def odcs_problems(path: Path) -> list[str]:
    """What the package's own JSON schema finds wrong in the file (none: valid); the
    standard's model reads it too."""
    schema = json.loads(resources.files("open_data_contract_standard").joinpath(
        "schema.json").read_text(encoding="utf-8"))
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    OpenDataContractStandard.from_file(str(path))
    return [e.message for e in jsonschema.Draft201909Validator(schema).iter_errors(doc)]


def columns_of(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """(name, physicalType, logicalType, required, key position) of each property."""
    return [(p["name"], p.get("physicalType"), p.get("logicalType"), p["required"],
             p.get("primaryKeyPosition")) for p in doc["schema"][0]["properties"]]


def run(lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str], *args: str
        ) -> tuple[int, list[str]]:
    """``medallion <args>`` in this process: its exit code and the lines it printed."""
    capsys.readouterr()
    code = cli(lakehouse, *args)
    return code, capsys.readouterr().out.splitlines()


# ---------------------------------------------------------------------------------- export
def test_the_demos_tables_export_as_contracts_valid_against_the_odcs_schema(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    """Every table of the demo's conf/, without a lake: types the specs leave to an
    expression (an aggregate's, a view's) are planned by Spark."""
    monkeypatch.setenv("MEDALLION_ROOT", str(tmp_path / "lakehouse"))
    out = tmp_path / "contracts"
    assert main(["contract", "export", *DEMO_TABLES, "--out", str(out), "--conf",
                 str(REPO / "conf"), "--env", "local", "--log-format", "json"]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(f"{t}.odcs.yaml" for t in DEMO_TABLES)
    for name in written:
        assert odcs_problems(out / name) == [], name
    orders = yaml.safe_load((out / "silver.orders.odcs.yaml").read_text())
    assert {k: orders[k] for k in ("apiVersion", "kind", "id", "name", "version", "status")} \
        == {"apiVersion": "v3.1.0", "kind": "DataContract", "id": "silver.orders",
            "name": "spark_catalog.silver.orders", "version": "1.0.0", "status": "active"}
    assert orders["servers"] == [{"id": "local", "server": "local", "type": "local",
                                  "environment": "local", "format": "delta",
                                  "path": str(tmp_path / "lakehouse/tables/silver/orders")}]
    assert columns_of(orders) == [
        ("order_id", "string", "string", True, 1),
        ("customer_id", "string", "string", False, None),
        ("store_id", "string", "string", False, None),
        ("event_time", "timestamp", "timestamp", True, None),
        ("quantity", "int", "integer", False, None),
        ("unit_price", "decimal(10,2)", "number", False, None),
        ("amount", "decimal(12,2)", "number", False, None),
        ("status", "string", "string", False, None),
        ("order_date", "date", "date", False, None)]
    assert orders["schema"][0]["properties"][6]["transformLogic"] == "quantity * unit_price"
    quality = orders["schema"][0]["quality"]
    assert [(q["name"], q["type"], q["severity"]) for q in quality] == [
        ("has_order_id", "sql", "error"), ("has_event_time", "sql", "error"),
        ("positive_quantity", "sql", "error"), ("known_status", "sql", "warning"),
        ("store_id_in_stores", "sql", "error")]
    assert quality[2]["query"] == \
        "SELECT COUNT(*) FROM ${table} WHERE NOT coalesce((quantity > 0), false)"
    assert quality[4]["customProperties"] == [{"property": "check", "value": {
        "references": {"column": "store_id", "table": "stores", "layer": "silver",
                       "key": "store_id"}, "action": "hold", "max_hold": "7 days"}}]
    sales = yaml.safe_load((out / "gold.store_sales.odcs.yaml").read_text())
    assert columns_of(sales) == [
        ("window_start", "timestamp", "timestamp", False, 1),
        ("window_end", "timestamp", "timestamp", False, 2),
        ("window_date", "date", "date", False, None),
        ("store_id", "string", "string", False, 3),
        ("orders", "bigint", "integer", False, None),
        ("items", "bigint", "integer", False, None),
        ("revenue", "decimal(22,2)", "number", False, None)]
    assert [p.get("description") for p in sales["schema"][0]["properties"]][3:] == [
        "The store that took the orders", "Orders placed in the window",
        "Items ordered in the window", "Sum of the order amounts"]
    view = yaml.safe_load((out / "gold.regional_sales.odcs.yaml").read_text())
    assert view["schema"][0]["physicalType"] == "view"
    assert view["servers"][0] == {"id": "local", "server": "local", "type": "custom",
                                  "environment": "local", "catalog": "spark_catalog",
                                  "schema": "gold"}


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart")  # (its lake: tests/conftest.py)
def test_the_demos_live_tables_export_from_their_delta_logs_and_keep_their_contracts(
    spark: SparkSession, quickstart_lake: QuickstartLake, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the lake the demo made: every Delta table's columns come from its log (the mart, a
    view, from the specs), the documents are valid ODCS, and checking them passes."""
    monkeypatch.setenv("MEDALLION_ROOT", str(quickstart_lake.root))
    out = tmp_path / "contracts"
    options = ["--conf", str(REPO / "conf"), "--env", "local", "--log-format", "json"]
    capsys.readouterr()
    assert main(["contract", "export", *DEMO_TABLES, "--out", str(out), *options]) == 0
    origins = [line.split(" columns from ")[1].split(",")[0]
               for line in capsys.readouterr().out.splitlines()]
    assert origins == ["the live table"] * 6 + ["the specs"] + ["the live table"] * 2
    contracts = sorted(out.iterdir())
    for path in contracts:
        assert odcs_problems(path) == [], path.name
    orders = yaml.safe_load((out / "silver.orders.odcs.yaml").read_text())
    assert [p["physicalType"] for p in orders["schema"][0]["properties"]] == [
        "string", "string", "string", "timestamp", "int", "decimal(10,2)", "decimal(12,2)",
        "string", "date"]
    sales = yaml.safe_load((out / "gold.store_sales.odcs.yaml").read_text())
    assert [(p["name"], p["required"]) for p in sales["schema"][0]["properties"]][4:] == [
        ("orders", True), ("items", False), ("revenue", False)]  # count(*) holds no NULL
    assert main(["contract", "check", *map(str, contracts), *options]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: the specs keep the contract" for path in contracts]


# ------------------------------------------------------------------------------------ check
BASE_SILVER: dict[str, Any] = {
    "description": "Orders, checked.",
    "source": "orders",
    "columns": [{"name": "order_id"}, {"name": "customer_id"},
                {"name": "quantity", "type": "int"}, {"name": "event_time"},
                {"name": "amount", "expr": "quantity * 2.5", "type": "decimal(12,2)"},
                {"name": "status", "expr": "'new'", "type": "string"}],
    "event_time": "event_time",
    "expectations": [
        {"name": "has_order_id", "rule": "order_id IS NOT NULL", "action": "quarantine"},
        {"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"}],
    "dedup": {"keys": ["order_id"], "delay": "1 hour"},
    "checks": [{"freshness": "2 days", "by": "event_time"}],
}


def changed(**changes: Any) -> dict[str, Any]:
    spec = json.loads(json.dumps(BASE_SILVER))
    for key, value in changes.items():
        spec[key] = value(spec[key]) if callable(value) else value
    return spec


def columns_without(name: str) -> Any:
    return lambda cols: [c for c in cols if c["name"] != name]


def typed(name: str, kind: str) -> Any:
    return lambda cols: [{**c, "type": kind} if c["name"] == name else c for c in cols]


def expectation(name: str, rule: str, action: str) -> Any:
    return lambda rules: [*rules, {"name": name, "rule": rule, "action": action}]


WITHOUT_POSITIVE = [e for e in BASE_SILVER["expectations"] if e["name"] != "positive_quantity"]
CHANGES = {
    # breaking
    "column removed": (changed(columns=columns_without("status")), 1, [
        "breaking: silver.orders: column status removed or renamed (the contract has it, "
        "string)"]),
    "type narrowed": (changed(columns=typed("amount", "decimal(8,2)")), 1, [
        "breaking: silver.orders: column amount: type narrowed or changed: expected "
        "decimal(12,2), found decimal(8,2)"]),
    "nullability tightened": (changed(expectations=expectation(
        "has_customer", "customer_id IS NOT NULL", "quarantine")), 1, [
        "breaking: silver.orders: column customer_id: nullability tightened: the contract "
        "allows NULL, the table now requires a value",
        "compatible: silver.orders: quality rule has_customer added"]),
    "key changed": (changed(dedup={"keys": ["order_id", "customer_id"], "delay": "1 hour"}), 1, [
        "breaking: silver.orders: key changed: expected (order_id), found (order_id, "
        "customer_id)"]),
    "quality rule missing": (changed(expectations=WITHOUT_POSITIVE), 1, [
        "breaking: silver.orders: quality rule positive_quantity missing (the contract "
        "promises: each row: quantity > 0 (a row breaking it: quarantine))"]),
    # compatible
    "column added": (changed(columns=lambda cols: [*cols, {
        "name": "channel", "expr": "'web'", "type": "string"}]), 0, [
        "compatible: silver.orders: column channel added (string)"]),
    "type widened": (changed(columns=typed("quantity", "bigint")), 0, [
        "compatible: silver.orders: column quantity: type widened from int to bigint"]),
    "quality rule added": (changed(expectations=expectation(
        "known_status", "status IN ('new', 'paid')", "warn")), 0, [
        "compatible: silver.orders: quality rule known_status added"]),
    "SLA tightened": (changed(checks=[{"freshness": "1 day", "by": "event_time"}]), 0, [
        "compatible: silver.orders: SLA latency tightened from 2 d to 1 d"]),
    "rule enforced harder": (changed(expectations=lambda rules: [
        {**r, "action": "fail"} if r["name"] == "positive_quantity" else r for r in rules]), 0, [
        "compatible: silver.orders: quality rule positive_quantity: action quarantine -> "
        "fail"]),
}


def orders_lake(lakehouse: Lakehouse, silver: dict[str, Any] = BASE_SILVER) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver)


@pytest.mark.parametrize("change", list(CHANGES))
def test_check_tells_a_breaking_change_from_a_compatible_one(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """The contract exported from the spec before the change, checked after it: exit 1 and a
    line per breach, or exit 0 with the compatible changes listed. No Spark: the types are
    the specs'."""
    orders_lake(lakehouse)
    out = lakehouse.base / "contracts"
    name = lakehouse.project().table("orders", Layer.SILVER).full_name
    assert run(lakehouse, capsys, "contract", "export", "silver.orders", "--out", str(out)) \
        == (0, [f"written: {out}/silver.orders.odcs.yaml ({name}: 6 columns from the specs, "
                "2 quality rules, 1 SLA)"])
    contract = out / "silver.orders.odcs.yaml"
    assert odcs_problems(contract) == []
    assert run(lakehouse, capsys, "contract", "check", str(contract)) == \
        (0, [f"{contract}: the specs keep the contract"])
    spec, code, lines = CHANGES[change]
    lakehouse.add_table("silver", "orders", spec)
    assert run(lakehouse, capsys, "contract", "check", str(contract)) == \
        (code, [f"{contract}: {line}" for line in lines])


def test_check_without_the_promised_sla_is_breaking(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    orders_lake(lakehouse)
    out = lakehouse.base / "contracts"
    assert cli(lakehouse, "contract", "export", "silver.orders", "--out", str(out)) == 0
    lakehouse.add_table("silver", "orders", changed(checks=[]))
    contract = out / "silver.orders.odcs.yaml"
    assert run(lakehouse, capsys, "contract", "check", str(contract)) == (1, [
        f"{contract}: breaking: silver.orders: SLA latency 2 d missing (no freshness check)"])


def test_a_contract_that_is_not_odcs_is_one_line_and_exit_2(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    orders_lake(lakehouse)
    bad = lakehouse.base / "bad.yaml"
    bad.write_text("kind: DataContract\napiVersion: v9\nid: x\nversion: '1'\n")
    assert cli(lakehouse, "contract", "check", str(bad)) == 2
    err = capsys.readouterr().err
    assert f"expected an ODCS document valid against its JSON schema in {bad}, found 1 " \
           "problem(s): at apiVersion: 'v9' is not one of" in err


def test_check_reads_the_live_table_without_spark_and_export_takes_its_types(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a lake that has the table, export takes its columns from the Delta log, and check
    compares the contract with the live table too: a column the spec adds but the table has
    not been written with yet is missing there."""
    orders_lake(lakehouse)
    write_json_lines(lakehouse.path("landing", "orders", "o.json"), [
        {"order_id": "o1", "customer_id": "c1", "quantity": 2,
         "event_time": "2026-11-01T08:00:00Z"}])
    assert cli(lakehouse, "run", "all") == 0
    out = lakehouse.base / "contracts"
    code, lines = run(lakehouse, capsys, "contract", "export", "silver.orders", "--out", str(out))
    assert code == 0 and "6 columns from the live table" in lines[0]
    contract = out / "silver.orders.odcs.yaml"
    assert odcs_problems(contract) == []
    doc = yaml.safe_load(contract.read_text())
    assert doc["customProperties"] == [{"property": "columnsFrom", "value": "table"}]
    assert columns_of(doc) == [
        ("order_id", "string", "string", True, 1),
        ("customer_id", "string", "string", False, None),
        ("quantity", "int", "integer", False, None),
        ("event_time", "timestamp", "timestamp", False, None),
        ("amount", "decimal(12,2)", "number", False, None),
        ("status", "string", "string", True, None)]  # a literal: the log says no NULL
    assert run(lakehouse, capsys, "contract", "check", str(contract)) == \
        (0, [f"{contract}: the specs keep the contract"])
    # the spec adds a column, and the contract is exported from the spec (no live table)
    with_channel = changed(columns=lambda cols: [*cols, {"name": "channel", "expr": "'web'",
                                                         "type": "string"}])
    other = Lakehouse(lakehouse.base / "spec-only")
    orders_lake(other, with_channel)
    assert cli(other, "contract", "export", "silver.orders", "--out", str(out / "next")) == 0
    lakehouse.add_table("silver", "orders", with_channel)
    promised = out / "next" / "silver.orders.odcs.yaml"
    assert run(lakehouse, capsys, "contract", "check", str(promised)) == (1, [
        f"{promised}: breaking: silver.orders: column channel removed or renamed (the contract "
        "has it, string) in the live table"])


# ------------------------------------------------------------------------------------- init
def test_the_example_contract_is_valid_odcs() -> None:
    assert odcs_problems(EXAMPLE) == []


def test_init_from_a_producers_contract_writes_specs_that_validate_and_run(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run(lakehouse, capsys, "contract", "init", str(EXAMPLE))
    assert code == 0
    tables = lakehouse.conf / "tables"
    assert lines[:2] == [f"written: {tables}/bronze/shipments.yaml",
                         f"written: {tables}/silver/shipments.yaml"]
    bronze = yaml.safe_load((tables / "bronze" / "shipments.yaml").read_text())
    assert bronze["source"] == {
        "path": "landing/shipments", "format": "json",
        "schema": "shipment_id STRING, order_id STRING, carrier STRING, weight_kg "
                  "DECIMAL(8,3), parcels INT, shipped_at TIMESTAMP"}
    silver = yaml.safe_load((tables / "silver" / "shipments.yaml").read_text())
    assert silver["event_time"] == "shipped_at"
    assert silver["dedup"] == {"keys": ["shipment_id"], "delay": "1 day"}
    assert silver["expectations"] == [
        {"name": "has_shipment_id_and_order_id_and_shipped_at",
         "rule": "shipment_id IS NOT NULL AND order_id IS NOT NULL AND shipped_at IS NOT NULL",
         "action": "quarantine"},
        {"name": "plausible_weight", "rule": "coalesce(NOT (weight_kg > 1000), true)",
         "action": "quarantine"},
        {"name": "known_carrier", "rule": "carrier IN ('dhl', 'ups', 'postnl')",
         "action": "quarantine"},
        {"name": "has_parcels", "rule": "parcels IS NOT NULL", "action": "quarantine"}]
    assert silver["checks"] == [{"unique": ["shipment_id"], "action": "quarantine",
                                 "name": "one_event_per_shipment"},
                                {"freshness": "1 day", "by": "event_time", "action": "warn"}]
    assert cli(lakehouse, "validate") == 0
    # the producer's contract, checked against the specs written from it: nothing breaks
    assert run(lakehouse, capsys, "contract", "check", str(EXAMPLE)) == (0, [
        f"{EXAMPLE}: compatible: silver.shipments: column shipment_id: type widened from "
        "varchar(36) to string",
        f"{EXAMPLE}: compatible: silver.shipments: quality rule "
        "has_shipment_id_and_order_id_and_shipped_at added"])
    nexts = [shlex.split(line)[1:] for line in lines if line.startswith("  medallion ")]
    assert [n[0] for n in nexts] == ["validate", "init", "land", "run"]
    assert cli(lakehouse, "init") == 0
    sample = write_json_lines(tmp_path / "shipments-1.json", [
        {"shipment_id": "s1", "order_id": "o1", "carrier": "dhl", "weight_kg": 1.25,
         "parcels": 1, "shipped_at": "2026-11-01T08:00:00Z"},
        {"shipment_id": "s2", "order_id": "o2", "carrier": "ups", "weight_kg": 20.5,
         "parcels": 2, "shipped_at": "2026-11-01T09:30:00Z"},
        {"shipment_id": "s3", "order_id": "o3", "carrier": "bike", "weight_kg": 2.0,
         "parcels": 1, "shipped_at": "2026-11-01T10:00:00Z"},  # not a known carrier
        {"shipment_id": "s4", "order_id": None, "carrier": "dhl", "weight_kg": 3.0,
         "parcels": 1, "shipped_at": "2026-11-01T11:00:00Z"},  # no order
        {"shipment_id": "s5", "order_id": "o5", "carrier": "postnl", "weight_kg": 5000,
         "parcels": 9, "shipped_at": "2026-11-01T12:00:00Z"}])  # too heavy
    assert cli(lakehouse, "land", "shipments", str(sample)) == 0
    assert cli(lakehouse, "run", "all") == 0
    table = lakehouse.project().table("shipments", Layer.SILVER)
    got = spark.table(table.full_name).select("shipment_id", "order_id", "carrier",
                                               "weight_kg", "parcels", "shipped_at")
    expected = spark.createDataFrame(
        [("s1", "o1", "dhl", Decimal("1.250"), 1, datetime(2026, 11, 1, 8, 0)),
         ("s2", "o2", "ups", Decimal("20.500"), 2, datetime(2026, 11, 1, 9, 30))],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    quarantined = spark.read.format("delta").load(table.companion_location("quarantine"))
    assert sorted((json.loads(r["_row"])["shipment_id"], sorted(r["_failed_rules"]))
                  for r in quarantined.collect()) == [
        ("s3", ["known_carrier"]), ("s4", ["has_shipment_id_and_order_id_and_shipped_at"]),
        ("s5", ["plausible_weight"])]
