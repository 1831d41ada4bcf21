"""The README and the documentation site (docs/, built with MkDocs Material), checked without
Spark:

* the README stays short: at most 250 lines;
* ``mkdocs build --strict`` builds the site without a warning (a broken link or anchor, a page
  missing from the nav);
* every ```yaml block parses, and one marked as a file of conf/ (an HTML comment on the line
  before it, ``<!-- conf: tables/silver/orders.yaml -->``) is loaded with the shipped conf/ by
  the project's own loader, as ``medallion validate --no-spark`` loads it, without a problem;
  a block that is part of a file says so (``<!-- fragment -->``), and a block marked neither
  way is an error. A ``needs:`` after the path names what the block refers to that conf/ does
  not have: tables (``silver.flights``), given a minimal spec, and transforms
  (``my_package.orders:normalise``), given a function;
* every ``medallion`` command in a ```bash block (``medallion``, ``.venv/bin/medallion`` or
  ``deploy/yarn/submit.sh``, after any ``VAR=value``) is one the CLI's parser accepts, and every
  script a block runs (``bench/...py``, ``deploy/...sh``) exists."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from framework.cli import build_parser
from framework.config.loader import load_checked
from tests.pages import Block, blocks, run_as_written, section
from tests.support import REPO

README_MAX_LINES = 250
COMMANDS = ("medallion", ".venv/bin/medallion", "deploy/yarn/submit.sh")
SCRIPT = re.compile(r"^(bench|deploy|tests)/[\w./-]+\.(py|sh)$")
# Minimal specs for the tables a block needs that conf/ does not have.
STUBS = {"bronze": "source: {path: landing/stub, format: json, schema: 'id STRING'}\n",
         "silver": "source: orders\n",
         "gold": "kind: mart\nfact: {table: orders, layer: silver}\n"}


@pytest.fixture(scope="module")
def spark() -> None:
    """No Spark here: the conftest's session, made for every test, is not made for these."""
    return None


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    assert lines[0] == "```bash" and lines[1].startswith("make demo")  # the two commands first


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "configuration" / "silver" / "index.html").is_file()


def test_every_yaml_block_parses_and_every_conf_block_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the shipped environments and the examples read from the environment
    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.setenv(name, f"example-{name.lower()}")
    monkeypatch.delenv("MEDALLION_ROOT", raising=False)
    modules = tmp_path / "modules"
    modules.mkdir()
    monkeypatch.syspath_prepend(str(modules))
    problems: dict[str, str] = {}
    confs: dict[Path, Path] = {}  # per page: its blocks go into one copy of conf/, in order
    loaded = 0
    for block in blocks("yaml"):
        try:
            data = yaml.safe_load(block.text)
        except yaml.YAMLError as exc:
            problems[str(block)] = f"not YAML: {exc}"
            continue
        marker = block.marker or ""
        if marker == "fragment":
            continue
        if not marker.startswith("conf: "):
            problems[str(block)] = "expected <!-- conf: PATH --> or <!-- fragment --> before it"
            continue
        if not isinstance(data, dict):
            problems[str(block)] = f"expected a mapping, found {type(data).__name__}"
            continue
        path, _, needs = marker.removeprefix("conf: ").partition(" needs: ")
        if block.page not in confs:
            confs[block.page] = tmp_path / f"conf{len(confs)}"
            shutil.copytree(REPO / "conf", confs[block.page])
        conf = confs[block.page]
        for need in needs.split():
            _provide(need, conf, modules)
        (conf / path).write_text(block.text, encoding="utf-8")
        env = Path(path).stem if path.startswith("environments/") else "local"
        project, errors = load_checked(conf, env)
        if errors or project is None:
            problems[str(block)] = "\n".join(str(e) for e in errors) or "no project"
        else:
            loaded += 1
    assert problems == {}
    assert loaded >= 15  # the README's first feed and the reference's examples


def _provide(need: str, conf: Path, modules: Path) -> None:
    """A stub for what a block needs: a table's spec, or a transform's module."""
    if ":" in need:  # package.module:function
        module, function = need.split(":")
        file = modules.joinpath(*module.split(".")).with_suffix(".py")
        file.parent.mkdir(parents=True, exist_ok=True)
        for parent in file.relative_to(modules).parents:
            (modules / parent / "__init__.py").touch()
        file.write_text(f"def {function}(df):\n    return df\n", encoding="utf-8")
        importlib.invalidate_caches()
        return
    layer, name = need.split(".")
    (conf / "tables" / layer / f"{name}.yaml").write_text(STUBS[layer], encoding="utf-8")


def commands(block: Block) -> list[tuple[int, list[str]]]:
    """Each medallion command of a bash block (its line in the page, its arguments): comments
    and what follows a shell operator (&, |, ;, >) dropped, a command substitution as one
    word, a line continued while a quote is open or it ends with a backslash."""
    found, pending, first = [], "", 0
    for offset, line in enumerate(block.text.splitlines()):
        if not pending:
            first = block.line + 1 + offset
        pending += line + "\n"
        if pending.rstrip().endswith("\\"):
            continue
        text = re.sub(r"\$\([^)]*\)", "SUBSTITUTED", pending)
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars="&|;<>")
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        pending = ""
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
        if not words or words[0] not in COMMANDS:
            continue
        args = []
        for word in words[1:]:
            if set(word) <= set("&|;<>"):
                break
            args.append(word)
        found.append((first, args))
    assert not pending, f"{block}: a quote is never closed"
    return found


def test_every_medallion_command_in_the_docs_parses() -> None:
    parser = build_parser()
    failed, seen = {}, 0
    for block in blocks("bash"):
        for line, args in commands(block):
            seen += 1
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    parser.parse_args(args)
            except SystemExit:
                failed[f"{block.page.relative_to(REPO)}:{line}"] = \
                    f"medallion {shlex.join(args)}: {err.getvalue().strip().splitlines()[-1:]}"
    assert failed == {}
    assert seen >= 30


def test_every_script_the_docs_run_exists() -> None:
    missing = [f"{block}: {word}" for block in blocks("bash")
               for word in shlex.split(block.text, comments=True) if SCRIPT.match(word)
               and not (REPO / word).is_file()]
    assert missing == []


@pytest.mark.slow
def test_the_first_feed_by_hand_runs_as_written(tmp_path: Path) -> None:
    """The feed written by hand in the docs, on a fresh folder (the README's first feed is run
    as written by tests/test_newcomer.py), and what the page says of the results found in the
    output."""
    blocks_of = section(REPO / "docs" / "first-feed-by-hand.md", None, None, "yaml", "bash")
    specs = [b.marker for b in blocks_of if b.lang == "yaml"]
    out = run_as_written(tmp_path, blocks_of)
    lake = tmp_path / "lakehouse" / "tables"
    assert specs == ["conf: tables/bronze/readings.yaml", "conf: tables/silver/readings.yaml",
                     "conf: tables/gold/daily_usage.yaml"]
    # m1 used 3.5 kWh that day (its repeated reading counted once); m2's negative reading is
    # in silver's quarantine, the cut line in bronze's
    assert re.search(r"2026-11-01\s*\|\s*m1\s*\|\s*3\.5\b", out), out[-3000:]
    assert "kwh >= 0" in out or "non_negative" in out
    assert '"kwh": 0.7' in out
    assert (lake / "gold" / "daily_usage").is_dir()
