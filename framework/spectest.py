"""``medallion test``: a spec's own tests, run offline on a few hand-made rows.

A case is a folder beside the configuration, ``conf/tests/<table>/<case>/``, where ``<table>``
is ``layer.name`` (``silver.orders``), or the bare name when one layer only has a table of that
name. It holds:

- the input: ``input.jsonl`` or ``input.csv``, or ordered batches ``input-1.jsonl``,
  ``input-2.jsonl``...: for a table fed by files (bronze), each the raw file as it would land;
  for a table reading another, each rows of that source table (JSON Lines objects, or CSV with a
  header, by column name), one Delta commit per batch. A table reading others besides its
  source (a mart's dimensions) has their rows in ``input.<layer>.<name>.jsonl``;
- ``expected.jsonl`` or ``expected.csv``: the table's rows after the run;
- optionally ``quarantine.jsonl`` (or ``.csv``): the rows expected in its quarantine.

Only the columns an expected file names are compared, typed by the table's own schema. Rows
are paired by the table's keys (:meth:`TableSpec.row_keys`) when the file names them all, so a
row whose key matches but whose values differ is shown column by column; rows are otherwise
compared whole, as multisets.

Each case runs the table's own job (:func:`framework.layers.job_class`), the code path of a
real run, once per input batch, on a scratch lake: a temporary root with the environment's
catalog schemas renamed for the case (dropped afterwards), so nothing reaches the user's lake
or catalog. The inputs are typed by the source's planned schema, as ``medallion validate``
derives it (:func:`framework.layers.planner`). Over Spark Connect the client reads the case's
files and sends their rows; the jobs run on the server as ``medallion run``'s do, so the server
must see the scratch lake: one on this machine, with a local root (:func:`scratch_refusal`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.config.model import Environment, Layer, LayerSchemas, Runtime, Stored, Table
from framework.errors import TableNotFoundError, UsageError
from framework.identifiers import quote, quote_name
from framework.layers import job_class

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from framework.config.model import ProjectConfig

FOLDER = "tests"  # under conf/
FORMATS = ("jsonl", "csv")
BATCH = re.compile(r"^input-(\d+)\.(jsonl|csv)$")
OTHER_INPUT = re.compile(r"^input\.(bronze|silver|gold)\.([A-Za-z_]\w*)\.(jsonl|csv)$")


class SpecTestError(UsageError):
    """Raised when a test case cannot be run as given (no input or expected file, a file that
    does not parse, a column the table does not have, a folder naming no table); exit code 2."""


@dataclass(frozen=True)
class Case:
    """One test case of a table: its input batches in order, the other tables' inputs, and the
    rows expected in the table and its quarantine."""

    table: Table
    name: str
    folder: Path
    batches: tuple[Path, ...]
    others: Mapping[tuple[Layer, str], Path]
    expected: Path
    quarantine: Path | None

    @property
    def title(self) -> str:
        return f"{self.table.layer.value}.{self.table.name}/{self.name}"


@dataclass
class Outcome:
    """What a case found: the rows expected, and each difference as a line."""

    case: Case
    expected_rows: int = 0
    quarantined_rows: int = 0
    differences: list[str] = field(default_factory=list)
    failure: str | None = None  # the run itself failed

    @property
    def passed(self) -> bool:
        return self.failure is None and not self.differences

    def lines(self) -> list[str]:
        if self.passed:
            quarantined = f", {self.quarantined_rows} quarantined" \
                if self.case.quarantine else ""
            return [f"PASS {self.case.title} ({_rows(self.expected_rows)}{quarantined})"]
        if self.failure is not None:
            return [f"FAIL {self.case.title}: the run failed: {self.failure}"]
        return [f"FAIL {self.case.title}", *(f"  {d}" for d in self.differences)]


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"


# ------------------------------------------------------------------------------ finding cases
def cases_folder(project: ProjectConfig) -> Path:
    return Path(project.conf_dir) / FOLDER


def table_of(project: ProjectConfig, name: str) -> Table:
    """The table ``layer.name`` or ``name`` (one layer only has it), or a full name."""
    layer, _, short = name.rpartition(".")
    if layer in {item.value for item in Layer}:
        return project.table(short, Layer(layer))
    return project.table(name)


def find_cases(project: ProjectConfig, names: Sequence[str] = ()) -> list[Case]:
    """The cases of the tables ``names`` (every case when none), in flow order; a clear error
    for a folder naming no table, a case without input or expected rows, and for no case."""
    asked = {(t.layer, t.name) for t in (table_of(project, n) for n in names)}
    root = cases_folder(project)
    found: list[Case] = []
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        try:
            table = table_of(project, folder.name)
        except TableNotFoundError:
            raise SpecTestError(f"{root}: expected a folder named after a configured table "
                                f"(layer.name, or a name one layer only has), found "
                                f"{folder.name!r}") from None
        if asked and (table.layer, table.name) not in asked:
            continue
        found += [_case(table, p) for p in sorted(folder.iterdir()) if p.is_dir()]
    if not found:
        which = ", ".join(sorted(f"{layer.value}.{name}" for layer, name in asked)) \
            or "any table"
        raise SpecTestError(
            f"expected test cases of {which} under {root}/<layer.name>/<case>/ (input.jsonl or "
            "input.csv, and expected.jsonl or expected.csv), found none")
    order = {(t.layer, t.name): i for i, t in enumerate(project.in_flow_order(project.tables))}
    return sorted(found, key=lambda c: (order[(c.table.layer, c.table.name)], c.name))


def _one(folder: Path, stem: str) -> Path | None:
    hits = [folder / f"{stem}.{ext}" for ext in FORMATS if (folder / f"{stem}.{ext}").is_file()]
    if len(hits) > 1:
        raise SpecTestError(f"{folder}: expected one of {stem}.jsonl and {stem}.csv, found both")
    return hits[0] if hits else None


def _case(table: Table, folder: Path) -> Case:
    single = _one(folder, "input")
    numbered = sorted(((int(m.group(1)), p) for p in folder.iterdir()
                       if (m := BATCH.match(p.name))), key=lambda b: b[0])
    if single and numbered:
        raise SpecTestError(f"{folder}: expected input.<jsonl|csv> or input-1, input-2..., "
                            f"found both")
    if numbered and [n for n, _ in numbered] != list(range(1, len(numbered) + 1)):
        raise SpecTestError(f"{folder}: expected input batches numbered 1, 2, ... in order, "
                            f"found {', '.join(p.name for _, p in numbered)}")
    batches = (single,) if single else tuple(p for _, p in numbered)
    if not batches:
        raise SpecTestError(f"{folder}: expected an input file (input.jsonl, input.csv, or "
                            f"batches input-1.jsonl, input-2.jsonl...), found none")
    expected = _one(folder, "expected")
    if expected is None:
        raise SpecTestError(f"{folder}: expected the rows the table should hold "
                            f"(expected.jsonl or expected.csv), found none")
    upstream = table.spec.upstream()
    others = {}
    for p in folder.iterdir():
        if m := OTHER_INPUT.match(p.name):
            key = (Layer(m.group(1)), m.group(2))
            if key not in upstream[1:]:
                needs = ", ".join(f"input.{lay.value}.{n}.jsonl" for lay, n in upstream[1:])
                raise SpecTestError(f"{p}: expected the input of a table "
                                    f"{table.layer.value}.{table.name} reads besides its "
                                    f"source ({needs or 'it reads no other'}), found {p.name}")
            others[key] = p
    missing = [f"input.{lay.value}.{n}.jsonl" for lay, n in upstream[1:]
               if (lay, n) not in others]
    if missing:
        raise SpecTestError(f"{folder}: expected the rows of every other table "
                            f"{table.layer.value}.{table.name} reads ({', '.join(missing)}), "
                            "found none")
    return Case(table, folder.name, folder, batches, others, expected,
                _one(folder, "quarantine"))


# ------------------------------------------------------------------------------ reading rows
def read_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The rows of a JSON Lines or CSV (with a header) file, and the columns they name in
    order of first appearance; CSV values are text (empty: null), typed later."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecTestError(f"{path}: expected a UTF-8 text file, found {exc}") from None
    records: list[dict[str, Any]] = []
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        for row in reader:
            if None in row:
                raise SpecTestError(f"{path}:{reader.line_num}: expected "
                                    f"{len(reader.fieldnames or [])} values as the header "
                                    f"names, found more")
            records.append({k: (v if v != "" else None) for k, v in row.items()})
        return list(reader.fieldnames or []), records
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise SpecTestError(f"{path}:{n}: expected a JSON object per line, found "
                                f"{line[:60]!r} ({exc})") from None
        if not isinstance(record, dict):
            raise SpecTestError(f"{path}:{n}: expected a JSON object per line, found "
                                f"{type(record).__name__}")
        records.append(record)
    return list(dict.fromkeys(k for r in records for k in r)), records


def check_columns(path: Path, columns: Sequence[str], schema: StructType, what: str) -> None:
    """Each column ``path`` names is one of ``schema``'s (those of ``what``)."""
    known = schema.fieldNames()
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise SpecTestError(f"{path}: expected columns of {what} ({', '.join(known)}), found "
                            f"{', '.join(unknown)}")


def typed(spark: SparkSession, path: Path, schema: StructType, what: str) -> DataFrame:
    """The rows of ``path`` typed by ``schema`` (every column nullable, those the file does
    not name null); a value that does not fit its column's type is a clear error."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    columns, records = read_records(path)
    check_columns(path, columns, schema, what)
    nullable = StructType([StructField(f.name, f.dataType, True) for f in schema.fields])
    if path.suffix == ".csv":
        text = StructType([StructField(c, StringType(), True) for c in columns])
        raw = spark.createDataFrame([tuple(r.get(c) for c in columns) for r in records], text)
        def cast(c: str) -> Column:  # null for text that is not of the type (ANSI or not)
            return F.expr(f"try_cast({quote(c)} AS {nullable[c].dataType.simpleString()})")

        df = raw.select(*(cast(c).alias(c) for c in columns))
        bad = raw.select(*(F.col(quote(c)).alias(f"raw_{i}") for i, c in enumerate(columns)),
                         *(cast(c).isNull().alias(f"null_{i}") for i, c in enumerate(columns)))
        for row in bad.collect():
            for i, c in enumerate(columns):
                if row[f"raw_{i}"] is not None and row[f"null_{i}"]:
                    raise SpecTestError(f"{path}: expected a value of type "
                                        f"{nullable[c].dataType.simpleString()} in column {c}, "
                                        f"found {row[f'raw_{i}']!r}")
    else:
        lines = spark.createDataFrame([(json.dumps(r),) for r in records], "value string")
        df = lines.select(F.from_json("value", nullable, {"mode": "FAILFAST"}).alias("r")) \
            .select("r.*")
        try:
            df = spark.createDataFrame(df.collect(), nullable)
        except Exception as exc:  # FAILFAST's error: a Py4J, Spark or Connect one, by where
            # the session runs
            raise SpecTestError(f"{path}: expected values of the types of {what}'s columns, "
                                f"found a row Spark cannot read so: "
                                f"{str(exc).strip().splitlines()[0]}") from None
    missing = [f for f in nullable.fields if f.name not in columns]
    return df.select(*(F.col(quote(c)) for c in columns),
                     *(F.lit(None).cast(f.dataType).alias(f.name) for f in missing)) \
        .select(*(F.col(quote(c)) for c in nullable.fieldNames()))


# ------------------------------------------------------------------------------ comparing rows
def _frozen(value: Any) -> Any:
    """A value that can be counted and compared: lists and structs as tuples, floats rounded
    to what their arithmetic order does not change."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def shown(value: Any) -> str:
    """A value as a person writes it in an expected file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float | Decimal | datetime | date):
        return str(value)
    return json.dumps(value, default=str)


def differences(expected: Sequence[Mapping[str, Any]], found: Sequence[Mapping[str, Any]],
                columns: Sequence[str], keys: Sequence[str], prefix: str = "") -> list[str]:
    """Each difference between the rows ``expected`` and ``found`` over ``columns``: a row
    whose ``keys`` match one row on each side shown column by column, the rest as rows missing
    and rows extra (multisets: a row expected twice must be found twice)."""
    def frozen(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(_frozen(row.get(c)) for c in columns)

    want = Counter(frozen(r) for r in expected)
    got = Counter(frozen(r) for r in found)
    missing = [r for r in want - got for _ in range((want - got)[r])]
    extra = [r for r in got - want for _ in range((got - want)[r])]
    lines: list[str] = []
    if keys and set(keys) <= set(columns):
        index = [columns.index(k) for k in keys]

        def key_of(row: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(row[i] for i in index)

        by_key_missing = Counter(key_of(r) for r in missing)
        by_key_extra = Counter(key_of(r) for r in extra)
        paired = {k for k in by_key_missing if by_key_missing[k] == 1 and by_key_extra[k] == 1}
        for key in sorted(paired, key=str):
            want_row = next(r for r in missing if key_of(r) == key)
            got_row = next(r for r in extra if key_of(r) == key)
            name = ", ".join(f"{k}={shown(v)}" for k, v in zip(keys, key, strict=True))
            lines += [f"{prefix}{name}: {c} expected {shown(a)}, found {shown(b)}"
                      for c, a, b in zip(columns, want_row, got_row, strict=True) if a != b]
        missing = [r for r in missing if key_of(r) not in paired]
        extra = [r for r in extra if key_of(r) not in paired]

    def row_text(row: tuple[Any, ...]) -> str:
        return ", ".join(f"{c}={shown(v)}" for c, v in zip(columns, row, strict=True))

    lines += [f"{prefix}missing: {row_text(r)}" for r in sorted(missing, key=str)]
    lines += [f"{prefix}extra: {row_text(r)}" for r in sorted(extra, key=str)]
    return lines


# ------------------------------------------------------------------------------ the scratch lake
def scratch_refusal(env: Environment) -> str | None:
    """Why ``env``'s session cannot run cases on a scratch lake in a local temporary folder
    (None: it can): a local session can, and so can a Spark Connect server of this machine
    (an environment whose root is a local folder and whose server is on a loopback address or
    this host's name); a cluster's, or a server elsewhere, cannot see this machine's disk."""
    import socket
    from urllib.parse import urlparse

    from framework.serve import is_loopback
    from framework.session import resolved_runtime
    from framework.storage.base import scheme_of

    runtime = resolved_runtime(env)
    if runtime is Runtime.LOCAL:
        return None
    found = f"environment {env.name!r} of runtime {runtime.value} with root {env.root!r}"
    if runtime is Runtime.CONNECT and scheme_of(env.root) in ("", "file"):
        host = urlparse(env.remote_url().split(";", 1)[0]).hostname or ""
        if is_loopback(host) or host == socket.gethostname():
            return None
        found += f" and server {host!r}, another machine"
    return (f"expected a local session, or a Spark Connect server on this machine (runtime "
            f"connect with a local root), to run test cases on a scratch lake in a temporary "
            f"folder; found {found}: run `medallion test` with a local environment (--env local)")


@contextlib.contextmanager
def scratch_env(spark: SparkSession, env: Environment) -> Iterator[Environment]:
    """``env`` on a temporary root, with catalog schemas of its own; the schemas are dropped
    and the root removed on the way out."""
    root = tempfile.mkdtemp(prefix="medallion-test-")
    suffix = uuid.uuid4().hex[:8]
    schemas = LayerSchemas(**{part: f"{getattr(env.schemas, part)}_test_{suffix}"
                              for part in ("bronze", "silver", "gold", "ops")})
    scratch = env.model_copy(update={"root": root, "schemas": schemas})
    try:
        yield scratch
    finally:
        for part in ("bronze", "silver", "gold", "ops"):
            with contextlib.suppress(Exception):  # (never made: nothing to drop)
                spark.sql(f"DROP SCHEMA IF EXISTS "
                          f"{quote_name(f'{env.catalog}.{getattr(schemas, part)}')} CASCADE")
        shutil.rmtree(root, ignore_errors=True)


def upstream_closure(project: ProjectConfig, table: Table) -> list[Table]:
    """``table`` and every table it reads, directly or not, in flow order."""
    seen: dict[tuple[Layer, str], Table] = {}
    todo = [table]
    while todo:
        t = todo.pop()
        if (t.layer, t.name) in seen:
            continue
        seen[(t.layer, t.name)] = t
        todo += [project.table(name, layer) for layer, name in t.spec.upstream()]
    return project.in_flow_order(seen.values())


def _schema_of(schemas: Mapping[tuple[Layer, str], StructType], key: tuple[Layer, str],
               case: Case) -> StructType:
    schema = schemas.get(key)
    if schema is None:
        raise SpecTestError(f"{case.folder}: expected the columns of {key[0].value}.{key[1]} "
                            "known before it runs, to type the input rows by, found none (a "
                            "spec with a transform, or a feed of records): test the table it "
                            "feeds from a table whose columns are declared")
    return schema


def _land(table: Table, batch: Path, n: int) -> None:
    """The raw file ``batch`` landed in the feed's landing folder, named as its path wants."""
    landing = table.spec.backlog_path(table)
    if landing is None:
        raise SpecTestError(f"{batch}: expected {table.layer.value}.{table.name} to read "
                            "files from a landing folder, as the input file lands there; found "
                            "a table without one")
    folder, _, last = landing.rpartition("/")
    if not any(c in last for c in "*?[{"):
        folder, last = landing, ""
    name = f"{n:05d}-{batch.name}"
    if last.startswith("*.") and not any(c in last[2:] for c in "*?[{"):
        name = f"{n:05d}-{batch.stem}.{last[2:]}"
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(batch, os.path.join(folder, name))


def _rows_of(spark: SparkSession, location: str) -> DataFrame | None:
    from framework.delta import is_delta_table

    return spark.read.format("delta").load(location) if is_delta_table(spark, location) \
        else None


def run_case(spark: SparkSession, project: ProjectConfig, case: Case) -> Outcome:
    """The case's table run on a scratch lake, batch by batch, then its rows compared."""
    from framework.job import RunContext, RunStatus

    closure = upstream_closure(project, case.table)
    from framework.sqlcheck import planned_schemas

    schemas = planned_schemas(spark, closure)
    own = schemas.get((case.table.layer, case.table.name))
    expected_columns, expected = read_records(case.expected)
    what = f"{case.table.layer.value}.{case.table.name}"
    if own is not None:
        check_columns(case.expected, expected_columns, own, what)
    upstream = case.table.spec.upstream()
    source = upstream[0] if upstream else None
    with scratch_env(spark, project.env) as env:
        tables = {(t.layer, t.name): replace(t, env=env) for t in closure}
        target = tables[(case.table.layer, case.table.name)]
        for t in tables.values():
            for folder in t.spec.folders(t):
                os.makedirs(folder, exist_ok=True)
        for key, path in case.others.items():
            typed(spark, path, _schema_of(schemas, key, case), f"{key[0].value}.{key[1]}") \
                .write.format("delta").mode("append").save(tables[key].location)
        for n, batch in enumerate(case.batches, 1):
            if source is None:
                _land(target, batch, n)
            else:
                typed(spark, batch, _schema_of(schemas, source, case),
                      f"{source[0].value}.{source[1]}").coalesce(1).write.format("delta") \
                    .mode("append").save(tables[source].location)
            summary = job_class(target)(spark, target, RunContext()).run()
            if summary.status is RunStatus.FAILED:
                return Outcome(case, failure=summary.error)
        return _outcome(spark, case, target, len(expected))


def _outcome(spark: SparkSession, case: Case, target: Table, expected: int) -> Outcome:
    """What the run left in ``target`` (and its quarantine) against what the case expects."""
    what = f"{case.table.layer.value}.{case.table.name}"
    outcome = Outcome(case, expected_rows=expected)
    found = spark.read.format("delta").load(target.location) \
        if target.spec.stored() is Stored.DELTA else spark.table(target.full_name)
    outcome.differences = _compare(spark, case.expected, found, what, case.table.spec.row_keys())
    if case.quarantine is not None:
        quarantine = _rows_of(spark, target.companion_location("quarantine"))
        columns, rows = read_records(case.quarantine)
        outcome.quarantined_rows = len(rows)
        if quarantine is None:  # none was made: any row expected there is missing
            outcome.differences += differences(rows, [], columns, [], "quarantine ")
        else:
            outcome.differences += _compare(spark, case.quarantine, quarantine,
                                            f"{what}'s quarantine", [], "quarantine ")
    return outcome


def _compare(spark: SparkSession, path: Path, found: DataFrame, what: str,
             keys: Sequence[str], prefix: str = "") -> list[str]:
    """The differences between the rows of ``path`` and those ``found``, over the columns the
    file names (every column when it names none: an empty file, no row expected)."""
    from pyspark.sql import functions as F

    columns, _ = read_records(path)
    check_columns(path, columns, found.schema, what)
    columns = columns or found.columns
    picked = [F.col(quote(c)) for c in columns]
    want = [r.asDict(recursive=True) for r in typed(spark, path, found.schema, what)
            .select(*picked).collect()]
    got = [r.asDict(recursive=True) for r in found.select(*picked).collect()]
    return differences(want, got, columns, keys, prefix)


def run_cases(spark: SparkSession, project: ProjectConfig, cases: Sequence[Case]
              ) -> Iterator[Outcome]:
    """Each case run, in order."""
    for case in cases:
        yield run_case(spark, project, case)
