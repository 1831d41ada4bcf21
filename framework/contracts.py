"""Data contracts: a table's spec as an Open Data Contract Standard (ODCS v3) document, a
contract compared with the specs and the live tables, and a new feed's specs from a contract.

Three directions, one mapping:

- **out** (:func:`export`): a table's columns (types from its live Delta table where the lake has
  it, else as its spec declares them), its key (:meth:`TableSpec.row_keys`), its row rules and
  table checks as ``quality``, its freshness checks as ``slaProperties`` (``latency``), and the
  environment's storage as a server. Each document is built with the standard's own pydantic
  models (``open_data_contract_standard.model``) and validated against its JSON schema before
  it is written.
- **in, as a gate** (:func:`compare`): a contract against the document the specs give now; a
  column removed or renamed, a type narrowed, nullability tightened, the key changed, a
  promised quality rule or SLA missing (or weakened) is breaking; anything else that differs
  is compatible.
- **to specs** (:mod:`framework.contract_init`): the bronze and silver specs of a new feed
  from a producer's contract (schema, key, rules, freshness).

Each quality rule and SLA exported keeps the spec's own form in a custom property (``rule`` for
a row rule, ``check`` for a table check), so a contract read back names exactly what the spec
said; the standard's own fields (a SQL query, a library metric) say the same for any reader.
The framework knows no layer here: what a spec holds it says through :class:`TableSpec`'s hooks.
Nothing here imports Spark: ``contract check`` runs in a CI job without a JVM.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from framework.columns import Column, Columns, normal_type
from framework.config.checks import CheckAction, Freshness, FreshnessBy, References, Unique
from framework.config.model import Layer, ProjectConfig, RuleKind, Stored, Table
from framework.errors import ContractError
from framework.eventtime import interval_seconds

if TYPE_CHECKING:
    from open_data_contract_standard.model import DataQuality, SchemaProperty

API_VERSION = "v3.1.0"  # an ODCS version the package's JSON schema accepts (its enum)
KIND = "DataContract"
DEFAULT_VERSION = "1.0.0"
# The top-level keys first in a document written (the standard's fundamentals), then the rest.
ORDER = ("apiVersion", "kind", "id", "name", "version", "status", "description", "schema")
# The custom properties that keep the spec's own form of a rule or check.
RULE, CHECK = "rule", "check"
LATENCY = "latency"  # the SLA property of a freshness check

# Delta's names of primitive types (its log's schema) as Spark SQL writes them.
DELTA_TYPES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
# A Spark SQL type's first word -> ODCS logicalType.
LOGICAL = {
    **dict.fromkeys(("string", "varchar", "char", "character"), "string"),
    **dict.fromkeys(("tinyint", "byte", "smallint", "short", "int", "integer", "bigint",
                     "long"), "integer"),
    **dict.fromkeys(("float", "real", "double", "decimal", "dec", "numeric"), "number"),
    "boolean": "boolean", "date": "date", "array": "array", "map": "map", "struct": "object",
    **dict.fromkeys(("timestamp", "timestamp_ltz", "timestamp_ntz"), "timestamp"),
}
# Integer types from the narrowest, each widening to those after it (and to decimals wide
# enough, and to double).
INTEGERS = ("tinyint", "smallint", "int", "bigint")
INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
ALIASES = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint",
           "real": "float", "dec": "decimal", "numeric": "decimal", "timestamp_ltz": "timestamp"}
_DECIMAL = re.compile(r"^decimal(?:\((\d+)(?:,(\d+))?\))?$")
_NOT_NULL = re.compile(r"^\(?\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s+IS\s+NOT\s+NULL\s*\)?$",
                       re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60,
          "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "d": 86_400,
          "day": 86_400, "days": 86_400, "w": 604_800, "week": 604_800, "weeks": 604_800}


class ContractAction(StrEnum):
    """What ``medallion contract`` does."""

    EXPORT = "export"  # the tables' specs as ODCS documents
    CHECK = "check"  # contracts against the specs and the live tables: a CI gate
    INIT = "init"  # a new feed's bronze and silver specs from a producer's contract


# ------------------------------------------------------------------------------ the schema
def odcs_schema() -> dict[str, Any]:
    """The ODCS JSON schema shipped with the standard's package."""
    text = resources.files("open_data_contract_standard").joinpath("schema.json").read_text(
        encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def schema_problems(doc: Mapping[str, Any]) -> list[str]:
    """Each way ``doc`` breaks the ODCS JSON schema, as ``at <path>: <message>``."""
    import jsonschema

    validator = jsonschema.Draft201909Validator(odcs_schema())
    found = sorted(validator.iter_errors(dict(doc)), key=lambda e: list(map(str, e.path)))
    return [f"at {_path(e.absolute_path) or 'the top'}: {e.message}" for e in found]


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def read_contract(path: str | Path) -> dict[str, Any]:
    """A contract file, valid against the ODCS JSON schema and read by the standard's model;
    a :class:`ContractError` saying what was expected and what was found otherwise."""
    from open_data_contract_standard.model import OpenDataContractStandard
    from pydantic import ValidationError

    file = Path(path)
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ContractError(f"expected a contract file at {file}, found: {exc.strerror}"
                            ) from exc
    except yaml.YAMLError as exc:
        raise ContractError(f"expected YAML in {file}, found: {str(exc).splitlines()[0]}"
                            ) from exc
    if not isinstance(doc, dict):
        raise ContractError(f"expected an ODCS document (a mapping) in {file}, found "
                            f"{type(doc).__name__}")
    problems = schema_problems(doc)
    if problems:
        raise ContractError(f"expected an ODCS document valid against its JSON schema in "
                            f"{file}, found {len(problems)} problem(s): "
                            + "; ".join(problems[:5]))
    try:
        OpenDataContractStandard.model_validate(doc)
    except ValidationError as exc:
        raise ContractError(f"expected an ODCS document in {file}, found: "
                            f"{str(exc).splitlines()[0]}") from exc
    if not doc.get("schema"):
        raise ContractError(f"expected at least one table under schema in {file}, found none")
    return doc


# ----------------------------------------------------------------------- columns and types
@dataclass(frozen=True)
class LiveColumn:
    """A column of a live Delta table, from its log."""

    name: str
    type: str  # Spark SQL's name, lower case: decimal(12,2), array<string>
    nullable: bool
    comment: str


def spark_type(delta: Any) -> str:
    """A type of a Delta log's schema (its JSON form) as Spark SQL writes it."""
    if isinstance(delta, str):
        return DELTA_TYPES.get(delta, delta).replace(" ", "")
    kind = delta.get("type")
    if kind == "array":
        return f"array<{spark_type(delta['elementType'])}>"
    if kind == "map":
        return f"map<{spark_type(delta['keyType'])},{spark_type(delta['valueType'])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{spark_type(f['type'])}"
                                    for f in delta.get("fields", [])) + ">"
    return str(kind)


def live_columns(table: Table) -> list[LiveColumn] | None:
    """The columns of ``table``'s Delta table as its log has them (read by ``deltalake``, no
    JVM); None when the lake has no such table, or it cannot be read without Spark."""
    from framework import deltalog

    if table.spec.stored() is not Stored.DELTA or not deltalog.readable(table.env):
        return None
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri, options = deltalog.table_uri(table.location, table.env)
    if "://" not in uri and not Path(uri, "_delta_log").is_dir():
        return None
    try:
        schema = json.loads(DeltaTable(uri, storage_options=options or None).schema().to_json())
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise ContractError(f"expected to read the Delta log of {table.full_name} at "
                            f"{table.location}, found: {exc}") from exc
    return [LiveColumn(f["name"], spark_type(f["type"]), bool(f.get("nullable", True)),
                       str((f.get("metadata") or {}).get("comment", "")))
            for f in schema.get("fields", [])]


def declared_columns(project: ProjectConfig) -> dict[tuple[Layer, str], Columns]:
    """Every table's columns as the specs declare them, each from those of the tables it reads
    (as ``medallion validate`` knows them, without data)."""
    known: dict[tuple[Layer, str], Columns] = {}
    for table in project.in_flow_order(project.tables):
        declared = table.spec.declared_columns(table, known)
        if declared is not None:
            known[(table.layer, table.name)] = declared
    return known


def with_planned(project: ProjectConfig, known: Mapping[tuple[Layer, str], Columns],
                 tables: Iterable[Table]) -> dict[tuple[Layer, str], Columns]:
    """``known`` with the columns Spark plans (:func:`framework.sqlcheck.planned_schemas`) for
    each table whose types the specs leave unknown (an expression's, a view's) and the lake has
    no Delta table of; Spark is started only when one of ``tables`` needs it."""
    merged = dict(known)
    unknown = [t for t in tables if (declared := known.get((t.layer, t.name))) is None
               or any(c.type is None for c in declared.fields)]
    if not [t for t in unknown if live_columns(t) is None]:
        return merged
    from framework.sqlcheck import parser_session, planned_schemas

    for key, schema in planned_schemas(parser_session(project.env),
                                       project.in_flow_order(project.tables)).items():
        name = project.env.table_name(*key)
        merged[key] = Columns(name, tuple(Column(f.name, f.dataType.simpleString())
                                          for f in schema.fields))
    return merged


def logical_type(physical: str) -> str | None:
    """The ODCS logical type of a Spark SQL type (None for one it has no word for)."""
    word = re.match(r"[a-z_]+", physical.lower())
    return LOGICAL.get(word.group(0)) if word else None


def not_null_columns(rule: str) -> list[str]:
    """The columns a rule holds non-null when it is only that (``a IS NOT NULL AND b IS NOT
    NULL``); none for any other rule."""
    parts = re.split(r"\s+AND\s+", rule.strip(), flags=re.IGNORECASE)
    found = [_NOT_NULL.match(p.strip()) for p in parts]
    return [m.group(1) for m in found if m] if all(found) else []


# ----------------------------------------------------------------------------------- export
def export(project: ProjectConfig, table: Table, version: str = DEFAULT_VERSION,
           declared: Mapping[tuple[Layer, str], Columns] | None = None, *,
           validate: bool = True, live: bool = True) -> dict[str, Any]:
    """``table``'s contract: an ODCS document (a mapping, as written to YAML), built with the
    standard's models; with ``validate``, valid against its JSON schema (a
    :class:`ContractError` if not: a column whose type is unknown, say). Columns are those of
    the live table where the lake has it (and ``live``), else ``declared`` (the specs', by
    default)."""
    from open_data_contract_standard.model import (
        CustomProperty,
        Description,
        OpenDataContractStandard,
        SchemaObject,
        ServiceLevelAgreementProperty,
    )

    spec = table.spec
    declared = declared_columns(project) if declared is None else declared
    found = live_columns(table)
    columns = found if live else None
    props = _properties(table, declared.get((table.layer, table.name)), found, live)
    sla = [ServiceLevelAgreementProperty(
        id=c.check_name, property=LATENCY, **_latency(c.freshness),
        element=f"{table.name}.{spec.event_time_column()}"
        if c.by is FreshnessBy.EVENT_TIME and spec.event_time_column() else None,
        description=_freshness_text(c),
        customProperties=[CustomProperty(property=CHECK, value=_check_value(c))])
        for c in spec.table_checks() if isinstance(c, Freshness)]
    contract = OpenDataContractStandard(
        apiVersion=API_VERSION, kind=KIND, id=f"{table.layer.value}.{table.name}",
        name=table.full_name, version=version, status="active",
        description=Description(purpose=spec.description) if spec.description else None,
        servers=[_server(table)],
        schema=[SchemaObject(
            name=f"{table.layer.value}.{table.name}", physicalName=table.full_name,
            physicalType="view" if spec.stored() is Stored.VIEW else "table",
            logicalType="object", description=spec.description or None, properties=props,
            quality=_quality(table) or None)],
        slaProperties=sla or None,
        customProperties=[CustomProperty(property="columnsFrom",
                                         value="table" if columns is not None else "spec")])
    dumped = contract.model_dump(mode="json", exclude_none=True, by_alias=True)
    doc: dict[str, Any] = {k: dumped[k] for k in (*ORDER, *dumped) if k in dumped}
    problems = schema_problems(doc) if validate else []
    if problems:
        raise ContractError(f"expected {table.full_name}'s contract to be valid against the ODCS "
                            f"JSON schema, found: {'; '.join(problems[:5])}")
    return doc


def _properties(table: Table, declared: Columns | None, live: Sequence[LiveColumn] | None,
                from_live: bool) -> list[SchemaProperty]:
    """The columns: the live table's (``from_live``), else the declared ones, with what the
    live table says where the spec does not (a type, a column that holds no NULL, a comment)."""
    from open_data_contract_standard.model import SchemaProperty

    spec = table.spec
    keys = spec.row_keys()
    comments, expressions = spec.column_comments(), spec.column_expressions()
    not_null = {c.lower() for r in spec.row_rules()
                if r.kind is RuleKind.EXPECTATION and r.enforced
                for c in not_null_columns(r.content)}
    columns: list[tuple[str, str | None, bool, str]]
    if live is not None and from_live:
        columns = [(c.name, c.type, not c.nullable, c.comment) for c in live]
    else:
        seen = {c.name.lower(): c for c in live or ()}
        columns = []
        for c in declared.fields if declared else ():
            there = seen.get(c.name.lower())
            columns.append((c.name, c.type or (there.type if there else None), False,
                            there.comment if there else ""))
    props = []
    for name, kind, non_null, comment in columns:
        position = next((i for i, k in enumerate(keys, 1) if k.lower() == name.lower()), None)
        props.append(SchemaProperty(
            name=name, physicalName=name, physicalType=kind,
            logicalType=logical_type(kind) if kind else None, **_inner(kind),
            required=non_null or name.lower() in not_null,
            primaryKey=True if position is not None else None, primaryKeyPosition=position,
            description=comments.get(name) or comment or None,
            transformLogic=expressions.get(name)))
    return props


def _inner(kind: str | None) -> dict[str, Any]:
    """A nested type's parts as ODCS describes them: an array's ``items``, a map's ``map``
    (key and value), a struct's ``properties``."""
    from open_data_contract_standard.model import MapDefinition, SchemaProperty

    def part(text: str, name: str | None = None) -> SchemaProperty:
        return SchemaProperty(name=name, physicalType=text, logicalType=logical_type(text),
                              **_inner(text))

    logical = logical_type(kind) if kind else None
    if kind is None or "<" not in kind or logical not in ("array", "map", "object"):
        return {}
    inside = split_top(kind[kind.index("<") + 1:kind.rindex(">")])
    if logical == "array" and len(inside) == 1:
        return {"items": part(inside[0])}
    if logical == "map" and len(inside) == 2:
        return {"map": MapDefinition(key=part(inside[0]), value=part(inside[1]))}
    fields = [f.partition(":") for f in inside]
    return {"properties": [part(t, n.strip("`")) for n, _, t in fields]}


def split_top(text: str) -> list[str]:
    """``text`` split at its commas outside ``<...>`` and ``(...)``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "<(" else -1 if ch in ">)" else 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in [*parts, text[start:]] if p.strip()]


def _check_value(check: Any) -> dict[str, Any]:
    """A table check as the spec writes it (its defaults too)."""
    value: dict[str, Any] = check.model_dump(mode="json", exclude_none=True)
    return value


def _quality(table: Table) -> list[DataQuality]:
    """The row rules and the table checks (but freshness, an SLA) as ODCS quality rules."""
    from open_data_contract_standard.model import CustomProperty, DataQuality

    rules = []
    for r in table.spec.row_rules():
        if r.kind is not RuleKind.EXPECTATION:  # (the table checks follow)
            continue
        rules.append(DataQuality(
            id=r.name, name=r.name, type="sql", dimension="conformity",
            severity="error" if r.enforced else "warning",
            description=f"each row: {r.content} (a row breaking it: {r.action})",
            query=f"SELECT COUNT(*) FROM ${{table}} WHERE NOT coalesce(({r.content}), false)",
            mustBe=0, customProperties=[CustomProperty(property=RULE, value={
                "name": r.name, "rule": r.content, "action": r.action})]))
    for c in table.spec.table_checks():
        custom = [CustomProperty(property=CHECK, value=_check_value(c))]
        severity = "warning" if c.action is CheckAction.WARN else "error"
        if isinstance(c, Unique):
            rules.append(DataQuality(
                id=c.check_name, name=c.check_name, type="library", metric="duplicateValues",
                arguments={"properties": list(c.unique)}, mustBe=0, dimension="uniqueness",
                severity=severity, unit="rows", customProperties=custom,
                description=f"no two rows share {', '.join(c.unique)} ({c.action.value})"))
        elif isinstance(c, References):
            ref = c.references
            other = table.env.table_name(Layer(ref.layer), ref.table)
            rules.append(DataQuality(
                id=c.check_name, name=c.check_name, type="sql", dimension="consistency",
                severity=severity, customProperties=custom, mustBe=0,
                description=f"each row's {ref.column} is a {ref.target_key} of {other} "
                f"({c.action.value})",
                query=f"SELECT COUNT(*) FROM ${{table}} t WHERE t.{ref.column} IS NOT NULL AND "
                f"NOT EXISTS (SELECT 1 FROM {other} o WHERE o.{ref.target_key} = "
                f"t.{ref.column})"))
        elif not isinstance(c, Freshness):  # volume: the rows each run writes
            bounds_text = c.volume.model_dump_json(exclude_none=True)
            rules.append(DataQuality(
                id=c.check_name, name=c.check_name, type="custom", engine="medallion",
                implementation=_check_value(c), dimension="completeness", severity=severity,
                unit="rows", customProperties=custom,
                description=f"the rows a run writes are within {bounds_text} "
                f"({c.action.value})"))
    return rules


def _freshness_text(check: Freshness) -> str:
    by = "event time" if check.by is FreshnessBy.EVENT_TIME else "commit"
    return (f"the table's newest {by} is no older than {check.freshness} at the end of each "
            f"run ({check.action.value} otherwise)")


def _latency(interval: str) -> dict[str, Any]:
    """A freshness interval as an SLA's value and unit, in its largest whole unit."""
    seconds = interval_seconds(interval)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return {"value": seconds // size, "unit": unit}
    return {"value": seconds, "unit": "s"}


def latency_seconds(sla: Mapping[str, Any]) -> int | None:
    """An SLA's value in seconds (None: a unit not of time, or no number)."""
    value, unit = sla.get("value"), str(sla.get("unit") or "s").strip().lower()
    if isinstance(value, str):
        try:
            return interval_seconds(value)
        except ValueError:
            return None
    if not isinstance(value, int | float) or isinstance(value, bool) or unit not in _UNITS:
        return None
    return int(value * _UNITS[unit])


def _server(table: Table) -> Any:
    """Where the table is: its location on the environment's storage (a view: its catalog)."""
    from open_data_contract_standard.model import Server

    env = table.env
    common = {"id": env.name, "server": env.name, "environment": env.name}
    if table.spec.stored() is Stored.VIEW:
        return Server(type="custom", catalog=env.catalog, schema=table.schema, **common)
    fmt = table.spec.stored().value
    scheme = table.location.split("://")[0] if "://" in table.location else ""
    if scheme in ("", "file"):
        return Server(type="local", path=table.location.removeprefix("file://"), format=fmt,
                      **common)
    if scheme in ("abfss", "abfs"):
        return Server(type="azure", location=table.location, format=fmt, **common)
    return Server(type="custom", location=table.location, format=fmt, catalog=env.catalog,
                  schema=table.schema, **common)


def dump(doc: Mapping[str, Any]) -> str:
    """A contract as YAML, in the standard's order of keys."""
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True)


def contract_file(folder: str | Path, table: Table) -> Path:
    """Where ``contract export`` writes ``table``'s contract in ``folder``."""
    return Path(folder) / f"{table.layer.value}.{table.name}.odcs.yaml"


# ---------------------------------------------------------------------------------- compare
@dataclass(frozen=True)
class Finding:
    """One difference between a contract and the specs: breaking or compatible."""

    breaking: bool
    table: str
    text: str

    def render(self) -> str:
        return f"{'breaking' if self.breaking else 'compatible'}: {self.table}: {self.text}"


def contract_table(project: ProjectConfig, obj: Mapping[str, Any]) -> Table | None:
    """The configured table a contract's schema object names (``layer.table`` in its name,
    else its physical name); a short name several layers have is the silver table's (a feed's
    contract: typed, keyed and checked there). None when none is configured."""
    from framework.errors import TableNotFoundError

    for name in (obj.get("name"), obj.get("physicalName")):
        if not name:
            continue
        layer, dot, short = str(name).partition(".")
        try:
            if dot and layer in {x.value for x in Layer} and "." not in short:
                return project.table(short, Layer(layer))
            return project.table(str(name))
        except TableNotFoundError:
            hits = [t for t in project.tables if t.name == name and t.layer is Layer.SILVER]
            if hits:
                return hits[0]
    return None


def check(project: ProjectConfig, contract: Mapping[str, Any]) -> list[Finding]:
    """Every difference between ``contract`` and what the specs (and the live tables, where
    the lake has them) give now, each breaking or compatible."""
    declared = declared_columns(project)
    findings: list[Finding] = []
    for obj in contract.get("schema") or []:
        table = contract_table(project, obj)
        name = str(obj.get("name") or obj.get("physicalName"))
        if table is None:
            findings.append(Finding(True, name, "table not configured (the contract has it)"))
            continue
        spec = export(project, table, declared=declared, validate=False, live=False)
        live = export(project, table, declared=declared, validate=False) \
            if live_columns(table) is not None else None
        held = live["schema"][0] if live else None
        found = compare(contract, obj, spec, spec["schema"][0], held)
        if live is not None and held is not None:  # rows written before the spec changed
            said = {f.text for f in found}
            found += [Finding(f.breaking, f.table, f"{f.text} in the live table")
                      for f in compare(contract, obj, live, held, nullability=False)
                      if f.text not in said]
        findings += found
    return findings


def compare(contract: Mapping[str, Any], promised: Mapping[str, Any],
            current: Mapping[str, Any], found: Mapping[str, Any],
            live: Mapping[str, Any] | None = None, *, nullability: bool = True
            ) -> list[Finding]:
    """The differences of the schema object ``found`` (of the document ``current``, from the
    specs) from ``promised`` (of ``contract``). Nullability is the spec's rules' (what keeps
    rows with a NULL out); a column the ``live`` table holds no NULL in is not loosened, and
    without ``nullability`` it is not compared at all (a live table's is no change)."""
    table = str(found.get("name"))
    out: list[Finding] = []

    def add(breaking: bool, text: str) -> None:
        out.append(Finding(breaking, table, text))

    was = {str(p["name"]).lower(): p for p in promised.get("properties") or []}
    now = {str(p["name"]).lower(): p for p in found.get("properties") or []}
    for key, p in was.items():
        q = now.get(key)
        if q is None:
            add(True, f"column {p['name']} removed or renamed (the contract has it"
                f"{', ' + _type_of(p) if _type_of(p) else ''})")
            continue
        kept = {str(x["name"]).lower(): x for x in (live or {}).get("properties") or []}
        out += [Finding(b, table, t) for b, t in _column_changes(
            p, q, nullability, bool(kept.get(key, {}).get("required")))]
    for key, q in now.items():
        if key not in was:
            kind = f" ({_type_of(q)})" if _type_of(q) else ""
            add(False, f"column {q['name']} added{kind}")
    old_key, new_key = contract_key(promised), contract_key(found)
    if old_key != new_key:
        add(True, f"key changed: expected ({', '.join(old_key) or 'none'}), found "
            f"({', '.join(new_key) or 'none'})")
    out += [Finding(b, table, t) for b, t in _quality_changes(promised, found)]
    out += [Finding(b, table, t) for b, t in _sla_changes(contract, current)]
    return out


def _type_of(prop: Mapping[str, Any]) -> str:
    return normal_type(str(prop.get("physicalType") or prop.get("logicalType") or ""))


def _column_changes(p: Mapping[str, Any], q: Mapping[str, Any], nullability: bool = True,
                    held: bool = False) -> list[tuple[bool, str]]:
    name, changes = q["name"], []
    old, new = _type_of(p), _type_of(q)
    if not p.get("physicalType") and q.get("physicalType"):  # a contract of logical types
        new = str(q.get("logicalType") or "")
        if old == "integer" and new == "number":
            changes.append((False, f"column {name}: type widened from integer to number"))
            new = old
    if old and new and old != new and not (q.get("physicalType") is None and
                                           p.get("physicalType") is not None):
        if widens(old, new):
            changes.append((False, f"column {name}: type widened from {old} to {new}"))
        else:
            changes.append((True, f"column {name}: type narrowed or changed: expected {old}, "
                                  f"found {new}"))
    was, now = _required(p), bool(q.get("required"))
    if not nullability:
        pass
    elif now and not was:
        changes.append((True, f"column {name}: nullability tightened: the contract allows "
                              "NULL, the table now requires a value"))
    elif was and not now and not held:
        changes.append((False, f"column {name}: nullability loosened: NULL now allowed"))
    if p.get("description") and q.get("description") and p["description"] != q["description"]:
        changes.append((False, f"column {name}: description changed"))
    return changes


def _required(prop: Mapping[str, Any]) -> bool:
    """Whether a contract's column holds no NULL: ``required``, or a rule of its own that
    counts its NULLs must find none."""
    return bool(prop.get("required")) or any(
        (r.get("metric") or r.get("rule")) in NULL_METRICS and r.get("mustBe") == 0
        for r in prop.get("quality") or [])


NULL_METRICS = ("nullValues", "missingValues")


def contract_key(obj: Mapping[str, Any]) -> list[str]:
    keyed = [p for p in obj.get("properties") or [] if p.get("primaryKey")]
    return [str(p["name"]) for p in sorted(keyed, key=lambda p: p.get("primaryKeyPosition")
                                           or 0)]


def _definition(rule: Mapping[str, Any]) -> tuple[str, str, bool]:
    """What a quality rule promises, its action, and whether that is a spec's form (kept in
    its custom property, the action aside) or else its standard fields (a producer's rule)."""
    for prop in rule.get("customProperties") or []:
        if prop.get("property") in (RULE, CHECK) and isinstance(prop.get("value"), dict):
            value = dict(prop["value"])
            action = str(value.pop("action", ""))
            value.pop("name", None)
            if prop["property"] == RULE:
                value["rule"] = " ".join(str(value.get("rule", "")).split())
            return json.dumps(value, sort_keys=True), action, True
    fields = {k: v for k, v in rule.items() if k not in (
        "id", "name", "description", "severity", "customProperties", "tags", "dimension")}
    return (json.dumps(fields, sort_keys=True, default=str), str(rule.get("severity") or ""),
            False)


ENFORCING = {"drop", "quarantine", "fail", "hold", "error"}


def _quality_changes(promised: Mapping[str, Any], found: Mapping[str, Any]
                     ) -> list[tuple[bool, str]]:
    def named(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        rules = [*(obj.get("quality") or []), *(r for p in obj.get("properties") or []
                                                for r in p.get("quality") or [])]
        return {str(r.get("name") or r.get("id") or i): r for i, r in enumerate(rules)}

    was, now, changes = named(promised), named(found), []
    for name, rule in was.items():
        if name not in now:
            changes.append((True, f"quality rule {name} missing (the contract promises: "
                                  f"{rule.get('description') or _definition(rule)[0]})"))
            continue
        (old, old_action, ours), (new, new_action, kept) = (_definition(rule),
                                                            _definition(now[name]))
        if not (ours and kept):  # a producer's rule the spec keeps under its name
            if old_action == "error" and new_action not in ENFORCING:
                changes.append((True, f"quality rule {name} no longer enforced: expected "
                                      f"error, found {new_action}"))
            continue
        if old != new:
            changes.append((True, f"quality rule {name} changed: expected {old}, found {new}"))
        elif old_action in ENFORCING and new_action not in ENFORCING:
            changes.append((True, f"quality rule {name} no longer enforced: expected "
                                  f"{old_action}, found {new_action}"))
        elif old_action != new_action:
            changes.append((False, f"quality rule {name}: action {old_action} -> {new_action}"))
    changes += [(False, f"quality rule {name} added") for name in now if name not in was]
    return changes


def _sla_changes(contract: Mapping[str, Any], current: Mapping[str, Any]
                 ) -> list[tuple[bool, str]]:
    def latencies(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return [s for s in doc.get("slaProperties") or []
                if str(s.get("property", "")).lower() in (LATENCY, "freshness")]

    was, now, changes = latencies(contract), latencies(current), []
    best = min((s for s in (latency_seconds(x) for x in now) if s is not None), default=None)
    for sla in was:
        promised = latency_seconds(sla)
        what = f"{sla.get('value')} {sla.get('unit') or ''}".strip()
        if best is None:
            changes.append((True, f"SLA {LATENCY} {what} missing (no freshness check)"))
        elif promised is not None and best > promised:
            changes.append((True, f"SLA {LATENCY} loosened: expected at most {what}, found "
                                  f"{_latency_text(best)}"))
        elif promised is not None and best < promised:
            changes.append((False, f"SLA {LATENCY} tightened from {what} to "
                                   f"{_latency_text(best)}"))
    if now and not was:
        changes.append((False, f"SLA {LATENCY} added ({_latency_text(best or 0)})"))
    return changes


def _latency_text(seconds: int) -> str:
    sla = _latency(f"{seconds} seconds") if seconds else {"value": 0, "unit": "s"}
    return f"{sla['value']} {sla['unit']}"


WIDER_TIMES = {"date": {"timestamp", "timestamp_ntz"}}


def widens(old: str, new: str) -> bool:
    """Whether every value of the Spark SQL type ``old`` fits ``new`` as it is."""
    old, new = spark_alias(old), spark_alias(new)
    if old == new:
        return True
    if old in INTEGERS and new in INTEGERS:
        return INTEGERS.index(new) > INTEGERS.index(old)
    if old in INTEGERS or old == "float":
        if new == "double":
            return True
        if old == "float":
            return False
        digits = _DECIMAL.match(new)
        if digits:
            precision, scale = int(digits.group(1) or 10), int(digits.group(2) or 0)
            return precision - scale >= INTEGER_DIGITS[old]
        return False
    was, now = _DECIMAL.match(old), _DECIMAL.match(new)
    if was and now:
        p1, s1 = int(was.group(1) or 10), int(was.group(2) or 0)
        p2, s2 = int(now.group(1) or 10), int(now.group(2) or 0)
        return s2 >= s1 and p2 - s2 >= p1 - s1
    if old.startswith("varchar") or old.startswith("char"):
        return new == "string"
    return new in WIDER_TIMES.get(old, set())


def spark_alias(kind: str) -> str:
    word = re.match(r"[a-z_]+", kind)
    if word and word.group(0) in ALIASES:
        return ALIASES[word.group(0)] + kind[word.end():]
    return kind
