"""What running independent tables at once gains: ``medallion demo`` with its tables run one
after another (``--parallel 1``) and at once (the default, or ``--parallel N``), side by side
in one run.

    python bench/parallel_run.py [--orders 50000] [--files 60] [--rounds 3] [--parallel N]

Each round runs the demo once each way, each in a fresh root with the repository's conf/ (the
local default), and the order alternates from round to round (one after another first in the
first). A run is timed by the demo's own ``duration_s``: its streaming runs, bronze to gold,
without the feed's generation and Spark's start (the wall clock of the whole process is
printed next to it). Both runs of every round must report the same figures per layer and
table (``layers`` in the summary), or the benchmark stops with an error.

The last line is one JSON object with the times and ``"ratio"`` = median seconds one after
another / median seconds at once.
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

from bench.connect_overhead import differences
from tests.support import REPO, medallion_cmd


def demo(root: Path, orders: int, files: int, parallel: int | None) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one ``medallion demo`` in a fresh ``root``, and its summary."""
    summary = root.parent / f"{root.name}.json"
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("MEDALLION_", "SPARK_"))}
    environment.update(MEDALLION_ROOT=str(root), MEDALLION_CONF=str(REPO / "conf"))
    args = ["--parallel", str(parallel)] if parallel else []
    started = time.perf_counter()
    done = subprocess.run([*medallion_cmd(), "demo", "--orders", str(orders), "--files",
                           str(files), "--summary", str(summary), *args],
                          capture_output=True, text=True, env=environment, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0 or not summary.is_file():
        sys.exit(f"medallion demo {' '.join(args)} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}")
    return wall, json.loads(summary.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=50_000)
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=None,
                        help="tables at once on the parallel side (default: the demo's default)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    sides = {"one by one": 1, "at once": args.parallel}
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    try:
        reference: dict[str, Any] | None = None
        for round_no in range(1, args.rounds + 1):
            order = list(sides) if round_no % 2 else list(reversed(sides))
            for side in order:
                root = work / f"{side.replace(' ', '-')}-{round_no}"
                wall, summary = demo(root, args.orders, args.files, sides[side])
                seconds[side].append(summary["duration_s"])
                print(f"round {round_no} {side:10s} runs {summary['duration_s']:6.1f} s "
                      f"({wall:6.1f} s in all), status {summary.get('status')}", flush=True)
                reference = reference or summary["layers"]
                diff = differences(reference, summary["layers"])
                if diff:
                    sys.exit(f"round {round_no}: the {side} run's layer figures differ from "
                             "the first run's:\n  " + "\n  ".join(diff))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    one, once = (statistics.median(seconds[s]) for s in sides)
    print(f"median: one by one {one:6.1f} s, at once {once:6.1f} s; the layer figures agree",
          flush=True)
    print(json.dumps({
        "benchmark": "parallel_run", "orders": args.orders, "files": args.files,
        "rounds": args.rounds, "parallel": args.parallel or "default",
        "one_by_one_s": [round(s, 1) for s in seconds["one by one"]],
        "at_once_s": [round(s, 1) for s in seconds["at once"]],
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ratio": round(one / once, 3),
    }))


if __name__ == "__main__":
    main()
