"""``medallion test``: a spec's own cases, run through its table's job on a scratch lake.

Each test writes a case that passes, then changes the spec (or the expected rows) and asserts
the difference the same command prints, line for line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import Lakehouse, bronze_spec, cli, silver_spec

ORDERS = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
SALES = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"


def write_case(lakehouse: Lakehouse, table: str, case: str,
               files: dict[str, list[dict[str, Any]] | str]) -> Path:
    """A case folder of ``files`` by name: a list of objects as JSON Lines, a string as is."""
    folder = lakehouse.conf / "tests" / table / case
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else \
            "".join(json.dumps(row) + "\n" for row in content)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def medallion_test(lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str],
                   *tables: str) -> tuple[int, list[str]]:
    """``medallion test [tables]``: its exit code and its output's lines."""
    capsys.readouterr()
    code = cli(lakehouse, "test", *tables)
    captured = capsys.readouterr()
    return code, captured.out.splitlines() + [
        line for line in captured.err.splitlines() if '"command.failed"' in line]


def error_of(lines: list[str]) -> str:
    [event] = [json.loads(line) for line in lines if line.startswith("{")]
    return str(event["error"])


def with_orders(lakehouse: Lakehouse, **silver: Any) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(schema=ORDERS))
    lakehouse.add_table("silver", "orders", silver_spec(event_time="event_time", **silver))


def order(order_id: str, quantity: int, minute: int = 0, customer: str = "c1") -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": customer, "quantity": quantity,
            "event_time": f"2026-11-01T08:{minute:02d}:00Z"}


# ------------------------------------------------------------------------------ silver
# The cases of the silver orders, the gold store sales and the bronze orders below, written
# by functions of their own: tests/test_connect.py runs the same cases over Spark Connect.
def positive_quantity(rule: str = "quantity > 0") -> list[dict[str, str]]:
    return [{"name": "positive_quantity", "rule": rule, "action": "quarantine"}]


DEDUP = {"keys": ["order_id"], "delay": "1 hour"}


def drops_zero_quantity(lakehouse: Lakehouse) -> None:
    """A case of silver.orders with the rule :func:`positive_quantity`: one row quarantined."""
    write_case(lakehouse, "silver.orders", "drops_zero_quantity", {
        "input.jsonl": [order("o1", 2), order("o2", 0), order("o3", 5)],
        "expected.jsonl": [{"order_id": "o1", "quantity": 2}, {"order_id": "o3", "quantity": 5}],
        "quarantine.jsonl": [{"_failed_rules": ["positive_quantity"]}]})


def duplicate_in_a_later_batch(lakehouse: Lakehouse) -> None:
    """A case of silver.orders with :data:`DEDUP`: o1 again in the second batch, dropped."""
    write_case(lakehouse, "silver.orders", "duplicate_in_a_later_batch", {
        "input-1.jsonl": [order("o1", 2, minute=0), order("o2", 3, minute=1)],
        "input-2.jsonl": [order("o1", 9, minute=5), order("o3", 1, minute=6)],
        "expected.jsonl": [{"order_id": "o1", "quantity": 2}, {"order_id": "o2", "quantity": 3},
                           {"order_id": "o3", "quantity": 1}]})


def test_silver_a_rule_quarantines_a_row(lakehouse: Lakehouse,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with_orders(lakehouse, expectations=positive_quantity())
    drops_zero_quantity(lakehouse)
    code, lines = medallion_test(lakehouse, capsys)
    assert (code, lines) == (0, ["PASS silver.orders/drops_zero_quantity (2 rows, 1 quarantined)",
                                 "1 passed, 0 failed"])

    with_orders(lakehouse, expectations=positive_quantity("quantity > 2"))
    code, lines = medallion_test(lakehouse, capsys, "silver.orders")
    assert (code, lines) == (1, [
        "FAIL silver.orders/drops_zero_quantity",
        "  missing: order_id=o1, quantity=2",
        "  quarantine extra: _failed_rules=[\"positive_quantity\"]",
        "0 passed, 1 failed"])


def test_silver_dedup_within_the_watermark_across_two_batches(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    with_orders(lakehouse, source="orders", dedup=DEDUP)
    duplicate_in_a_later_batch(lakehouse)
    code, lines = medallion_test(lakehouse, capsys, "silver.orders")
    assert (code, lines) == (0, ["PASS silver.orders/duplicate_in_a_later_batch (3 rows)",
                                 "1 passed, 0 failed"])

    with_orders(lakehouse, source="orders")  # no dedup: the second o1 is kept
    code, lines = medallion_test(lakehouse, capsys, "silver.orders")
    assert (code, lines) == (1, ["FAIL silver.orders/duplicate_in_a_later_batch",
                                 "  extra: order_id=o1, quantity=9",
                                 "0 passed, 1 failed"])


def test_silver_a_unique_check_quarantines_a_key_the_table_has(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    """A table-level check runs in a case as in a run: o1 sent again in a later batch, with
    no dedup, is quarantined by the unique check; as a warning it is written twice."""
    with_orders(lakehouse, source="orders", checks=[{"unique": ["order_id"]}])
    write_case(lakehouse, "silver.orders", "sent_again", {
        "input-1.jsonl": [order("o1", 2, minute=0), order("o2", 3, minute=1)],
        "input-2.jsonl": [order("o1", 9, minute=5), order("o3", 1, minute=6)],
        "expected.jsonl": [{"order_id": "o1", "quantity": 2}, {"order_id": "o2", "quantity": 3},
                           {"order_id": "o3", "quantity": 1}],
        "quarantine.jsonl": [{"_failed_rules": ["unique_order_id"]}]})
    code, lines = medallion_test(lakehouse, capsys, "silver.orders")
    assert (code, lines) == (0, ["PASS silver.orders/sent_again (3 rows, 1 quarantined)",
                                 "1 passed, 0 failed"])

    with_orders(lakehouse, source="orders", checks=[{"unique": ["order_id"], "action": "warn"}])
    code, lines = medallion_test(lakehouse, capsys, "silver.orders")
    assert code == 1 and "  extra: order_id=o1, quantity=9" in lines, lines


def test_silver_scd2_closes_a_version_when_a_tracked_column_changes(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    customers = "customer_id STRING, segment STRING, updated_at TIMESTAMP"
    lakehouse.add_table("bronze", "customers", bronze_spec(schema=customers,
                                                           path="landing/customers"))
    scd2 = {"keys": ["customer_id"], "sequence_by": "updated_at"}
    lakehouse.add_table("silver", "customers", {"source": "customers", "mode": "scd2",
                                                "scd2": scd2})
    write_case(lakehouse, "silver.customers", "segment_change", {
        "input-1.jsonl": [{"customer_id": "c1", "segment": "retail",
                           "updated_at": "2026-11-01T08:00:00Z"}],
        "input-2.jsonl": [{"customer_id": "c1", "segment": "b2b",
                           "updated_at": "2026-11-01T09:00:00Z"}],
        "expected.jsonl": [
            {"customer_id": "c1", "segment": "retail", "__start_at": "2026-11-01T08:00:00Z",
             "__end_at": "2026-11-01T09:00:00Z", "__is_current": False},
            {"customer_id": "c1", "segment": "b2b", "__start_at": "2026-11-01T09:00:00Z",
             "__end_at": None, "__is_current": True}]})
    code, lines = medallion_test(lakehouse, capsys)
    assert (code, lines) == (0, ["PASS silver.customers/segment_change (2 rows)",
                                 "1 passed, 0 failed"])

    # segment no longer tracked: its change updates the version in place
    lakehouse.add_table("silver", "customers", {
        "source": "customers", "mode": "scd2",
        "scd2": {**scd2, "track_history_except": ["segment"]}})
    code, lines = medallion_test(lakehouse, capsys)
    key = "customer_id=c1, __start_at=2026-11-01 08:00:00"
    assert (code, lines) == (1, [
        "FAIL silver.customers/segment_change",
        f"  {key}: segment expected retail, found b2b",
        f"  {key}: __end_at expected 2026-11-01 09:00:00, found null",
        f"  {key}: __is_current expected false, found true",
        "  missing: customer_id=c1, segment=b2b, __start_at=2026-11-01 09:00:00, "
        "__end_at=null, __is_current=true",
        "0 passed, 1 failed"])


# ------------------------------------------------------------------------------ gold
def sale(order_id: str, store: str, amount: int, at: str) -> dict[str, Any]:
    return {"order_id": order_id, "store_id": store, "amount": amount, "event_time": at}


def aggregate(window: dict[str, str], revenue: str = "sum(amount)", source: str = "orders",
              **extra: Any) -> dict[str, Any]:
    return {"source": source, "event_time": "event_time", "window": window,
            "group_by": ["store_id"],
            "aggregates": [{"name": "orders", "expr": "count(*)"},
                           {"name": "revenue", "expr": revenue}], **extra}


TUMBLING = {"type": "tumbling", "duration": "10 minutes"}


def with_sales(lakehouse: Lakehouse, name: str = "orders") -> None:
    """Sales landed in bronze and kept by silver, both tables named ``name``."""
    lakehouse.add_table("bronze", name, bronze_spec(schema=SALES, path=f"landing/{name}"))
    lakehouse.add_table("silver", name, silver_spec(
        event_time="event_time", source={"table": name, "max_files_per_trigger": 1}))


def store_sales(revenue: str = "sum(amount)", source: str = "orders") -> dict[str, Any]:
    """gold.store_sales: orders and revenue per store in windows of :data:`TUMBLING`."""
    return aggregate(TUMBLING, revenue, source, watermark="10 minutes", output_mode="update")


def ten_minutes(lakehouse: Lakehouse) -> Path:
    """A case of gold.store_sales: two batches, the second with a late row of the first
    window; its folder."""
    return write_case(lakehouse, "gold.store_sales", "ten_minutes", {
        "input-1.jsonl": [sale("a", "s1", 10, "2026-11-01T08:01:00Z"),
                          sale("b", "s1", 20, "2026-11-01T08:02:00Z"),
                          sale("c", "s2", 7, "2026-11-01T08:05:00Z")],
        "input-2.jsonl": [sale("d", "s1", 5, "2026-11-01T08:12:00Z"),
                          sale("e", "s1", 1, "2026-11-01T08:03:00Z")],
        "expected.jsonl": [
            {"window_start": "2026-11-01T08:00:00Z", "window_end": "2026-11-01T08:10:00Z",
             "store_id": "s1", "orders": 3, "revenue": 31},
            {"window_start": "2026-11-01T08:00:00Z", "window_end": "2026-11-01T08:10:00Z",
             "store_id": "s2", "orders": 1, "revenue": 7},
            {"window_start": "2026-11-01T08:10:00Z", "window_end": "2026-11-01T08:20:00Z",
             "store_id": "s1", "orders": 1, "revenue": 5}]})


def test_gold_a_tumbling_window_and_a_calendar_month(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    with_sales(lakehouse)
    lakehouse.add_table("gold", "store_sales", store_sales())
    month = {"type": "calendar", "unit": "month"}
    lakehouse.add_table("gold", "monthly_sales", aggregate(month))
    ten_minutes(lakehouse)
    write_case(lakehouse, "gold.monthly_sales", "by_month", {
        "input.jsonl": [sale("a", "s1", 10, "2026-01-15T10:00:00Z"),
                        sale("b", "s1", 20, "2026-01-31T23:30:00Z"),
                        sale("c", "s1", 5, "2026-02-01T00:30:00Z")],
        "expected.csv": "window_start,window_end,store_id,orders,revenue\n"
                        "2026-01-01 00:00:00,2026-02-01 00:00:00,s1,2,30\n"
                        "2026-02-01 00:00:00,2026-03-01 00:00:00,s1,1,5\n"})
    code, lines = medallion_test(lakehouse, capsys, "gold.store_sales", "monthly_sales")
    assert (code, lines) == (0, ["PASS gold.monthly_sales/by_month (2 rows)",
                                 "PASS gold.store_sales/ten_minutes (3 rows)",
                                 "2 passed, 0 failed"])

    lakehouse.add_table("gold", "store_sales", store_sales("max(amount)"))
    lakehouse.add_table("gold", "monthly_sales", aggregate({**month, "unit": "quarter"}))
    code, lines = medallion_test(lakehouse, capsys, "gold.store_sales", "monthly_sales")
    assert (code, lines) == (1, [
        "FAIL gold.monthly_sales/by_month",
        "  missing: window_start=2026-01-01 00:00:00, window_end=2026-02-01 00:00:00, "
        "store_id=s1, orders=2, revenue=30",
        "  missing: window_start=2026-02-01 00:00:00, window_end=2026-03-01 00:00:00, "
        "store_id=s1, orders=1, revenue=5",
        "  extra: window_start=2026-01-01 00:00:00, window_end=2026-04-01 00:00:00, "
        "store_id=s1, orders=3, revenue=35",
        "FAIL gold.store_sales/ten_minutes",
        "  window_start=2026-11-01 08:00:00, window_end=2026-11-01 08:10:00, store_id=s1: "
        "revenue expected 31, found 20",
        "0 passed, 2 failed"])


# ------------------------------------------------------------------------------ bronze
def rescue_and_quarantine(lakehouse: Lakehouse) -> None:
    """A case of bronze.orders (typed by :data:`ORDERS`): a landed file with a value rescued
    and a malformed line quarantined."""
    write_case(lakehouse, "bronze.orders", "rescue_and_quarantine", {
        "input.jsonl": json.dumps(order("o1", 2)) + "\n"
                       + json.dumps({**order("o2", 0), "quantity": "many"}) + "\n"
                       + '{"order_id": "o3"\n',
        "expected.jsonl": [
            {"order_id": "o1", "quantity": 2, "_rescued_data": None},
            {"order_id": "o2", "quantity": None, "_rescued_data": '{"quantity":"many"}'}],
        "quarantine.jsonl": [{"_raw": '{"order_id": "o3"',
                              "_reason": "malformed record: does not parse against the schema"}]})


def test_bronze_rescues_a_value_and_quarantines_a_malformed_line(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(schema=ORDERS))
    rescue_and_quarantine(lakehouse)
    code, lines = medallion_test(lakehouse, capsys, "bronze.orders")
    assert (code, lines) == (0, ["PASS bronze.orders/rescue_and_quarantine (2 rows, "
                                 "1 quarantined)", "1 passed, 0 failed"])

    # quantity read as text: "many" fits, nothing is rescued
    lakehouse.add_table("bronze", "orders", bronze_spec(schema=ORDERS.replace("INT", "STRING")))
    code, lines = medallion_test(lakehouse, capsys, "bronze.orders")
    assert (code, lines) == (1, [
        "FAIL bronze.orders/rescue_and_quarantine",
        '  missing: order_id=o2, quantity=null, _rescued_data={"quantity":"many"}',
        "  extra: order_id=o2, quantity=many, _rescued_data=null",
        "0 passed, 1 failed"])


# ------------------------------------------------------------------------------ bad cases
def test_a_case_that_cannot_run_as_given_is_one_line_and_exit_2(
        lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    with_orders(lakehouse)
    tests = lakehouse.conf / "tests"

    def bad(*tables: str) -> str:
        code, lines = medallion_test(lakehouse, capsys, *tables)
        assert code == 2 and len(lines) == 1, lines
        shutil.rmtree(tests, ignore_errors=True)
        return error_of(lines)

    assert bad() == (f"expected test cases of any table under {tests}/<layer.name>/<case>/ "
                     "(input.jsonl or input.csv, and expected.jsonl or expected.csv), found none")
    write_case(lakehouse, "silver.orders", "c", {"expected.jsonl": []})
    assert bad("bronze.orders") == (
        f"expected test cases of bronze.orders under {tests}/<layer.name>/<case>/ (input.jsonl "
        "or input.csv, and expected.jsonl or expected.csv), found none")
    assert bad("gold.orders").startswith("expected one configured table named 'orders' in "
                                         "layer gold, found no table; known: ")

    folder = write_case(lakehouse, "silver.orders", "c", {"input.jsonl": [order("o1", 1)]})
    assert bad() == (f"{folder}: expected the rows the table should hold (expected.jsonl or "
                     "expected.csv), found none")
    folder = write_case(lakehouse, "silver.orders", "c", {"expected.jsonl": []})
    assert bad() == (f"{folder}: expected an input file (input.jsonl, input.csv, or batches "
                     "input-1.jsonl, input-2.jsonl...), found none")
    folder = write_case(lakehouse, "orders", "c", {"input.jsonl": [], "expected.jsonl": []})
    assert bad() == (f"{tests}: expected a folder named after a configured table "
                     "(layer.name, or a name one layer only has), found 'orders'")
    folder = write_case(lakehouse, "silver.order", "c", {"input.jsonl": [], "expected.jsonl": []})
    assert bad() == (f"{tests}: expected a folder named after a configured table "
                     "(layer.name, or a name one layer only has), found 'silver.order'")
    folder = write_case(lakehouse, "silver.orders", "c", {
        "input.jsonl": '{"order_id": "o1"\n', "expected.jsonl": []})
    assert bad() == (f"{folder}/input.jsonl:1: expected a JSON object per line, found "
                     "'{\"order_id\": \"o1\"' (Expecting ',' delimiter: line 1 column 18 "
                     "(char 17))")
    folder = write_case(lakehouse, "silver.orders", "c", {
        "input.jsonl": [order("o1", 1)], "expected.jsonl": [{"order_id": "o1", "amount": 1}]})
    assert bad() == (f"{folder}/expected.jsonl: expected columns of silver.orders (order_id, "
                     "customer_id, quantity, event_time), found amount")
    folder = write_case(lakehouse, "silver.orders", "c", {
        "input.jsonl": [{**order("o1", 1), "quantity": "many"}],
        "expected.jsonl": [{"order_id": "o1"}]})
    assert bad().startswith(f"{folder}/input.jsonl: expected values of the types of "
                            "bronze.orders's columns, found a row Spark cannot read so: ")
    folder = write_case(lakehouse, "silver.orders", "c", {
        "input.jsonl": [order("o1", 1)], "expected.csv": "order_id,quantity\no1,many\n"})
    assert bad() == (f"{folder}/expected.csv: expected a value of type int in column quantity, "
                     "found 'many'")


# ------------------------------------------------------------------------------ medallion new
def test_the_case_medallion_new_writes_passes(lakehouse: Lakehouse, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sample = tmp_path / "sales.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": 1, "event_time": "2026-11-01T08:00:00", "amount": 12.5, "category": "books"},
        {"id": 2, "event_time": "2026-11-01T09:30:00", "amount": 3.0, "category": "games"},
        {"id": 3, "event_time": "2026-11-01T17:45:00", "amount": None, "category": "books"},
        {"id": 4, "event_time": "2026-11-02T10:00:00", "amount": 20.0, "category": "games"}]))
    assert cli(lakehouse, "new", "sales", "--from", str(sample)) == 0
    case = lakehouse.conf / "tests" / "silver.sales" / "sample"
    assert (case / "input.jsonl").read_text().splitlines() == [
        '{"id":1,"event_time":"2026-11-01T08:00:00.000Z","amount":12.5,"category":"books"}',
        '{"id":2,"event_time":"2026-11-01T09:30:00.000Z","amount":3.0,"category":"games"}',
        '{"id":3,"event_time":"2026-11-01T17:45:00.000Z","category":"books"}']
    assert (case / "expected.jsonl").read_text() == (case / "input.jsonl").read_text()
    code, lines = medallion_test(lakehouse, capsys, "silver.sales")
    assert (code, lines) == (0, ["PASS silver.sales/sample (3 rows)", "1 passed, 0 failed"])


def test_a_case_whose_job_fails_says_why(lakehouse: Lakehouse,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with_orders(lakehouse, expectations=[
        {"name": "positive_quantity", "rule": "quantity > 0", "action": "fail"}])
    write_case(lakehouse, "silver.orders", "zero_quantity", {
        "input.jsonl": [order("o1", 0)], "expected.jsonl": []})
    code, lines = medallion_test(lakehouse, capsys)
    assert code == 1 and lines[1:] == ["0 passed, 1 failed"], lines
    assert lines[0].startswith("FAIL silver.orders/zero_quantity: the run failed: ")
    assert "positive_quantity" in lines[0]
