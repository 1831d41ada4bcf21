"""Crash consistency: kill the driver at seeded random moments, restart, and compare the lake
with a clean run of the same feed.

    python bench/chaos.py --kills 20 --seed 1 [--orders 3000] [--files 30]

The demo's generator writes one dirty feed (duplicates, re-deliveries, malformed lines, an
unreadable file), copied into two fresh roots. The clean root is run once with
``medallion run all`` (availableNow). The chaos root is run the same way as its own process
group, which is killed with SIGKILL at a moment drawn uniformly over the clean run's duration
(seeded), and started again, until ``--kills`` kills have landed; then it runs to the end. The
job's last event before each kill is recorded, to show which phase the kill hit.

Then the two roots must hold the same lake:

* every Delta table (bronze, its quarantine and file ledger, silver, gold) row for row, with
  chispa, leaving out the columns that record when a row was ingested and where the root is;
* landing drained, and the same files archived and quarantined.

Any difference is printed with the seed and the kill times, so it can be replayed. The last
line is one JSON object: ``kills``, ``restarts``, ``lost``, ``duplicated``,
``mismatched_tables`` and ``ratio`` = kills survived / kills (all of them when the lake
matches, none when it does not).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Columns whose values depend on when a row was ingested or on the root's path.
VOLATILE = {"_ingested_at", "_source_file", "_quarantined_at", "ingested_at", "updated_at",
            "path", "location", "_commit_version", "_commit_timestamp"}


def write_conf(work: Path, name: str, root: Path) -> None:
    conf = work / "conf"
    if not (conf / "tables").exists():
        shutil.copytree(REPO / "conf" / "tables", conf / "tables")
    (conf / "environments").mkdir(parents=True, exist_ok=True)
    (conf / "environments" / f"{name}.yaml").write_text(yaml.safe_dump({
        "runtime": "local", "root": str(root), "master": "local[2]", "shuffle_partitions": 2,
        "schemas": {"bronze": f"bronze_{name}", "silver": f"silver_{name}",
                    "gold": f"gold_{name}"},
        "spark_conf": {"spark.ui.enabled": "false", "spark.driver.memory": "2g"}}))


def start(work: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = work / f"{name}-{time.time_ns()}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(BIN / "medallion"), "run", "all", "--conf", str(work / "conf"), "--env", name,
             "--log-format", "json"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return process, log


def last_event(log: Path) -> str:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            return f"{event.get('table', '')} {event.get('event', '')}".strip()
    return "(before the first event)"


def files_under(folder: Path, names: set[str]) -> list[str]:
    """The feed's files under ``folder`` (not the archive's own manifests)."""
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name in names)


def compare(spark: Any, clean: Path, chaos: Path, names: set[str]
            ) -> tuple[list[str], int, int]:
    """Mismatched tables and folders, and bronze orders rows lost and duplicated: per order
    id, fewer or more rows than the clean run has (the feed repeats some on purpose)."""
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    mismatched = []
    tables = sorted(p.parent.relative_to(clean / "tables")
                    for p in (clean / "tables").rglob("_delta_log"))
    for table in tables:
        a = spark.read.format("delta").load(str(clean / "tables" / table))
        try:
            b = spark.read.format("delta").load(str(chaos / "tables" / table))
            keep = [c for c in a.columns if c not in VOLATILE]
            assert_df_equality(b.select(keep).orderBy(*keep), a.select(keep).orderBy(*keep),
                               ignore_nullable=True)
        except Exception as exc:  # any difference, or a table missing
            print(f"  mismatch in {table}: {str(exc).splitlines()[0][:300]}", flush=True)
            mismatched.append(str(table))
    def per_id(root: Path) -> Any:
        bronze = spark.read.format("delta").load(str(root / "tables" / "bronze" / "orders"))
        return bronze.groupBy("order_id").count()

    both = per_id(clean).withColumnRenamed("count", "want").join(
        per_id(chaos).withColumnRenamed("count", "have"), "order_id", "full_outer"
    ).fillna(0, ["want", "have"])
    totals = both.agg(F.sum(F.greatest(F.col("want") - F.col("have"), F.lit(0))).alias("lost"),
                      F.sum(F.greatest(F.col("have") - F.col("want"), F.lit(0))).alias("dup")
                      ).first()
    for folder in ("landing", "archive", "_quarantine"):
        want, have = files_under(clean / folder, names), files_under(chaos / folder, names)
        if want != have:
            print(f"  mismatch in {folder}/: {sorted(set(have) ^ set(want))[:10]}", flush=True)
            mismatched.append(folder)
    return mismatched, int(totals["lost"] or 0), int(totals["dup"] or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    work = Path(tempfile.mkdtemp(prefix=f"chaos-{args.seed}-"))
    clean, chaos, feed = work / "clean", work / "chaos", work / "feed"
    for name, root in (("clean", clean), ("chaos", chaos), ("feed", feed)):
        write_conf(work, name, root)
    from framework.cli import main as medallion

    if medallion(["demo", "--generate-only", "--orders", str(args.orders), "--files",
                  str(args.files), "--conf", str(work / "conf"), "--env", "feed",
                  "--log-level", "error"]) != 0:
        sys.exit("the feed could not be generated")
    for root in (clean, chaos):
        shutil.copytree(feed / "landing", root / "landing")  # copies keep the files' times

    began = time.perf_counter()
    process, log = start(work, "clean")
    if process.wait() != 0:
        sys.exit(f"the clean run failed: {log}")
    duration = time.perf_counter() - began
    print(f"clean run: {duration:.1f} s", flush=True)

    kills: list[dict[str, Any]] = []
    restarts = 0
    while len(kills) < args.kills:
        at = rng.uniform(0.5, duration)
        process, log = start(work, "chaos")
        restarts += 1
        try:
            process.wait(timeout=at)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            kills.append({"at_s": round(at, 1), "last_event": last_event(log)})
            print(f"kill {len(kills)} at {at:.1f} s, after: {kills[-1]['last_event']}",
                  flush=True)
            continue
        if process.returncode != 0:
            print(f"a restart failed (exit {process.returncode}): {log}", flush=True)
        else:  # it finished before the kill: the lake is complete; start over on a new feed
            print(f"run {restarts} finished before the kill at {at:.1f} s", flush=True)
            break
    for _ in range(3):
        process, log = start(work, "chaos")
        restarts += 1
        if process.wait() == 0:
            break
        print(f"a final run failed (exit {process.returncode}): {log}", flush=True)

    from framework.config.model import Environment, Runtime
    from framework.session import get_spark

    spark = get_spark(Environment(name="compare", runtime=Runtime.LOCAL, root=str(work / "cmp"),
                                  master="local[2]", shuffle_partitions=2),
                      "chaos-compare", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    names = {p.name for p in (feed / "landing").rglob("*") if p.is_file()}
    mismatched, lost, duplicated = compare(spark, clean, chaos, names)
    survived = len(kills) if not (mismatched or lost or duplicated) else 0
    if survived < len(kills):
        print(f"FAILED with seed {args.seed}; kills at {[k['at_s'] for k in kills]} s; "
              f"work folder {work}", flush=True)
    elif not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"seed": args.seed, "kills": len(kills), "restarts": restarts,
                      "lost": lost, "duplicated": duplicated, "mismatched_tables": mismatched,
                      "kill_points": kills, "ratio": survived / len(kills) if kills else 0.0}))


if __name__ == "__main__":
    main()
