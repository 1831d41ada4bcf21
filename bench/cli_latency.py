"""How long a person waits for ``medallion status`` and ``medallion sql`` on a demo lake, and
what a bare pyspark session takes for the same query on the same catalog.

    python bench/cli_latency.py [--root PATH] [--orders 2400] [--files 30] [--rounds 3]
                                [--query SQL]

Without ``--root`` a demo lake is made first (``medallion demo``, the repository's conf/,
environment ``local``) in a folder of its own; with it, the lake ``medallion demo`` made there
is read (``MEDALLION_ROOT=PATH``). Then each round times three processes, wall clock from start
to exit, in an order that rotates from round to round:

- ``medallion status``: the tables' logs, checkpoints and landing, read without Spark;
- ``medallion sql QUERY``: the framework's local session (Delta, the Derby metastore under the
  root), the query, its rows printed;
- a bare pyspark script: a SparkSession built with the same settings (framework.session's
  ``local_settings``, the same cached Delta jars), ``spark.sql(QUERY).collect()``; no
  framework code in that process.

Then ``medallion serve`` is started on the lake and ``medallion sql QUERY`` timed again
``--rounds`` times while it runs: the query goes to the server, no Spark starts in the
command (``sql_served_s``, the target: under 2 s).

Every process must exit 0, or the benchmark stops with its output. The last line is one JSON
object: the medians ``status_s``, ``sql_s``, ``bare_sql_s``, ``sql_served_s``, ``sql_ratio``
= sql / bare (the target: at most 1.3) and ``ratio`` = bare / sql (the repository's
convention: higher is better). The target for ``status_s``: at most 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import REPO, medallion_cmd

QUERY = "SELECT count(*) AS orders, sum(amount) AS amount FROM silver.orders"

# The bare session: the settings, jars and master the framework would use, handed over as
# JSON; nothing of the framework is imported in the process that runs it.
BARE = """\
import json, sys
from pyspark.sql import SparkSession

given = json.load(open(sys.argv[1]))
builder = SparkSession.builder.master(given["master"]).appName("bench-bare-sql")
for key, value in given["settings"].items():
    builder = builder.config(key, value)
if given["jars"]:
    builder = builder.config("spark.jars", ",".join(given["jars"]))
else:
    from delta import configure_spark_with_delta_pip
    builder = configure_spark_with_delta_pip(builder)
spark = builder.getOrCreate()
rows = spark.sql(sys.argv[2]).collect()
print(len(rows), rows[:3])
spark.stop()
"""


def environment(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MEDALLION_", "SPARK_", "PYSPARK_"))}
    env.update(MEDALLION_ROOT=str(root), MEDALLION_CONF=str(REPO / "conf"),
               MEDALLION_ENV="local", PYTHONPATH=str(REPO))
    return env


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of ``command``, which must exit 0."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800,
                          cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}")
    return wall


def served(sql: list[str], env: dict[str, str], rounds: int) -> list[float]:
    """Wall seconds of ``sql`` while ``medallion serve`` holds the lake, ``rounds`` times."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*medallion_cmd(), "serve", "--port", str(port)], env=env,
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        if "jdbc:hive2://" not in banner:
            sys.exit(f"medallion serve did not start: {banner!r}")
        return [timed(sql, env) for _ in range(rounds)]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def bare_settings(root: Path, work: Path) -> Path:
    """The local session's settings for the lake at ``root``, as a JSON file for BARE."""
    os.environ["MEDALLION_ROOT"] = str(root)
    from framework.config.loader import load_project
    from framework.session import cached_jars, local_settings

    env = load_project(REPO / "conf", "local").env
    settings, _ = local_settings(env)  # (its Java options: Derby's home, the quiet log)
    path = work / "bare.json"
    path.write_text(json.dumps({"master": env.master, "settings": settings,
                                "jars": cached_jars()}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="a lake made by 'medallion demo' (default: "
                        "make one)")
    parser.add_argument("--orders", type=int, default=2400)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--query", default=QUERY)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="bench-cli-latency-"))
    try:
        root = args.root.resolve() if args.root else work / "lake"
        env = environment(root)
        if args.root is None:
            demo = timed([*medallion_cmd(), "demo", "--orders", str(args.orders), "--files",
                          str(args.files)], env)
            print(f"demo lake made in {demo:6.1f} s ({root})", flush=True)
        bare = bare_settings(root, work)
        commands = {
            "status": [*medallion_cmd(), "status"],
            "sql": [*medallion_cmd(), "sql", args.query],
            "bare_sql": [sys.executable, "-c", BARE, str(bare), args.query],
        }
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for round_no in range(1, args.rounds + 1):
            shift = (round_no - 1) % len(names)
            for name in names[shift:] + names[:shift]:
                seconds[name].append(timed(commands[name], env))
            print(f"round {round_no}: " + ", ".join(
                f"{name} {seconds[name][-1]:5.2f} s" for name in names), flush=True)
        seconds["sql_served"] = served(commands["sql"], env, args.rounds)
        print("sql through a running serve: " + ", ".join(
            f"{s:5.2f} s" for s in seconds["sql_served"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    median = {name: statistics.median(times) for name, times in seconds.items()}
    print(f"median: status {median['status']:5.2f} s, sql {median['sql']:5.2f} s, bare pyspark "
          f"sql {median['bare_sql']:5.2f} s", flush=True)
    print(json.dumps({
        "benchmark": "cli_latency", "rounds": args.rounds, "query": args.query,
        **{f"{name}_s_all": [round(s, 2) for s in times] for name, times in seconds.items()},
        "status_s": round(median["status"], 2), "sql_s": round(median["sql"], 2),
        "bare_sql_s": round(median["bare_sql"], 2),
        "sql_served_s": round(median["sql_served"], 2),
        "sql_ratio": round(median["sql"] / median["bare_sql"], 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ratio": round(median["bare_sql"] / median["sql"], 3),
    }))


if __name__ == "__main__":
    main()
