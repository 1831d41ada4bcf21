"""What Spark's masking of secrets in query plans costs, with the framework's pattern and with
the same pattern without its lookahead (:data:`framework.redaction.SPARK_STRING_REDACTION_REGEX`).

Spark applies ``spark.sql.redaction.string.regex`` to the text of every query's plan: once as
the query starts, again at each adaptive re-planning. In a real local session, the plans of a
few queries the framework runs (a Delta table read, filtered and aggregated, a join, a read of
its change data feed, a MERGE) are rendered (``explainString``) over and over with the pattern
set three ways, in turns: the framework's, without the lookahead, and none. Rendering without
a pattern is the base; the rest is the masking. The masked texts must be equal both ways (one
plan holds a secret of each format).

    python bench/plan_redaction.py [--rounds 40] [--commits 12]

The last line is one JSON object; ``ratio`` is the masking's time without the lookahead over
its time with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.config.model import Environment, Runtime
from framework.redaction import PLAN_SECRET_LOOKAHEAD, SPARK_STRING_REDACTION_REGEX
from framework.session import get_spark

PATTERNS = {"lookahead": SPARK_STRING_REDACTION_REGEX,
            "no lookahead": SPARK_STRING_REDACTION_REGEX.replace(PLAN_SECRET_LOOKAHEAD, ""),
            "none": ""}
KEY = "spark.sql.redaction.string.regex"
SECRETS = ("AccountKey=k3y1; SharedAccessSignature=s1g2 https://h/p?sv=1&sig=s1g3 "
           "Bearer t0k4 client_secret=s3c5 pwd=p6")


def plans(spark: Any, root: Path, commits: int) -> dict[str, Any]:
    """The executed query plans (JVM ``QueryExecution``) of a few queries over a Delta table
    of ``commits`` appends, with the columns bronze adds to a feed's."""
    from pyspark.sql import functions as F

    table = str(root / "orders")
    for c in range(commits):
        (spark.range(c * 100, c * 100 + 100)
         .select(F.format_string("o%07d", "id").alias("order_id"),
                 (F.col("id") % 17).cast("string").alias("customer_id"),
                 (F.col("id") % 9 + 1).cast("int").alias("quantity"),
                 F.current_timestamp().alias("event_time"),
                 F.lit(f"file:{root}/landing/orders/part-{c}.json").alias("_source_file"),
                 F.current_timestamp().alias("_ingested_at"), F.lit(c).alias("_batch_id"))
         .write.format("delta").mode("append")
         .option("delta.enableChangeDataFeed", "true").save(table))
    orders = spark.read.format("delta").load(table)
    queries = {
        "aggregate": orders.where("quantity > 2").groupBy("customer_id")
        .agg(F.sum("quantity").alias("items"), F.count("*").alias("orders")),
        "join": orders.alias("a").join(orders.alias("b"), "order_id")
        .where(F.col("a._batch_id") < F.col("b._batch_id") + 3),
        "change feed": spark.read.format("delta").option("readChangeFeed", "true")
        .option("startingVersion", commits - 2).option("endingVersion", commits - 1)
        .load(table).groupBy("_source_file").count(),
        "secrets": orders.where(F.col("customer_id") != F.lit(SECRETS)),
    }
    for df in queries.values():
        df.collect()  # planned and run: the plan adaptive execution settled on
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT * FROM delta.`{table}` "
              "WHERE _batch_id = 0) s ON t.order_id = s.order_id "
              "WHEN MATCHED THEN UPDATE SET quantity = s.quantity + 1")
    merged = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1")
    merged.collect()
    executions = {name: df._jdf.queryExecution() for name, df in queries.items()}
    executions["history"] = merged._jdf.queryExecution()
    return executions


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--commits", type=int, default=12)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = Environment(name="bench", runtime=Runtime.LOCAL, root=str(root),
                          master="local[2]", shuffle_partitions=2)
        spark = get_spark(env, "plan-redaction", {"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        executions = plans(spark, root, args.commits)
        jvm = spark._jvm
        mode = jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted")
        seconds = {name: 0.0 for name in PATTERNS}
        texts: dict[str, dict[str, str]] = {name: {} for name in PATTERNS}
        for r in range(args.rounds + 2):  # two rounds to warm up, then timed
            for name, pattern in PATTERNS.items():
                if pattern:
                    spark.conf.set(KEY, pattern)
                else:  # (an empty pattern would match everywhere)
                    spark.conf.unset(KEY)
                started = time.perf_counter()
                for plan, qe in executions.items():
                    texts[name][plan] = qe.explainString(mode)
                if r >= 2:
                    seconds[name] += time.perf_counter() - started
        spark.conf.set(KEY, SPARK_STRING_REDACTION_REGEX)
        spark.stop()
    same = texts["lookahead"] == texts["no lookahead"]
    masked = "*********(redacted)" in texts["lookahead"]["secrets"] and not any(
        s in texts["lookahead"]["secrets"] for s in ("k3y1", "s1g2", "s1g3", "t0k4", "s3c5"))
    calls = args.rounds * len(executions)
    masking = {name: (seconds[name] - seconds["none"]) / calls * 1000
               for name in ("lookahead", "no lookahead")}
    for name in PATTERNS:
        print(f"{name:>13}: {seconds[name] / calls * 1000:7.2f} ms per plan rendered")
    chars = sum(len(t) for t in texts["none"].values()) // len(executions)
    print(f"plans: {len(executions)} of {chars:,} characters on average; masking "
          f"{masking['no lookahead']:.2f} ms without the lookahead, "
          f"{masking['lookahead']:.2f} ms with it; masked texts equal: {same}")
    result = {"plans": len(executions), "rounds": args.rounds, "average_chars": chars,
              "ms_per_plan": {n: round(seconds[n] / calls * 1000, 3) for n in PATTERNS},
              "masking_ms": {n: round(v, 3) for n, v in masking.items()},
              "same_text": same, "secrets_masked": masked,
              "ratio": round(masking["no lookahead"] / masking["lookahead"], 2)
              if same and masked and masking["lookahead"] > 0 else 0.0}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
