"""Hostile configuration: a seeded fuzzer mutates the shipped ``conf/`` and ``medallion
validate`` must answer every case cleanly. Hostile landing files (``--data``): each is
ingested or quarantined, as :mod:`bench.hostile_files` says it must be.

    python bench/fuzz.py [--cases 2000] [--seed 1]
    python bench/fuzz.py --data [--record-mb 200] [--depth 10000] [--tiny-files 100000]

A case copies ``conf/`` and applies one mutation to one file (a table's or the
environment's): a value of the wrong type, an unknown key, a deleted key, an absurd value
(negative, huge, empty, unicode, 100,000 characters, NUL, tabs), a YAML alias bomb, nesting
10,000 deep, tab indentation, random bytes, an empty file, or a second file declaring a table
name already taken. Then ``validate`` runs in this process (one case in ``SPARK_EVERY`` with
Spark's SQL parser, the others with ``--no-spark``), and the case is handled cleanly when:

* it exits 0 (the mutation left a valid configuration: an optional key deleted, a description
  in another script), or 2 with every problem naming a file of the configuration;
* it prints no Python traceback;
* it takes at most 30 s;

and over the whole run the process's peak memory grows by at most ``MAX_GROWTH_MB``.

With ``--data``, one ``medallion run bronze`` (a process of its own, ``--memory`` for Spark's
driver) ingests three feeds: JSON Lines with a one-line record of ``--record-mb`` (over the
default maximum record size, 16 MB), JSON nested ``--depth`` deep, random bytes, BOM, CRLF,
lone CR, NUL bytes and hostile names; RFC 4180 CSV; and ``--tiny-files`` files of one record.
A case is a hostile file (the tiny files are one): it is handled cleanly when the run succeeds
and its ledger row, its rows in bronze and in quarantine, its ids and its quarantine reasons
are the ones expected (records read = bronze + quarantine).

The last line is one JSON object: ``cases``, ``exit_codes`` (configurations) or the run's
figures (files: its seconds and the process's peak resident memory), ``failures`` (the first
ones, to replay) and ``ratio`` = cases handled cleanly / cases.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

REPO = Path(__file__).resolve().parents[1]
CASE_SECONDS = 30.0
MAX_GROWTH_MB = 300
ORDERS = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
SPARK_EVERY = 10  # cases per case that also parses the SQL with Spark (the others: --no-spark)

ABSURD: list[Any] = [-1, -10**18, 10**30, 0, "", " ", "\t", "é" * 10, "x" * 100_000, "\x00",
                     "💥", None, 1e308, True, [], {}, "${NO_SUCH_VARIABLE}", "../../etc",
                     "`; DROP TABLE x; --", "line\nbreak", "2 fortnights", "-5 minutes"]
TYPES: list[Any] = [7, 3.5, True, None, "text", ["a", "b"], {"k": "v"}, [[1]]]


def leaves(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value (mappings and lists included) under ``data``."""
    found = [path] if path else []
    if isinstance(data, dict):
        for k, v in data.items():
            found += leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found += leaves(v, (*path, i))
    return found


def value_at(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def parent_and_key(data: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    return value_at(data, path[:-1]), path[-1]


def bomb(levels: int = 12, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def mutate(rng: random.Random, conf: Path) -> str:
    """Apply one mutation to a copy of the configuration; what it did."""
    files = sorted([*(conf / "tables").rglob("*.yaml"), conf / "environments" / "local.yaml"])
    target = rng.choice(files)
    name = str(target.relative_to(conf))
    kind = rng.choice(["wrong_type", "unknown_key", "delete_key", "absurd", "absurd",
                       "bomb", "deep", "tabs", "bytes", "empty", "duplicate"])
    if kind == "bomb":
        target.write_text(bomb())
    elif kind == "deep":
        depth = 10_000
        target.write_text("key: " + "[" * depth + "]" * depth + "\n")
    elif kind == "bytes":
        target.write_bytes(rng.randbytes(rng.randint(1, 2000)))
    elif kind == "empty":
        target.write_text("")
    elif kind == "tabs":
        target.write_text("\n".join("\t" + line if line.startswith(" ") else line
                                    for line in target.read_text().splitlines()))
    elif kind == "duplicate":
        tables = [f for f in files if "tables" in f.parts]
        original = rng.choice(tables)
        data = yaml.safe_load(original.read_text()) or {}
        data["name"] = original.stem
        copy = original.with_name(f"{original.stem}_copy.yaml")
        copy.write_text(yaml.safe_dump(data, allow_unicode=True))
        name = str(copy.relative_to(conf))
    else:
        data = yaml.safe_load(target.read_text()) or {}
        paths = leaves(data)
        if kind == "unknown_key" or not paths:
            mappings = [v for p in paths if isinstance(v := value_at(data, p), dict)]
            where: Any = data
            if mappings and rng.random() < 0.5:
                where = rng.choice(mappings)
            where[rng.choice(["wat", "Source", "sourse", "ünïcode", "x" * 300, "1"])] = 1
            kind = "unknown_key"
        else:
            path = rng.choice(paths)
            parent, key = parent_and_key(data, path)
            if kind == "delete_key":
                del parent[key]
            elif kind == "wrong_type":
                parent[key] = rng.choice([t for t in TYPES if type(t) is not type(parent[key])])
            else:
                parent[key] = rng.choice(ABSURD)
            name += ":" + ".".join(str(p) for p in path)
        target.write_text(yaml.safe_dump(data, allow_unicode=True))
    return f"{kind} {name}"


def run_case(conf: Path, env: str, spark: bool) -> tuple[int, str, float]:
    from framework.cli import main

    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", "--conf", str(conf), "--env", env,
                     *([] if spark else ["--no-spark"])])
    return code, out.getvalue() + err.getvalue(), time.perf_counter() - began


def judge(code: int, output: str, seconds: float, conf: Path) -> str | None:
    """Why the answer is not clean, or None."""
    if "Traceback" in output:
        return "printed a traceback"
    if seconds > CASE_SECONDS:
        return f"took {seconds:.1f} s"
    if code == 0:
        return None
    if code != 2:
        return f"exit {code}: {output.strip().splitlines()[-1][:300] if output.strip() else ''}"
    problems = [line for line in output.splitlines() if line.startswith("  - [")]
    if not problems:
        return f"exit 2 without a list of problems: {output.strip()[:300]}"
    unnamed = [p for p in problems if str(conf) not in p]
    return f"a problem names no file: {unnamed[0][:300]}" if unnamed else None


def fuzz(cases: int, seed: int, work: Path, spark_every: int = SPARK_EVERY) -> dict[str, Any]:
    """Run ``cases`` cases; every ``spark_every``-th validates the SQL with Spark's parser
    too (the session is started before the first case: its start-up is not a case's)."""
    from framework.sqlcheck import parser_session

    parser_session()
    rng = random.Random(seed)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    codes: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    slowest = 0.0
    for case in range(cases):
        conf = work / f"case-{case}"
        shutil.copytree(REPO / "conf", conf)
        what = mutate(rng, conf)
        kinds[what.split()[0]] += 1
        code, output, seconds = run_case(conf, "local", spark=case % spark_every == 0)
        slowest = max(slowest, seconds)
        codes[code] += 1
        why = judge(code, output, seconds, conf)
        if why is not None:
            failures.append({"case": case, "seed": seed, "mutation": what, "why": why})
        shutil.rmtree(conf, ignore_errors=True)
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    clean = cases - len(failures)
    if growth > MAX_GROWTH_MB:
        clean = 0
        failures.append({"why": f"peak memory grew by {growth:.0f} MB, over {MAX_GROWTH_MB}"})
    return {"cases": cases, "seed": seed, "mutations": dict(sorted(kinds.items())),
            "exit_codes": {str(k): v for k, v in sorted(codes.items())},
            "slowest_case_s": round(slowest, 2), "memory_growth_mb": round(growth, 1),
            "failures": failures[:20], "failed": len(failures),
            "ratio": round(clean / cases, 4) if cases else 0.0}


def group_rss_mb(pgid: int) -> float:
    """The resident memory of process group ``pgid`` (Linux), in MB."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == pgid:  # the fields after the name: state, ppid, pgrp...
            total += int(fields[21]) * resource.getpagesize()  # rss, in pages
    return total / 2**20


def fuzz_data(work: Path, seed: int, record_mb: int, depth: int, tiny_files: int,
              memory: str) -> dict[str, Any]:
    """The hostile files (:mod:`bench.hostile_files`) in three feeds, ingested by one
    ``medallion run bronze`` in a process of its own (Spark's driver, which is the executor in
    local mode, with ``memory``), then checked in this one. A case is a hostile file (the
    tiny files are one case)."""
    from bench.hostile_files import (
        CSV_SCHEMA,
        check,
        write_csv_feed,
        write_json_feed,
        write_tiny_feed,
    )
    from framework.config.loader import load_project

    conf, root = work / "conf", work / "lake"
    big = record_mb * 1024 * 1024
    tables = {"hostile": {"path": "landing/hostile", "format": "json", "schema": ORDERS},
              "hostile_csv": {"path": "landing/hostile_csv", "format": "csv",
                              "schema": CSV_SCHEMA},
              "tiny": {"path": "landing/tiny", "format": "json", "schema": ORDERS}}
    for name, source in tables.items():
        spec = {"description": f"hostile files: {name}", "source": source}
        (conf / "tables" / "bronze").mkdir(parents=True, exist_ok=True)
        (conf / "tables" / "bronze" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    (conf / "environments").mkdir(parents=True)
    (conf / "environments" / "fuzz.yaml").write_text(yaml.safe_dump({
        "runtime": "local", "root": str(root), "master": "local[2]", "shuffle_partitions": 2,
        "spark_conf": {"spark.ui.enabled": "false", "spark.driver.memory": memory}}))
    began = time.perf_counter()
    feeds = {"hostile": (write_json_feed(root / "landing" / "hostile", random.Random(seed),
                                         big_bytes=big, depth=depth), "order_id"),
             "hostile_csv": (write_csv_feed(root / "landing" / "hostile_csv", big_bytes=big),
                             "id"),
             "tiny": (write_tiny_feed(root / "landing" / "tiny", tiny_files), "order_id")}
    written = time.perf_counter() - began
    summary_path = work / "summary.json"
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "medallion"), "run", "bronze", "--conf",
             str(conf), "--env", "fuzz", "--log-level", "error", "--summary",
             str(summary_path)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        peak_mb = 0.0
        while process.poll() is None:  # the process group's resident memory (the JVM too)
            peak_mb = max(peak_mb, group_rss_mb(process.pid))
            time.sleep(0.5)
        out.seek(0)
        output = out.read().decode(errors="replace")
    seconds = time.perf_counter() - began
    runs = {t["table"].rsplit(".", 1)[-1]: t
            for t in json.loads(summary_path.read_text())["tables"]} \
        if summary_path.exists() else {}
    from framework.config.model import Environment, Runtime
    from framework.session import get_spark

    spark = get_spark(Environment(name="check", runtime=Runtime.LOCAL, root=str(root),
                                  master="local[2]", shuffle_partitions=2),
                      "fuzz-check", {"spark.ui.enabled": "false"})
    project = load_project(conf, "fuzz")
    problems: dict[str, str] = {}
    cases = failed = 0
    for name, (feed, id_column) in feeds.items():
        cases += len(feed.expected)
        run = runs.get(name, {"status": "missing", "error": output[-2000:]})
        found = check(spark, feed, project.table(name), id_column,
                      SimpleNamespace(status=run["status"], error=run.get("error")))
        failed += len(feed.expected) if "run" in found else len(found)  # a failed run: all
        problems |= {f"{name}/{k}": v for k, v in found.items()}
    return {"cases": cases, "seed": seed, "record_mb": record_mb, "depth": depth,
            "tiny_files": tiny_files, "driver_memory": memory,
            "executor_memory": f"{memory} (local mode: the driver runs the tasks)",
            "peak_rss_mb": round(peak_mb), "write_s": round(written, 1),
            "ingest_s": round(seconds, 1), "exit_code": process.returncode,
            "failures": [{"case": k, "why": v} for k, v in list(problems.items())[:20]],
            "failed": failed, "ratio": round((cases - failed) / cases, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", action="store_true",
                        help="hostile landing files instead of configurations")
    parser.add_argument("--record-mb", type=int, default=200,
                        help="--data: the size of the one-line record")
    parser.add_argument("--depth", type=int, default=10_000, help="--data: JSON nesting")
    parser.add_argument("--tiny-files", type=int, default=100_000)
    parser.add_argument("--memory", default="4g", help="--data: spark.driver.memory (a 200 "
                        "MB line needs 4g: see bronze/reading.py)")
    args = parser.parse_args()
    from framework.logging import configure_logging

    configure_logging("json", "error")
    with tempfile.TemporaryDirectory(prefix="fuzz-") as work:
        if args.data:
            result = fuzz_data(Path(work), args.seed, args.record_mb, args.depth,
                               args.tiny_files, args.memory)
        else:
            result = fuzz(args.cases, args.seed, Path(work))
    for f in result["failures"]:
        print(f"  {f}", flush=True)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
