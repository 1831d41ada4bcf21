"""``medallion report``: generated from a real run history, opened in a real headless Chromium
(Debian's package, installed by the setup), driven by Playwright."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from framework.cli import main
from framework.job import RunContext, RunStatus
from framework.report import PLOTS
from framework.runner import run_tables
from tests.support import (
    Lakehouse,
    bronze_spec,
    order,
    run_history,
    silver_spec,
    write_json_lines,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As this machine needs them: no sandbox as root, nothing fetched from the network
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Per plot: traces and points (plotly's own DOM), what is drawn, and whether every point lies
# within the x axis's range (dates compared as plotly writes them)
PLOT_FIGURES = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => {
    const range = d._fullLayout.xaxis.range.map(String);
    const xs = (d.data || []).flatMap(t => (t.x || []).map(x => String(x).replace('T', ' ')));
    return {
        id: d.id,
        traces: (d.data || []).length,
        points: (d.data || []).reduce((n, t) => n + (t.y ? t.y.length : 0), 0),
        drawn: d.querySelectorAll('.main-svg .point, .main-svg path.js-line').length,
        in_range: d._fullLayout.xaxis.type !== 'date'
            || xs.every(x => x >= range[0] && x <= range[1]),
    };
})"""
# Lay every plot out once more at the page's final size, and wait for it
SETTLE = """() => Promise.all(Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(d => Plotly.Plots.resize(d)))"""


def _history(spark: SparkSession, lakehouse: Lakehouse) -> None:
    """A bronze feed in 3 batches (2 malformed lines, 10 duplicates), its silver table with a
    watermark, and a second silver table whose 'fail' rule breaks on the first batch."""
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    lakehouse.add_table("silver", "orders", silver_spec(
        event_time="event_time", dedup={"keys": ["order_id"], "delay": "1 hour"},
        checks=[{"volume": {"min": 1000}, "name": "a_thousand"}]))  # (warned: 90 rows)
    lakehouse.add_table("silver", "big_orders", {
        "description": "orders of 5 or more", "source": {"table": "orders"},
        "expectations": [{"name": "small", "rule": "quantity < 5", "action": "fail"}]})
    landing = lakehouse.path("landing", "orders")
    for f in range(3):
        records = [order(f * 30 + i) for i in range(30)]
        if f:
            records += [order((f - 1) * 30 + i) for i in range(5)]  # sent again
        write_json_lines(landing / f"part-{f}.json", records,
                         extra_lines=["{broken", "[1, 2]"] if f == 1 else ())
    project = lakehouse.project()
    summary = run_tables(spark, project, project.in_flow_order(project.tables), RunContext())
    statuses = {t.table.rsplit(".", 1)[-1]: t.status for t in summary.tables}
    assert statuses == {"orders": RunStatus.SUCCEEDED, "big_orders": RunStatus.FAILED} or \
        [t.status for t in summary.tables] == [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED,
                                               RunStatus.FAILED], summary.to_dict()


def test_the_report_renders_every_plot_with_data_in_a_real_browser(
        spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    _history(spark, lakehouse)
    out = tmp_path / "report.html"
    code = main(["report", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 "--out", str(out), "--since", "1d"])
    assert code == 0 and out.exists()
    page_text = out.read_text(encoding="utf-8")
    assert "<script src=" not in page_text  # self-contained: plotly is in the page

    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(PLOTS)}")
            page.evaluate(SETTLE)
            plots: list[dict[str, Any]] = page.evaluate(PLOT_FIGURES)
            freshness = page.locator("table").first.inner_text()
            failures = page.locator("table").nth(1).inner_text()
            shot = page.screenshot(full_page=True, path=str(tmp_path / "report.png"))
            print(tmp_path / "report.png")
        finally:
            browser.close()

    assert errors == []
    by_id = {p["id"]: p for p in plots}
    assert list(by_id) == list(PLOTS)
    # a point per batch of bronze and silver orders (big_orders failed in its first)
    batches = [r for r in run_history(spark, lakehouse) if r["status"] == "committed"
               and r["batch_id"] is not None]
    assert len({r["table"] for r in batches}) == 2 and len(batches) >= 6
    assert (by_id["rows-per-batch"]["traces"], by_id["rows-per-batch"]["points"]) == (
        2, len(batches))
    for plot in ("rows-per-batch", "throughput", "quarantine-rate", "duplicate-rate",
                 "late-rate", "state-rows", "backlog"):
        assert by_id[plot]["traces"] >= 1 and by_id[plot]["points"] >= 1, by_id[plot]
        assert by_id[plot]["drawn"] > 0 and by_id[plot]["in_range"], by_id[plot]
    assert by_id["duplicate-rate"]["traces"] == 1  # silver orders' dedup
    assert by_id["state-rows"]["traces"] == 1  # and its state
    assert (by_id["checks"]["traces"], by_id["checks"]["points"]) == (1, 1)  # its one check
    assert by_id["checks"]["drawn"] > 0 and by_id["checks"]["in_range"], by_id["checks"]
    names = [f"spark_catalog.{lakehouse.schemas[layer]}.{name}"
             for layer, name in (("bronze", "orders"), ("silver", "orders"),
                                 ("silver", "big_orders"))]
    for name in names:
        assert name in freshness
    assert "small" in failures and names[2] in failures
    assert len(shot) > 50_000  # a page of drawn plots, not a blank one


@pytest.mark.parametrize("since", ["7", "3y", "-1d", "d"])
def test_a_bad_period_is_a_clear_error(lakehouse: Lakehouse, since: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 f"--since={since}"])
    assert code == 2
    assert f"expected a period such as 30m, 12h, 7d or 2w for --since, found {since!r}" in \
        capsys.readouterr().err
