"""Helpers for tests: per-test lakehouses and landing-file writers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framework.config.loader import load_project
from framework.config.model import ProjectConfig

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class Lakehouse:
    """A conf/ folder and a lakehouse root for one test, with unique catalog schemas."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.conf = base / "conf"
        self.root = base / "lakehouse"
        suffix = uuid.uuid4().hex[:8]
        self.schemas = {layer: f"{layer}_{suffix}" for layer in ("bronze", "silver", "gold", "ops")}
        self.env_name = "test"
        self.write_env()

    def write_env(self, **extra: Any) -> None:
        env = {
            "runtime": "local",
            "root": str(self.root),
            "master": "local[2]",
            "shuffle_partitions": 2,
            "schemas": self.schemas,
            "spark_conf": {"spark.ui.enabled": "false"},
            **extra,
        }
        self._write(self.conf / "environments" / f"{self.env_name}.yaml", env)

    def add_table(self, layer: str, name: str, spec: dict[str, Any]) -> Path:
        path = self.conf / "tables" / layer / f"{name}.yaml"
        self._write(path, spec)
        return path

    def project(self) -> ProjectConfig:
        return load_project(self.conf, self.env_name)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @staticmethod
    def _write(path: Path, data: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    def cli_env(self) -> dict[str, str]:
        """Environment for a `medallion` subprocess using this lakehouse."""
        env = dict(os.environ)
        env.update(
            MEDALLION_CONF=str(self.conf),
            MEDALLION_ENV=self.env_name,
            PYTHONUNBUFFERED="1",
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            PYTHONPATH=str(REPO),
        )
        return env


def cli(lakehouse: Lakehouse, *args: str) -> int:
    """``medallion <args>`` on the lakehouse, in this process (JSON logs)."""
    from framework.cli import main

    return main([*args, "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 "--log-format", "json"])


def user_env(**variables: str) -> dict[str, str]:
    """This process's environment as a user's shell has it: without the MEDALLION_ variables
    that the tests or an earlier command set, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDALLION_")}
    env.update(variables)
    return env


def medallion_cmd() -> list[str]:
    return [str(BIN / "medallion")]


# ---------------------------------------------------------------------- landing files
ORDER_SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"


def order(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "order_id": f"o{i:07d}",
        "customer_id": f"c{i % 17}",
        "quantity": i % 9 + 1,
        "event_time": f"2026-11-01T{(i // 60) % 24:02d}:{i % 60:02d}:00Z",
        **extra,
    }


def write_json_lines(
    path: Path, records: list[dict[str, Any]], extra_lines: Sequence[str] = ()
) -> Path:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")
    return path


def write_order_files(folder: Path, files: int, per_file: int, start: int = 0,
                      prefix: str = "part") -> list[str]:
    """``files`` JSON Lines files of ``per_file`` orders each; returns the order ids."""
    ids = []
    for f in range(files):
        records = [order(start + f * per_file + i) for i in range(per_file)]
        write_json_lines(folder / f"{prefix}-{start + f:05d}.json", records)
        ids += [r["order_id"] for r in records]
    return ids


def bronze_spec(**source: Any) -> dict[str, Any]:
    return {
        "description": "test orders",
        "source": {
            "path": "landing/orders",
            "format": "json",
            "schema": ORDER_SCHEMA,
            "clean_source": "archive",
            **source,
        },
    }


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def archived_files(folder: Path) -> list[Path]:
    """The landing files under an archive folder, without its manifests (``_manifests/``)."""
    return [p for p in files_under(folder) if "_manifests" not in p.parts]


class CliRun:
    """A `medallion` subprocess whose JSON log events can be waited for."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        import queue
        import subprocess
        import threading

        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lines: list[str] = []
        self.all_events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [*medallion_cmd(), *args, "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
            start_new_session=True,  # its own process group: the driver and its JVM
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        import json

        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                self.all_events.append(event)
                self.events.put(event)

    def wait_for(self, event: str, timeout: float = 240, **fields: Any) -> dict[str, Any]:
        import queue
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                e = self.events.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None and self.events.empty():
                    break
                continue
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items()):
                return e
        tail = "".join(self.lines[-30:])
        raise AssertionError(f"no {event} {fields} event; last output:\n{tail}")

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        """Wait for the exit; stdout is read here, stderr only by the reader thread (with
        communicate() both would read it and events could go missing)."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return self.proc.returncode, out


# ---------------------------------------------------------------------- upstream Delta tables
BRONZE_ROW_SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP, " \
                    "_batch_id BIGINT"


def write_delta_commits(spark: Any, location: str, commits: Sequence[Sequence[tuple[Any, ...]]],
                        schema: str = BRONZE_ROW_SCHEMA) -> None:
    """One Delta commit (one file) per element of ``commits``, as an upstream table receives
    them, so a reader with maxFilesPerTrigger=1 sees one micro-batch per commit."""
    for rows in commits:
        spark.createDataFrame(list(rows), schema).coalesce(1).write.format("delta") \
            .mode("append").save(location)


def replay_last_batch(spark: Any, lakehouse: Lakehouse, name: str) -> Any:
    """Silver table ``name``'s last batch run again, as after a driver killed after its writes
    and before its checkpoint commit: asserts that the run succeeds in one batch and leaves the
    change log and the table as they were, its MERGE writing no row (a replay that writes the
    same rows again would pass a comparison of rows, not this). The run's summary."""
    from framework.config.model import Layer
    from framework.job import RunContext, RunStatus
    from silver.job import SilverJob

    silver = lakehouse.project().table(name, Layer.SILVER)
    commits = Path(silver.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for file in (str(last), f".{last}.crc"):
        (commits / file).unlink(missing_ok=True)

    def rows(location: str) -> list[Any]:
        return sorted(spark.read.format("delta").load(location).collect(), key=str)

    log, table = rows(silver.companion_location("changes")), rows(silver.location)
    version = spark.sql(f"DESCRIBE HISTORY delta.`{silver.location}` LIMIT 1").first()
    summary = SilverJob(spark, silver, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED and summary.batches == 1, summary.error
    assert rows(silver.companion_location("changes")) == log
    assert rows(silver.location) == table
    again = spark.sql(f"DESCRIBE HISTORY delta.`{silver.location}` LIMIT 1").first()
    metrics = again["operationMetrics"]
    assert again["version"] == version["version"] or all(
        int(metrics.get(k, "0")) == 0 for k in (
            "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")), metrics
    return summary


def silver_spec(**spec: Any) -> dict[str, Any]:
    return {"description": "test silver orders",
            "source": {"table": "orders", "max_files_per_trigger": 1}, **spec}


def run_history(spark: Any, lakehouse: Lakehouse, table: str | None = None) -> list[Any]:
    """The rows of the lakehouse's run history (of ``table``, a catalog name), by batch."""
    from pyspark.sql import functions as F

    runs = spark.read.format("delta").load(str(lakehouse.path("tables", "ops", "runs")))
    if table is not None:
        runs = runs.where(F.col("table") == table)
    return runs.orderBy("batch_id", "recorded_at").collect()


# ---------------------------------------------------------------------- the README's quickstart
@dataclass
class QuickstartLake:
    """The lake the README's quickstart made, command by command (``quickstart_lake``)."""

    root: Path
    first_summary: dict[str, Any]  # of the first demo run
    last_summary: dict[str, Any]  # of the quickstart's last command, the demo again
    outputs: dict[str, str]  # each command's output (stdout), by its text
    before_last: dict[str, int]  # row counts before the last command
    errors: dict[str, str]  # each command's stderr, by its text


def quickstart_commands() -> list[list[str]]:
    """The commands of the README's quickstart block, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "no bash block in the README's quickstart"
    commands = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def as_run_here(command: list[str]) -> list[str]:
    """The quickstart's command in the virtualenv running the tests: as written in `.venv`;
    in another (the oldest Spark/Delta pair's), its own `medallion` for `.venv/bin/...`, and
    for `make demo` (which sets up and runs `.venv`'s) the demo it runs."""
    if BIN.resolve() == REPO / ".venv" / "bin":
        return command
    if command == ["make", "demo"]:
        return [str(BIN / "medallion"), "demo"]
    return [str(BIN / command[0].removeprefix(".venv/bin/")), *command[1:]]


def row_counts(spark: Any, root: Path) -> dict[str, int]:
    """Rows of every Delta table the demo writes, companions (quarantine, file ledger)
    included; not the run history, which records every run."""
    return {str(log.parent.relative_to(root)):
            spark.read.format("delta").load(str(log.parent)).count()
            for log in sorted((root / "tables").rglob("_delta_log"))
            if log.parent.relative_to(root / "tables").parts[0] != "ops"}


# The quickstart's feed, reduced (the demo needs at least 30 files).
QUICKSTART_ORDERS, QUICKSTART_FILES = 2400, 30


def run_quickstart(spark: Any, base: Path) -> QuickstartLake:
    """Every command of the README's quickstart, as a new user runs it from the repository
    (its own conf/, the local default), on a reduced demo feed; each must exit 0."""
    commands = quickstart_commands()
    assert commands[0] == ["make", "demo"] and ["make", "demo"] not in commands[1:]
    assert commands[-1] == [".venv/bin/medallion", "demo"]
    root, summary_path = base / "lakehouse", base / "summary.json"
    env = user_env(MEDALLION_ROOT=str(root), MEDALLION_DEMO_ORDERS=str(QUICKSTART_ORDERS),
                   MEDALLION_DEMO_FILES=str(QUICKSTART_FILES),
                   MEDALLION_DEMO_SUMMARY=str(summary_path))
    outputs: dict[str, str] = {}
    errors: dict[str, str] = {}
    before: dict[str, int] = {}
    first: dict[str, Any] = {}
    for i, command in enumerate(commands):
        if i == len(commands) - 1:  # the demo again: what it must not change
            before = row_counts(spark, root)
        done = subprocess.run(as_run_here(command), cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n" \
                                     f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[shlex.join(command)] = done.stdout
        errors[shlex.join(command)] = done.stderr
        if i == 0:
            first = json.loads(summary_path.read_text())
    return QuickstartLake(root, first, json.loads(summary_path.read_text()), outputs, before,
                          errors)


# ---------------------------------------------------------------------- what a command prints
# A structlog event as the console renders it (framework.logging, no colours off a terminal):
# time, level padded in brackets, the event's dotted name, then key=value pairs (values are
# repr()'d: one line each).
CONSOLE_EVENT = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \[(?:debug|info|warning|error|critical) *\] "
    r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+(?: +[A-Za-z_][A-Za-z0-9_]*=.*)?")
# A line the framework prints on stderr itself, not as an event: a command's error, the
# configuration's problems (framework.errors.ConfigValidationError), a cut output's note under
# JSON lines, a command line that names nothing to do (run, land, demo).
OWN_STDERR = re.compile(r"(?:error|warning|note): \S.*|\d+ configuration problem\(s\):"
                        r"|  - \[[\w ]+\] \S.*|output cut at \d+ rows?: .*"
                        r"|no tables configured for layer .*|expected files to upload, .*"
                        r"|the demo runs on a lakehouse root on this machine .*")
# What Spark, Hadoop, log4j or the JVM print: Spark's log layout (yy/MM/dd HH:mm:ss LEVEL
# logger:), the JVM's warnings, log4j's and SLF4J's own, a Java stack.
FOREIGN = re.compile(
    r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "
    r"|WARNING:|NOTE: |Picked up |OpenJDK |log4j|SLF4J|Using Spark's default"
    r"|\tat |\s*at [\w$.]+\(|Caused by: |\s*\.\.\. \d+ more|Exception in thread "
    r"|:: (?:loading settings|resolving dependencies|retrieving)|Ivy Default Cache")


def is_event_line(line: str) -> bool:
    """Whether ``line`` is a structlog event: a JSON object with its event, level and time,
    or an event as the console renders it."""
    if line.startswith("{"):
        try:
            event = json.loads(line)
        except ValueError:
            return False
        return isinstance(event, dict) and {"event", "level", "timestamp"} <= event.keys()
    return CONSOLE_EVENT.fullmatch(line) is not None


def foreign_lines(stdout: str, stderr: str) -> list[str]:
    """The lines of a command's output that are neither its own nor its events: on stdout,
    any line of Spark's, Hadoop's or the JVM's; on stderr, any line but an event or the
    framework's own error and notes."""
    return ([f"stdout: {line}" for line in stdout.splitlines() if FOREIGN.match(line)]
            + [f"stderr: {line}" for line in stderr.splitlines() if line.strip()
               and (FOREIGN.match(line) or not (is_event_line(line)
                                                or OWN_STDERR.fullmatch(line)))])


def source_rows_without(df: Any, volatile: Any) -> Any:
    """``df`` with the ``volatile`` fields (when and where a row was ingested) taken out of
    the JSON of a silver quarantine's ``_source_row``, the rest of it kept to compare."""
    from pyspark.sql import functions as F

    if "_source_row" not in df.columns:
        return df
    names = "|".join(sorted(volatile))
    return df.withColumn("_source_row", F.regexp_replace(
        "_source_row", f',?"(?:{names})":(?:"(?:[^"\\\\]|\\\\.)*"|[^,}}]*)', ""))
