"""``medallion report``: one self-contained HTML page of the run history's plots.

The figures come from the run history (:mod:`framework.history`, ``<ops>.runs``) over a period
(``--since``), and from each table's state now (:mod:`framework.status`): rows per batch and
throughput, quarantine, duplicate and late rates, and state rows over time, each table-level check's
results (``<ops>.quality``), the rows each run held for a key another table lacked and released
once it arrived, the landing backlog
(files and bytes waiting per feed, a Kafka feed's lag), the last failures with their errors, and
one line per table with its freshness (the time since its last Delta commit).

Plots are drawn by plotly; its JavaScript is embedded in the page, so the file opens anywhere
without a network. Every plot is a ``div`` with the class ``js-plotly-plot`` and the id given
in :data:`PLOTS`; a plot with no figure over the period says so instead of showing empty axes.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from framework.config.model import ProjectConfig
from framework.delta import is_delta_table, read_table
from framework.errors import UsageError
from framework.history import RunHistory
from framework.quality import quality_table
from framework.status import TableStatus, table_status
from framework.text import period_ms

# id -> title of every plot on the page, in order
PLOTS = {
    "rows-per-batch": "Rows written per batch",
    "throughput": "Throughput (rows read per second of batch time)",
    "quarantine-rate": "Quarantine rate (quarantined / rows read)",
    "duplicate-rate": "Duplicate rate (duplicates dropped / rows read)",
    "late-rate": "Late rate (dropped behind the watermark / rows read)",
    "backlog": "Landing backlog now (files waiting; a Kafka feed: records behind)",
    "state-rows": "Rows in the streaming state",
    "checks": "Table-level checks (1: failed, 0: passed; hover: what was found)",
    "held-rows": "Rows held for a key another table lacks, and released, per run",
}
FAILURES_SHOWN = 20


def parse_since(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w`` as a period."""
    ms = period_ms(text)
    if ms is None:
        raise UsageError(f"expected a period such as 30m, 12h, 7d or 2w for --since, "
                         f"found {text!r}")
    return timedelta(milliseconds=ms)


@dataclass(frozen=True)
class Report:
    """What a written report holds (for the command's summary line)."""

    path: Path
    batches: int
    tables: int
    failures: int
    plots: tuple[str, ...]


def write_report(spark: SparkSession, project: ProjectConfig, out: Path,
                 since: timedelta) -> Report:
    """Read the history and the tables' state, and write the page to ``out``."""
    now = datetime.now(UTC)
    history = RunHistory(spark, project.env)
    rows: list[dict[str, Any]] = []
    if history.exists():
        start = (now - since).astimezone().replace(tzinfo=None)  # Spark's naive local time
        df = history.read().where(
            F.coalesce("ended_at", "recorded_at") >= F.lit(start))
        rows = [_utc(r.asDict()) for r in df.orderBy("ended_at").collect()]
    checks: list[dict[str, Any]] = []
    _, quality = quality_table(project.env)
    if is_delta_table(spark, quality):
        start = (now - since).astimezone().replace(tzinfo=None)
        checks = [_utc(r.asDict()) for r in read_table(spark, quality)
                  .where(F.col("recorded_at") >= F.lit(start)).orderBy("recorded_at").collect()]
    states = [table_status(spark, t) for t in project.tables]
    page = render(rows, states, now=now, since=since, env=project.env.name,
                  history_table=history.name, checks=checks)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    batches = [r for r in rows if r["status"] != "failed"]
    return Report(out, len(batches), len({r["table"] for r in batches}),
                  sum(r["status"] == "failed" for r in rows), tuple(PLOTS))


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    """Spark's naive local times as UTC."""
    return {k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in row.items()}


# ---------------------------------------------------------------------------------- page
def render(rows: Sequence[Mapping[str, Any]], states: Sequence[TableStatus], *, now: datetime,
           since: timedelta, env: str, history_table: str,
           checks: Sequence[Mapping[str, Any]] = ()) -> str:
    """The page: the plots of ``rows`` (the history's, times in UTC), of ``checks`` (the
    results in ``<ops>.quality``) and of ``states``."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.offline import get_plotlyjs

    batches = [r for r in rows if r["status"] != "failed" and r["ended_at"] is not None]
    # one colour per table on every plot
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
    names = sorted({r["table"] for r in rows} | {s.table for s in states})
    colors = {t: palette[i % len(palette)] for i, t in enumerate(names)}

    def lines(value: Any, percent: bool = False) -> Any:
        return _lines(go, batches, value, colors, percent)

    figures: dict[str, Any] = {
        "rows-per-batch": lines(lambda r: r["rows_out"]),
        "throughput": lines(_throughput),
        "quarantine-rate": lines(lambda r: _rate(r, "quarantined"), percent=True),
        "duplicate-rate": lines(lambda r: _rate(r, "duplicates_dropped"), percent=True),
        "late-rate": lines(lambda r: _rate(r, "late_dropped"), percent=True),
        "backlog": _backlog(go, states),
        "state-rows": lines(lambda r: r["state_rows"] or None),
        "checks": _checks(go, checks),
        "held-rows": _held(go, [r for r in rows if r["status"] != "failed"], colors),
    }
    parts = []
    for plot_id, title in PLOTS.items():
        fig = figures[plot_id]
        fig.update_layout(title=title, height=340, margin={"l": 60, "r": 20, "t": 50, "b": 40},
                          legend={"orientation": "h", "y": -0.2})
        if not fig.data:
            fig.add_annotation(text="no figure in this period", showarrow=False,
                               xref="paper", yref="paper", x=0.5, y=0.5)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=plot_id,
                                 config={"displaylogo": False, "responsive": True}))
    failures = [r for r in rows if r["status"] == "failed"][-FAILURES_SHOWN:][::-1]
    title = f"Lakehouse report: {env}"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style>",
        f"<script>{get_plotlyjs()}</script>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class=note>From {html.escape(history_table)}: {len(batches)} batches over the "
        f"last {_period(since)}, to {now:%Y-%m-%d %H:%M} UTC (every time on this page is "
        "in UTC).</p>",
        "<h2>Freshness</h2>",
        _freshness(states, batches, now),
        "<h2>Last failures</h2>",
        _failures(failures),
        '<div class="plots">', *parts, "</div>",
        "</body></html>",
    ])


STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; }
td.num { text-align: right; } .stale { color: #b00; } .note { color: #555; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 8px; }
"""


def _lines(go: Any, rows: Iterable[Mapping[str, Any]], value: Any, colors: Mapping[str, str],
           percent: bool = False) -> Any:
    """One line per table: ``value(row)`` over the batches' end times (None: left out)."""
    fig = go.Figure()
    by_table: dict[str, list[tuple[datetime, float]]] = {}
    for r in rows:
        v = value(r)
        if v is not None:
            by_table.setdefault(r["table"], []).append((r["ended_at"], v))
    for table, points in sorted(by_table.items()):
        points.sort()
        # plotly.js reads a date without its offset: the times are given in UTC, naive
        fig.add_trace(go.Scatter(x=[p[0].replace(tzinfo=None) for p in points],
                                 y=[p[1] for p in points], mode="lines+markers", name=table,
                                 line={"color": colors.get(table)}))
    if percent:
        fig.update_yaxes(tickformat=".1%")
    return fig


def _checks(go: Any, results: Iterable[Mapping[str, Any]]) -> Any:
    """One line per table and check: 1 where a result failed, 0 where it passed, over the
    times they were recorded; hovering a point shows what was found."""
    fig = go.Figure()
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        by_check.setdefault(f"{r['table']}: {r['check']}", []).append(r)
    for name, points in sorted(by_check.items()):
        fig.add_trace(go.Scatter(
            x=[p["recorded_at"].replace(tzinfo=None) for p in points],
            y=[0 if p["passed"] else 1 for p in points],
            text=[f"{p['observed']} (expected {p['threshold']})" for p in points],
            mode="lines+markers", name=name, line={"shape": "hv"}))
    fig.update_yaxes(range=[-0.1, 1.1], tickvals=[0, 1], ticktext=["passed", "failed"])
    return fig


def held_by_run(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per table that held or released rows: per run, in order, its end (its last row's time)
    and the rows its batches held and it released (:mod:`framework.history`: ``held`` on a
    batch's row, ``released`` on a row of its own; a history older than them has neither)."""
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        held, released = r.get("held"), r.get("released")
        at = r.get("ended_at") or r.get("recorded_at")
        if (held is None and released is None) or at is None:
            continue
        run = runs.setdefault((r["table"], r["run_id"] or ""),
                              {"at": at, "held": 0, "released": 0})
        run["at"] = max(run["at"], at)
        run["held"] += held or 0
        run["released"] += released or 0
    by_table: dict[str, list[dict[str, Any]]] = {}
    for (table, _), run in runs.items():
        by_table.setdefault(table, []).append(run)
    return {t: sorted(v, key=lambda run: run["at"]) for t, v in sorted(by_table.items())}


def _held(go: Any, rows: Iterable[Mapping[str, Any]], colors: Mapping[str, str]) -> Any:
    """Per table: the rows its runs held (a solid line) and released (dashed)."""
    fig = go.Figure()
    for table, runs in held_by_run(rows).items():
        x = [run["at"].replace(tzinfo=None) for run in runs]  # (UTC, naive: see _lines)
        for what, dash in (("held", "solid"), ("released", "dash")):
            fig.add_trace(go.Scatter(x=x, y=[run[what] for run in runs], mode="lines+markers",
                                     name=f"{table}: {what}",
                                     line={"color": colors.get(table), "dash": dash}))
    return fig


def _throughput(row: Mapping[str, Any]) -> float | None:
    ms = (row["durations_ms"] or {}).get("triggerExecution")
    return row["rows_in"] / (ms / 1000) if row["rows_in"] is not None and ms else None


def _rate(row: Mapping[str, Any], column: str) -> float | None:
    if row[column] is None or not row["rows_in"]:
        return None
    return float(row[column]) / row["rows_in"]


def _backlog(go: Any, states: Sequence[TableStatus]) -> Any:
    fig = go.Figure()
    files = [(s.table, s.pending_files) for s in states if s.pending_files is not None]
    lag = [(s.table, sum(int(o.get("lag") or 0) for o in s.offsets)) for s in states
           if s.offsets]
    if files:
        fig.add_trace(go.Bar(x=[t for t, _ in files], y=[n for _, n in files],
                             name="files waiting",
                             text=[_size(s.pending_bytes) for s in states
                                   if s.pending_files is not None]))
    if lag:
        fig.add_trace(go.Bar(x=[t for t, _ in lag], y=[n for _, n in lag],
                             name="records behind (Kafka)"))
    if (files or lag) and not any(n for _, n in [*files, *lag]):
        fig.add_annotation(text="nothing waiting", showarrow=False, xref="paper",
                           yref="paper", x=0.5, y=0.8)
    return fig


def _freshness(states: Sequence[TableStatus], batches: Sequence[Mapping[str, Any]],
               now: datetime) -> str:
    last: dict[str, Mapping[str, Any]] = {}
    for r in batches:
        last[r["table"]] = r
    rows = []
    for s in states:
        commit = s.last_commit.astimezone(UTC) if s.last_commit else None
        age = _age(now - commit) if commit else ("view" if s.kind == "view" else "never")
        b = last.get(s.table)
        rows.append([s.table, s.kind, f"{commit:%Y-%m-%d %H:%M:%S}" if commit else "",
                     age, "" if s.rows is None else f"{s.rows:,}",
                     "" if b is None or b["batch_id"] is None else str(b["batch_id"]),
                     "" if b is None else b["status"]])
    head = ["table", "kind", "last commit (UTC)", "since", "rows", "last batch", "status"]
    return _table(head, rows, numeric={4, 5})


def _failures(failures: Sequence[Mapping[str, Any]]) -> str:
    if not failures:
        return "<p class=note>No failure in this period.</p>"
    rows = [[f"{r['ended_at']:%Y-%m-%d %H:%M:%S}" if r["ended_at"] else "", r["table"],
             "" if r["batch_id"] is None else str(r["batch_id"]), r["run_id"] or "",
             r["error"] or ""] for r in failures]
    return _table(["when (UTC)", "table", "batch", "run", "error"], rows)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    cells = "".join(
        "<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{html.escape(str(v))}</td>'
                         for i, v in enumerate(row)) + "</tr>" for row in rows)
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{cells}</tbody></table>")


def _age(delta: timedelta) -> str:
    seconds = max(int(delta.total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _period(delta: timedelta) -> str:
    n, unit = _age(delta).split()
    name = {"d": "day", "h": "hour", "min": "minute", "s": "second"}[unit]
    return f"{n} {name}{'' if n == '1' else 's'}"


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n:.1f} TB"
