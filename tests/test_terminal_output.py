"""Output for a person at a terminal: human lines only (a warning a short line naming the table
and what to do); JSON events with ``--log-format json``, where every line is one. The setup
says one line per step, each step's whole output in its log, a failing step's shown."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import threading
from pathlib import Path

import pytest

from framework.cli import main
from framework.jvm import _pass_on
from framework.logging import LOG_FORMAT_ENV, LogFormat, configure_logging, get_logger
from tests.support import BIN, FOREIGN, REPO, user_env

STEP = REPO / "deploy" / "setup-step.sh"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# What a person must not see: Ivy's resolver report, a Java stack
RESOLVER = re.compile(r"confs:|:: resolving|artifacts copied|downloading ")
JAVA_STACK = re.compile(r"\tat org\.|\bat java\.|Exception in thread")
# The demo's smallest feed (at least 30 files of 10 orders)
DEMO = ["demo", "--orders", "300", "--files", "30"]


# ---------------------------------------------------------------------- the setup's steps
def _step(tmp_path: Path, title: str, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEDALLION_SETUP_LOG": str(tmp_path / "setup.log")}
    return subprocess.run([str(STEP), title, *command], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_setup_step_says_one_line_and_logs_its_output(tmp_path: Path) -> None:
    done = _step(tmp_path, "Delta jars (.venv)", "sh", "-c",
                 "echo ':: resolving dependencies :: x'; echo '\tconfs: [default]' >&2")
    assert done.returncode == 0
    assert re.fullmatch(r"setup: Delta jars \(\.venv\) \.\.\. ok \(\d+ s\)\n", done.stdout)
    assert done.stderr == ""
    log = (tmp_path / "setup.log").read_text()
    assert ":: resolving dependencies :: x\n\tconfs: [default]\n" in log
    assert "Delta jars (.venv) (exit 0," in log

    # a warning among its output is said under its line; the log keeps appending
    done = _step(tmp_path, "Chromium", "sh", "-c", "echo noise; echo 'warning: no chromium'")
    assert done.returncode == 0
    assert done.stdout.splitlines()[1:] == ["  warning: no chromium"]
    log = (tmp_path / "setup.log").read_text()
    assert log.index("confs: [default]") < log.index("noise")


def test_a_failing_setup_step_shows_its_output_and_exits_with_its_code(tmp_path: Path) -> None:
    done = _step(tmp_path, "Python packages (.venv)", "sh", "-c",
                 "echo 'ERROR: no matching distribution for nope'; exit 3")
    assert done.returncode == 3
    assert done.stdout == "setup: Python packages (.venv) ... failed (exit 3)\n"
    assert done.stderr.splitlines() == [
        "ERROR: no matching distribution for nope",
        f"setup: its whole output is in {tmp_path / 'setup.log'}"]

    # a long output: its last lines (the log has them all)
    done = _step(tmp_path, "Delta jars (.venv)", "sh", "-c",
                 "for i in $(seq 100); do echo line $i; done; exit 1")
    assert done.returncode == 1
    err = done.stderr.splitlines()
    assert err[0] == "setup: the last 40 of its 100 lines:"
    assert err[1:-1] == [f"line {i}" for i in range(61, 101)]
    assert "line 1\n" in (tmp_path / "setup.log").read_text()


def test_every_setup_command_runs_as_a_step_and_make_echoes_none(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    planned = subprocess.run(["make", "--no-print-directory", "-n", "-B", "setup",
                              f"SETUP_LOG={log}"], cwd=REPO, capture_output=True, text=True,
                             timeout=60)  # (under make itself, as in CI, no "Entering directory")
    assert planned.returncode == 0, planned.stderr
    commands = [line for line in planned.stdout.splitlines()
                if line.strip() and not line.startswith(("#", "  ", "\t"))]
    steps = [c for c in commands if c.startswith(f"MEDALLION_SETUP_LOG={log} "
                                                 "deploy/setup-step.sh ")]
    assert [c for c in commands if c not in steps and not c.startswith("touch ")] == []
    assert any("-m framework.session" in c for c in steps)
    assert len(steps) >= 10
    # the setup's recipes (up to the demo's target) are silent: the steps say their lines
    makefile = (REPO / "Makefile").read_text()
    setup = makefile[makefile.index("\nsetup:"):makefile.index("\ndemo:")]
    lines = setup.splitlines()
    recipes = [line for i, line in enumerate(lines) if line.startswith("\t")
               and not (i and lines[i - 1].endswith("\\"))]  # (not a continuation)
    assert recipes and [line for line in recipes if not line.startswith("\t@")] == []


# ---------------------------------------------------------------------- events
def test_a_warning_at_a_terminal_is_one_line_with_the_table_and_what_to_do() -> None:
    out = io.StringIO()
    configure_logging(LogFormat.CONSOLE, stream=out)
    get_logger(env="local", layer="bronze", table="bronze.orders", run_id="r1").warning(
        "bronze.files.failed", files=["/lake/landing/orders/bad.json"])
    get_logger(table="bronze.orders").warning("bronze.files.failed", batch_id=3, files={
        "/lake/landing/orders/o-30.json.gz": "EOFException: Unexpected end of input stream"})
    get_logger(table="silver.orders").warning("silver.expectation.failed",
                                              reason="3 rows have no order_id", hint="fix them")
    lines = out.getvalue().splitlines()
    assert lines == [
        "warning: bronze.orders: 1 file(s) could not be read: bad.json; they are set aside "
        "under the root's _quarantine/; fix or replace them and land them again",
        "warning: bronze.orders: 1 file(s) could not be read: o-30.json.gz (EOFException: "
        "Unexpected end of input stream); they are set aside under the root's _quarantine/; "
        "fix or replace them and land them again",
        "warning: silver.orders: 3 rows have no order_id (silver.expectation.failed); fix them"]


def test_auto_takes_the_format_a_parent_command_chose(
        monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setenv(LOG_FORMAT_ENV, "json")
    assert configure_logging(LogFormat.AUTO, stream=terminal) is LogFormat.JSON
    get_logger().info("child.event", n=1)
    assert json.loads(terminal.getvalue())["event"] == "child.event"
    monkeypatch.setenv(LOG_FORMAT_ENV, "console")
    assert configure_logging(LogFormat.AUTO, stream=io.StringIO()) is LogFormat.CONSOLE
    monkeypatch.delenv(LOG_FORMAT_ENV)
    assert configure_logging(LogFormat.AUTO, stream=terminal) is LogFormat.CONSOLE
    assert configure_logging(LogFormat.AUTO, stream=io.StringIO()) is LogFormat.JSON
    # an explicit format is kept
    monkeypatch.setenv(LOG_FORMAT_ENV, "json")
    assert configure_logging(LogFormat.CONSOLE, stream=io.StringIO()) is LogFormat.CONSOLE


def test_a_command_hands_its_format_to_what_it_starts_then_restores_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[str | None] = []
    monkeypatch.setattr("framework.cli.cmd_validate",
                        lambda args: seen.append(os.environ.get(LOG_FORMAT_ENV)) or 0)
    conf = ["--conf", str(tmp_path / "conf")]
    monkeypatch.delenv(LOG_FORMAT_ENV, raising=False)
    assert main(["validate", *conf, "--log-format", "console"]) == 0
    assert LOG_FORMAT_ENV not in os.environ
    monkeypatch.setenv(LOG_FORMAT_ENV, "json")  # as a parent command chose
    assert main(["validate", *conf]) == 0
    assert main(["validate", *conf, "--log-format", "console"]) == 0
    assert os.environ[LOG_FORMAT_ENV] == "json"
    assert seen == ["console", "json", "console"]


def test_ivy_s_report_is_left_out_of_a_command_s_output(
        capfd: pytest.CaptureFixture[str]) -> None:
    report = (
        ":: loading settings :: url = jar:file:/x/ivy-2.5.3.jar!/ivysettings.xml\n"
        "Ivy Default Cache set to: /root/.ivy2/cache\n"
        "io.delta#delta-spark_2.13 added as a dependency\n"
        ":: resolving dependencies :: org.apache.spark#spark-submit-parent-1;1.0\n"
        "\tconfs: [default]\n"
        "\tfound io.delta#delta-spark_2.13;4.0.0 in central\n"
        ":: resolution report :: resolve 317ms :: artifacts dl 9ms\n"
        "\t:: modules in use:\n"
        "\tio.delta#delta-spark_2.13;4.0.0 from central in [default]\n"
        "\t---------------------------------------------------------------------\n"
        "\t|      default     |   3   |   0   |   0   |   0   ||   3   |   0   |\n"
        ":: retrieving :: org.apache.spark#spark-submit-parent-1\n"
        "\t0 artifacts copied, 3 already retrieved (0kB/5ms)\n"
    )
    failure = "\t:: io.delta#nope;1: not found\nException in thread \"main\" java.lang.X\n"
    _pass_on(io.BytesIO((report + failure).encode()), False, False)
    assert capfd.readouterr().err == failure  # a failure to resolve still says why
    _pass_on(io.BytesIO(report.encode()), False, True)  # the setup's, for its log
    assert capfd.readouterr().err == report


# ---------------------------------------------------------------------- the demo
def _demo_env(root: Path) -> dict[str, str]:
    return user_env(MEDALLION_ROOT=str(root), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
                    PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def _at_a_terminal(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """``command`` run with a pseudo-terminal as its stdin, stdout and stderr: its exit code
    and what it printed there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env,
                            cwd=REPO, start_new_session=True)
    os.close(follower)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=30)
        os.close(leader)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return code, ANSI.sub("", text)


def _json_lines(lines: list[str]) -> list[str]:
    found = []
    for line in lines:
        if line.lstrip().startswith("{"):
            try:
                json.loads(line)
            except ValueError:
                continue
            found.append(line)
    return found


@pytest.mark.slow
@pytest.mark.demo
def test_the_demo_prints_human_lines_at_a_terminal_and_json_lines_with_log_format_json(
        tmp_path: Path) -> None:
    env = _demo_env(tmp_path / "lakehouse")
    code, out = _at_a_terminal([str(BIN / "medallion"), *DEMO], env, timeout=900)
    lines = out.splitlines()
    assert code == 0, out[-3000:]
    assert any(" batch " in line and " rows " in line for line in lines), out[-3000:]
    assert "orders per customer segment" in out
    assert _json_lines(lines) == []
    assert [line for line in lines if RESOLVER.search(line)] == []
    assert [line for line in lines if JAVA_STACK.search(line)] == []
    assert [line for line in lines if FOREIGN.match(line)] == []
    # a warning is one short line: its table, what happened, what to do
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert all(len(line) < 400 for line in warnings), warnings

    done = subprocess.run([str(BIN / "medallion"), *DEMO, "--fresh", "--log-format", "json"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert [line for line in printed if line not in _json_lines(printed)] == []
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert events[:2] == ["demo.feed", "demo.running"] and "demo.batch" in events
    assert events[-1] == "demo.summary"
    summary = json.loads(done.stdout.splitlines()[-1])["summary"]
    generated = re.search(r"generated (\d+) order files", out)
    assert generated and summary["feed"]["files"] == int(generated.group(1))
