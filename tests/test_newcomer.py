"""A new feed to a gold table, as someone new to the project goes: in a fresh folder with the
shipped environments, sample files of a feed the project does not ship (daily stock prices,
CSV), then the commands a person types, each a process of its own: ``new`` (bronze, silver and
a monthly gold aggregate), a small edit of the gold spec, ``validate``, ``test`` (passing, then
failing on an expected row changed), ``land``, ``run all`` and ``sql``, whose
monthly figures are the ones computed here from the samples."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support import REPO, medallion_cmd

HEADER = "symbol,traded_at,open,close,volume"
SAMPLES = {  # three files, a trading day's close of two symbols, over January and February
    "prices-1.csv": ["ACME,2026-01-05 16:00:00,10.0,10.5,1200",
                     "BOLT,2026-01-05 16:00:00,20.0,19.0,800",
                     "ACME,2026-01-06 16:00:00,10.5,11.5,1500"],
    "prices-2.csv": ["BOLT,2026-01-06 16:00:00,19.0,21.0,950",
                     "ACME,2026-02-02 16:00:00,11.5,12.0,1100",
                     "BOLT,2026-02-02 16:00:00,21.0,22.0,700"],
    "prices-3.csv": ["ACME,2026-02-03 16:00:00,12.0,12.5,1300",
                     "BOLT,2026-02-03 16:00:00,22.0,23.0,900",
                     "ACME,2026-02-04 16:00:00,12.5,13.0,1000"],
}
# the edit: the aggregate new proposed (the sum of the first number) becomes the mean close
PROPOSED = '  - {name: total_open, expr: "sum(open)", comment: Sum of open}\n'
EDITED = '  - {name: avg_close, expr: "avg(close)", comment: Mean closing price}\n'


def monthly(rows: list[str]) -> list[tuple[str, str, int, float]]:
    """Per month (its first day) and symbol: the trading days and the mean close."""
    closes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        symbol, traded_at, _, close, _ = row.split(",")
        closes[(traded_at[:7] + "-01", symbol)].append(float(close))
    return [(month, symbol, len(c), sum(c) / len(c))
            for (month, symbol), c in sorted(closes.items())]


@pytest.mark.slow
def test_a_new_feed_reaches_a_monthly_gold_table(tmp_path: Path) -> None:
    shutil.copytree(REPO / "conf" / "environments", tmp_path / "conf" / "environments")
    samples = tmp_path / "samples"
    samples.mkdir()
    for name, rows in SAMPLES.items():
        (samples / name).write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEDALLION_")},
           "PYTHONPATH": str(REPO)}

    def medallion(*args: str, code: int = 0) -> str:
        done = subprocess.run([*medallion_cmd(), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == code, \
            f"medallion {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout

    # 1. the specs from the samples: bronze, silver keyed by symbol and time, gold per month
    out = medallion("new", "prices", "--from", "samples", "--gold", "month")
    conf = tmp_path / "conf"
    gold_spec = conf / "tables" / "gold" / "prices_monthly.yaml"
    assert f"ready: {tmp_path / 'lakehouse' / 'landing' / 'prices'}" in out.splitlines()
    assert "configuration valid" in out and "warning:" not in out, out
    silver = (conf / "tables" / "silver" / "prices.yaml").read_text(encoding="utf-8")
    assert 'dedup: {keys: [symbol, traded_at], delay: "1 day"}' in silver
    gold = gold_spec.read_text(encoding="utf-8")
    assert "window: {type: calendar, unit: month}\n" in gold
    assert "group_by: [symbol]" in gold

    # 2. the edit: the mean closing price instead of the sum of the opening ones
    assert gold.count(PROPOSED) == 1, gold
    gold_spec.write_text(gold.replace(PROPOSED, EDITED), encoding="utf-8")
    out = medallion("validate")
    assert "gold: spark_catalog.gold.prices_monthly" in out
    assert "warning:" not in out, out  # the landing folder exists: new made it

    # 3. the case new wrote passes; an expected value changed fails, naming the row's key
    assert medallion("test").splitlines() == ["PASS silver.prices/sample (3 rows)",
                                              "1 passed, 0 failed"]
    expected = conf / "tests" / "silver.prices" / "sample" / "expected.jsonl"
    as_written = expected.read_text(encoding="utf-8")
    first, *rest = as_written.splitlines(keepends=True)
    row = json.loads(first)
    expected.write_text(json.dumps({**row, "close": row["close"] + 1}) + "\n" + "".join(rest),
                        encoding="utf-8")
    lines = medallion("test", code=1).splitlines()
    assert lines[0] == "FAIL silver.prices/sample" and lines[-1] == "0 passed, 1 failed", lines
    assert re.fullmatch(rf"  symbol={row['symbol']}, traded_at=\S+ \S+: close expected "
                        rf"{row['close'] + 1}, found {row['close']}", lines[1]), lines
    assert len(lines) == 3, lines
    expected.write_text(as_written, encoding="utf-8")

    # 4. the samples landed and run through every layer
    medallion("land", "prices", *(f"samples/{name}" for name in SAMPLES))
    medallion("run", "all")

    # 5. the monthly figures, as computed from the samples
    out = medallion("sql", "SELECT window_date, symbol, row_count, avg_close "
                    "FROM gold.prices_monthly ORDER BY window_date, symbol", "--json")
    found = [(r["window_date"], r["symbol"], r["row_count"], r["avg_close"])
             for r in map(json.loads, out.splitlines())]
    want = monthly([row for rows in SAMPLES.values() for row in rows])
    assert found == want
    assert want == [("2026-01-01", "ACME", 2, 11.0), ("2026-01-01", "BOLT", 2, 20.0),
                    ("2026-02-01", "ACME", 3, 12.5), ("2026-02-01", "BOLT", 2, 22.5)]
