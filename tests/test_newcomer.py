"""A new feed to a gold table, as someone new to the project goes: the README's "Your first
feed", run as it is written on a fresh folder with the shipped environments (three sample files
of daily stock prices, a feed the project does not ship; ``new`` with bronze, silver and a
monthly gold aggregate; the gold spec as the page edits it; ``validate``; ``test``; ``land``;
``run all``; ``sql``), each command a process of its own. Between the page's steps the test
looks at what a person would: what ``new`` wrote, and ``test`` failing on an expected row
changed, with the row's key and both values. The monthly figures ``sql`` prints are the ones
computed here from the samples the page writes."""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.pages import Block, run_as_written, section
from tests.support import REPO, medallion_cmd, user_env

README = REPO / "README.md"
# the first feed ends where the next section, on the demo's checks and quarantine, begins
CHECKS = "## Checks, and the quarantine's rows sent again"
# the aggregate new proposes (the sum of the first number), which the page's edit replaces
PROPOSED = '  - {name: total_open, expr: "sum(open)", comment: Sum of open}\n'
ROW = re.compile(r"^(2026-\d\d-01)\s*\|\s*(\w+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)$", re.MULTILINE)


def monthly(rows: list[str]) -> list[tuple[str, str, str, str]]:
    """Per month (its first day) and symbol: the trading days and the mean close, as ``sql``
    prints them."""
    closes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        symbol, traded_at, _, close, _ = row.split(",")
        closes[(traded_at[:7] + "-01", symbol)].append(float(close))
    return [(month, symbol, str(len(c)), str(sum(c) / len(c)))
            for (month, symbol), c in sorted(closes.items())]


def sample_rows(blocks: list[Block]) -> list[str]:
    """The rows of the sample files the page's heredocs write (headers left out)."""
    return [line for block in blocks if block.lang == "bash"
            for line in block.text.splitlines()
            if re.match(r"^[A-Z]+,2026-", line)]


@pytest.mark.slow
def test_the_readme_first_feed_reaches_a_monthly_gold_table(tmp_path: Path) -> None:
    blocks = section(README, "## Your first feed", CHECKS, "yaml", "bash", "text")
    env = user_env(PYTHONPATH=str(REPO))
    conf = tmp_path / "conf"
    seen: list[str] = []

    def medallion(*args: str, code: int) -> str:
        done = subprocess.run([*medallion_cmd(), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == code, \
            f"medallion {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout

    def after(block: Block, out: str) -> None:
        if " new prices " in block.text:
            seen.append("new")
            # the specs from the samples: silver keyed by symbol and time, gold per month
            assert f"ready: {tmp_path / 'lakehouse' / 'landing' / 'prices'}" in out.splitlines()
            assert "configuration valid" in out and "warning:" not in out, out
            silver = (conf / "tables" / "silver" / "prices.yaml").read_text(encoding="utf-8")
            assert 'dedup: {keys: [symbol, traded_at], delay: "1 day"}' in silver
            gold = (conf / "tables" / "gold" / "prices_monthly.yaml").read_text(encoding="utf-8")
            assert "window: {type: calendar, unit: month}\n" in gold
            assert "group_by: [symbol]" in gold and gold.count(PROPOSED) == 1, gold
        elif "medallion validate" in block.text:
            seen.append("validate")
            assert "gold: spark_catalog.gold.prices_monthly" in out
            assert "warning:" not in out, out  # the landing folder exists: new made it
        elif "medallion test" in block.text:
            seen.append("test")
            # the case new wrote passes; an expected value changed fails, naming the row's key
            assert out.splitlines() == ["PASS silver.prices/sample (3 rows)", "1 passed, 0 failed"]
            expected = conf / "tests" / "silver.prices" / "sample" / "expected.jsonl"
            as_written = expected.read_text(encoding="utf-8")
            first, *rest = as_written.splitlines(keepends=True)
            row = json.loads(first)
            changed = json.dumps({**row, "close": row["close"] + 1}) + "\n" + "".join(rest)
            expected.write_text(changed, encoding="utf-8")
            lines = medallion("test", code=1).splitlines()
            assert lines[0] == "FAIL silver.prices/sample" and lines[-1] == "0 passed, 1 failed"
            assert re.fullmatch(rf"  symbol={row['symbol']}, traded_at=\S+ \S+: close expected "
                                rf"{row['close'] + 1}, found {row['close']}", lines[1]), lines
            assert len(lines) == 3, lines
            expected.write_text(as_written, encoding="utf-8")
        elif "medallion run all" in block.text:
            seen.append("run")

    out = run_as_written(tmp_path, [b for b in blocks if b.lang != "text"], after)
    assert seen == ["new", "validate", "test", "run"]
    rows = sample_rows(blocks)
    assert len(rows) == 9 and len([b for b in blocks if "<<'CSV'" in b.text]) == 1
    assert ROW.findall(out) == monthly(rows)
    assert monthly(rows) == [("2026-01-01", "ACME", "2", "11.0"),
                             ("2026-01-01", "BOLT", "2", "20.0"),
                             ("2026-02-01", "ACME", "3", "12.5"),
                             ("2026-02-01", "BOLT", "2", "22.5")]
    shown = [b.text for b in blocks if b.lang == "text"]
    assert len(shown) == 1 and shown[0] in out, out[-3000:]  # the output the page shows
    assert (tmp_path / "lakehouse" / "tables" / "gold" / "prices_monthly").is_dir()
