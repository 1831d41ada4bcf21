"""Bronze's quarantine says why a JSON line is malformed, and its ledger what a file none of
whose lines parsed holds instead (one JSON array...)."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from bronze.job import BronzeJob
from framework.job import RunContext, RunStatus
from tests.support import Lakehouse, bronze_spec, order, write_json_lines

GENERIC = "malformed record: does not parse against the schema"


def test_each_malformed_json_line_is_quarantined_with_what_is_wrong(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    reasons = {
        '{"order_id": "m1"} {"order_id": "m2"}':
            "malformed record: expected one JSON value, found two or more (JSON Lines hold one "
            "object per line)",
        '{"order_id": "m3", "quantity": NaN}':
            "malformed record: expected JSON numbers, found NaN (RFC 8259 has no NaN or "
            "Infinity; options.allowNonNumericNumbers: 'true' reads them)",
        '{"order_id": "m4", "quantity": -Infinity}':
            "malformed record: expected JSON numbers, found -Infinity (RFC 8259 has no NaN or "
            "Infinity; options.allowNonNumericNumbers: 'true' reads them)",
        '{"order_id": "m5", "quantity": 1, "quantity": 2}':
            'malformed record: expected distinct keys in a JSON object, found "quantity" twice '
            "(kept whole here: taking the line would drop one of the two values)",
        '[{"order_id": "m6"}]':
            "malformed record: expected a JSON object, found a JSON array",
        '"m7"': "malformed record: expected a JSON object, found a JSON string",
        '{"order_id": "m8", "quantity": ': GENERIC,  # cut
        "not json at all": GENERIC,
    }
    write_json_lines(landing / "mixed.json", [order(1), order(2)], list(reasons))
    # Files that are one JSON document, not JSON Lines: none of their lines parses.
    array = json.dumps([order(3), order(4)], indent=2)
    (landing / "array.json").write_text(array + "\n")
    (landing / "object.json").write_text(json.dumps(order(5), indent=2) + "\n")

    table = lakehouse.project().table("orders")
    summary = BronzeJob(spark, table, RunContext()).run()

    assert summary.status is RunStatus.SUCCEEDED, summary.error
    quarantine = spark.table(table.qualified("quarantine")).collect()
    got = {r["_raw"]: r["_reason"] for r in quarantine if r["_source_file"].endswith("/mixed.json")}
    assert got == reasons
    assert spark.table(table.full_name).count() == 2  # order 1 and 2
    ledger = {Path(r["path"]).name: r for r in spark.table(table.qualified("files")).collect()}
    assert ledger["mixed.json"]["error"] is None
    assert ledger["array.json"]["error"] == \
        "the file is one JSON array; bronze reads JSON Lines, one object per line"
    assert ledger["object.json"]["error"] == \
        "the file is one JSON object over several lines; bronze reads JSON Lines, one object " \
        "per line"
    # (each of their lines is quarantined, with the generic reason)
    assert ledger["array.json"]["quarantined_rows"] == len(array.splitlines())
