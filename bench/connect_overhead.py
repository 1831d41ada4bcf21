"""What Spark Connect costs on one machine: ``medallion demo`` run classic (``runtime: local``,
the driver in the command's process) and over Spark Connect (``runtime: connect``, the command
a client of a server on this machine, framework.connect_server), side by side in one run.

    python bench/connect_overhead.py [--orders 2400] [--files 30] [--rounds 1]

One server is started first, with a root of its own (its catalog and metastore; the tables
live under each run's root); its start-up time is reported on its own and is not part of the
comparison. Then each round runs the demo once each way, each in a fresh root, and the order
alternates from round to round (classic first in the first). A run is timed end to end: the
wall clock of its ``medallion demo`` process, from the feed's generation to the summary
(the demo's own ``duration_s``, the streaming runs only, is printed next to it). Both runs of
every round must report the same figures per layer and table (``layers`` in the summary), or
the benchmark stops with an error. The server runs ``local[2]`` with pyspark's default 1 GB
driver, the classic runs ``conf/environments/local.yaml`` as it is (``local[*]``, 4 GB).

The last line is one JSON object with the times and ``"ratio"`` = median classic seconds /
median Connect seconds. For information: no target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from framework.connect_server import ConnectServer, start
from framework.errors import SessionError
from framework.logging import LogFormat, configure_logging
from tests.support import REPO, medallion_cmd

SCHEMAS = ("bronze", "silver", "gold", "ops")


def connect_env(conf: Path, server: ConnectServer, round_no: int) -> None:
    """Point ``conf``'s environment ``connect`` at the server. The server's catalog outlives a
    round, so from the second round on the tables are registered in schemas of their own
    (``bronze_r2``...), as the first round's still point at its root."""
    env: dict[str, Any] = {"runtime": "connect", "root": "${MEDALLION_ROOT}",
                           "remote": server.url, "catalog": "spark_catalog",
                           "shuffle_partitions": 4}
    if round_no > 1:
        env["schemas"] = {s: f"{s}_r{round_no}" for s in SCHEMAS}
    (conf / "environments" / "connect.yaml").write_text(yaml.safe_dump(env, sort_keys=False),
                                                         encoding="utf-8")


def demo(conf: Path, env: str, root: Path, orders: int, files: int,
         server: ConnectServer) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one ``medallion demo`` in a fresh ``root``, and its summary."""
    summary = root.parent / f"{root.name}.json"
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("MEDALLION_", "SPARK_"))}
    environment.update(MEDALLION_ROOT=str(root), MEDALLION_CONF=str(conf))
    started = time.perf_counter()
    done = subprocess.run([*medallion_cmd(), "demo", "--env", env, "--orders", str(orders),
                           "--files", str(files), "--summary", str(summary)],
                          capture_output=True, text=True, env=environment, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0 or not summary.is_file():
        server_log = ""
        if env == "connect" and server.log.is_file():
            server_log = "\nthe server's log ends with:\n" + server.log.read_text(
                errors="replace")[-3000:]
        sys.exit(f"medallion demo --env {env} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}{server_log}")
    return wall, json.loads(summary.read_text())


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The layer tables whose figures differ, as ``layer.table: expected != actual``."""
    found = []
    for layer in sorted(set(expected) | set(actual)):
        mine, theirs = expected.get(layer, {}), actual.get(layer, {})
        for table in sorted(set(mine) | set(theirs)):
            if mine.get(table) != theirs.get(table):
                found.append(f"{layer}.{table}: {mine.get(table)} != {theirs.get(table)}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=2400)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    configure_logging(LogFormat.JSON, "warning")  # events to stderr; stdout is the report
    work = Path(tempfile.mkdtemp(prefix="bench-connect-"))
    conf = work / "conf"
    shutil.copytree(REPO / "conf", conf)
    seconds: dict[str, list[float]] = {"classic": [], "connect": []}
    server: ConnectServer | None = None
    try:
        started = time.perf_counter()
        try:
            server = start(str(work / "server"))
        except SessionError as exc:
            sys.exit(f"the Spark Connect server did not start: {exc}")
        server_start = time.perf_counter() - started
        print(f"connect server: started in {server_start:5.1f} s ({server.url})", flush=True)

        reference: dict[str, Any] | None = None
        for round_no in range(1, args.rounds + 1):
            connect_env(conf, server, round_no)
            order = ["classic", "connect"] if round_no % 2 else ["connect", "classic"]
            layers: dict[str, dict[str, Any]] = {}
            for side in order:
                env = "local" if side == "classic" else "connect"
                wall, summary = demo(conf, env, work / f"{side}-{round_no}", args.orders,
                                     args.files, server)
                seconds[side].append(wall)
                layers[side] = summary["layers"]
                print(f"round {round_no} {side:8s} {wall:6.1f} s in all, demo's runs "
                      f"{summary.get('duration_s', 0):6.1f} s, status {summary.get('status')}",
                      flush=True)
            reference = reference or layers["classic"]
            for side in order:
                diff = differences(reference, layers[side])
                if diff:
                    sys.exit(f"round {round_no}: the {side} run's layer figures differ from the "
                             "classic run's:\n  " + "\n  ".join(diff))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    classic, connect = (statistics.median(seconds[s]) for s in ("classic", "connect"))
    print(f"median: classic {classic:6.1f} s, connect {connect:6.1f} s; the layer figures "
          "agree", flush=True)
    print(json.dumps({
        "benchmark": "connect_overhead", "orders": args.orders, "files": args.files,
        "rounds": args.rounds,
        "classic_s": [round(s, 1) for s in seconds["classic"]],
        "connect_s": [round(s, 1) for s in seconds["connect"]],
        "server_start_s": round(server_start, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ratio": round(classic / connect, 3),
    }))


if __name__ == "__main__":
    main()
