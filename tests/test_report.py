"""``medallion report``: generated from a real run history, opened in a real headless Chromium
(Debian's package, installed by the setup), driven by Playwright."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

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


def _plot_data(page: str, plot_id: str) -> list[dict[str, Any]]:
    """The traces of a plot as the page gives them to plotly.js (typed arrays decoded)."""
    import base64
    import json
    import re

    import numpy as np

    found = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(plot_id) + r'",\s*', page)
    assert found is not None, plot_id
    traces, _ = json.JSONDecoder().raw_decode(page, found.end())
    for trace in traces:
        for axis in ("x", "y"):
            if isinstance(trace.get(axis), dict) and "bdata" in trace[axis]:
                trace[axis] = np.frombuffer(base64.b64decode(trace[axis]["bdata"]),
                                            dtype=trace[axis]["dtype"]).tolist()
    return cast(list[dict[str, Any]], traces)


def test_the_report_plots_the_rows_each_run_held_and_released(
        spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path) -> None:
    """Sales held for stores that come later: the run history has the rows each batch held
    and, on a row of its own, those a run released, also in a run with no batch; the report
    plots both per run."""
    from framework.config.model import Layer
    from framework.report import held_by_run
    from tests.support import write_delta_commits
    from tests.test_quality import SALES, run_sales, sale, with_stores_and_sales

    bronze, dims = with_stores_and_sales(spark, lakehouse, ["s1"], action="hold")
    stores = "store_id STRING, name STRING"
    write_delta_commits(spark, bronze, [[sale("a", "s1"), sale("b", "s2"), sale("c", "s3")]],
                        SALES)
    run_sales(spark, lakehouse)  # b and c held
    write_delta_commits(spark, dims, [[("s2", "store s2")]], stores)
    run_sales(spark, lakehouse)  # b released, in a run without a batch
    write_delta_commits(spark, dims, [[("s3", "store s3")]], stores)
    write_delta_commits(spark, bronze, [[sale("d", "s4")]], SALES)
    run_sales(spark, lakehouse)  # c released, d held

    name = lakehouse.project().table("sales", Layer.SILVER).full_name
    rows = run_history(spark, lakehouse, name)
    assert sorted((r["batch_id"] is None, r["held"], r["released"], r["rows_out"],
                   r["quarantined"]) for r in rows) == [
        (False, 1, None, 0, 0), (False, 2, None, 1, 0), (True, None, 1, None, 0),
        (True, None, 1, None, 0)]
    runs = held_by_run([r.asDict() for r in rows])
    assert [(run["held"], run["released"]) for run in runs[name]] == [(2, 0), (0, 1), (1, 1)]

    out = tmp_path / "report.html"
    assert main(["report", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 "--out", str(out), "--since", "1d"]) == 0
    traces = _plot_data(out.read_text(encoding="utf-8"), "held-rows")
    assert [(t["name"], t["y"]) for t in traces] == [
        (f"{name}: held", [2, 0, 1]), (f"{name}: released", [0, 1, 1])]
    assert [t["y"] for t in _plot_data(out.read_text(encoding="utf-8"), "rows-per-batch")
            if t["name"] == name] == [[1, 0]]  # (a release is no batch)


@pytest.mark.parametrize("since", ["7", "3y", "-1d", "d"])
def test_a_bad_period_is_a_clear_error(lakehouse: Lakehouse, since: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 f"--since={since}"])
    assert code == 2
    assert f"expected a period such as 30m, 12h, 7d or 2w for --since, found {since!r}" in \
        capsys.readouterr().err
