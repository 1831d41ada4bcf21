"""Load ``conf/`` into typed objects, gathering every problem and raising them once.

Layout::

    conf/environments/<env>.yaml          one Environment per file (name defaults to the stem)
    conf/tables/<layer>/<table>.yaml      one table spec per file (name defaults to the stem)
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from framework.columns import Columns
from framework.config.model import Environment, Layer, ProjectConfig, Table, TableSpec
from framework.errors import (
    ConfigError,
    ConfigValidationError,
    DuplicateTableError,
    InvalidIdentifierError,
    LiteralSecretError,
    MissingKeyError,
    MissingSecretError,
    MissingVariableError,
    UnknownKeyError,
    WrongTypeError,
)

DEFAULT_ENV = "local"
M = TypeVar("M", bound=BaseModel)

# pydantic error types -> the package's error classes
_ERROR_CLASSES: dict[str, type[ConfigError]] = {
    "extra_forbidden": UnknownKeyError,
    "missing": MissingKeyError,
    "invalid_identifier": InvalidIdentifierError,
    "missing_secret": MissingSecretError,
    "missing_variable": MissingVariableError,
    "literal_secret": LiteralSecretError,
}
_TYPE_SUFFIXES = ("_type", "_parsing", "enum", "literal_error", "secret_type")
_SECRET_ERRORS = {"literal_secret", "secret_type"}


def default_conf_dir() -> Path:
    """``$MEDALLION_CONF`` or ``./conf``."""
    return Path(os.environ.get("MEDALLION_CONF", "conf"))


def load_project(conf_dir: str | Path | None = None, env: str | None = None) -> ProjectConfig:
    """Load the environment ``env`` and every table spec; raise all problems at once."""
    project, errors = load_checked(conf_dir, env)
    if errors:
        raise ConfigValidationError(errors)
    assert project is not None
    return project


# A spec read from its file: its layer, the spec, the file.
_SpecFile = tuple[Layer, TableSpec, str]


def load_checked(conf_dir: str | Path | None = None, env: str | None = None, *,
                 columns: bool = False) -> tuple[ProjectConfig | None, list[ConfigError]]:
    """Every problem of the configuration, and the project of the valid specs (for
    ``validate`` to check their SQL in the same pass; None without a valid environment).
    With ``columns``, also each key naming a column its source does not declare
    (:mod:`framework.columns`)."""
    conf = Path(conf_dir) if conf_dir is not None else default_conf_dir()
    env_name = env or os.environ.get("MEDALLION_ENV", DEFAULT_ENV)
    errors: list[ConfigError] = []

    if not conf.is_dir():
        raise ConfigValidationError(
            [ConfigError(f"expected a configuration folder, found none at {conf.resolve()}")]
        )
    environment = _load_environment(conf, env_name, errors)
    specs: list[_SpecFile] = []
    # specs with problems, without the keys that have them: their SQL is checked too
    partial: list[_SpecFile] = []
    for layer_dir in sorted(p for p in (conf / "tables").glob("*") if p.is_dir()):
        _load_layer(layer_dir, errors, specs, partial)

    if environment is None:
        return None, errors
    tables = [Table(spec, layer, environment, file) for layer, spec, file in specs]
    errors += _check_tables(tables)
    if columns:
        errors += _column_problems(ProjectConfig(env=environment, tables=tuple(tables),
                                                 conf_dir=str(conf)))
    tables += [Table(spec, layer, environment, file) for layer, spec, file in partial]
    return ProjectConfig(env=environment, tables=tuple(tables), conf_dir=str(conf)), errors


def _load_environment(conf: Path, env_name: str, errors: list[ConfigError]
                      ) -> Environment | None:
    """The environment ``env_name`` of ``conf``; None (its problems in ``errors``) when it is
    missing or invalid."""
    env_file = conf / "environments" / f"{env_name}.yaml"
    if not env_file.is_file():
        known = sorted(p.stem for p in (conf / "environments").glob("*.yaml"))
        errors.append(
            ConfigError(
                f"expected environment {env_name!r} (one of: {', '.join(known) or 'none'}), "
                "found no such file",
                file=str(env_file),
            )
        )
        return None
    environment = _validate(Environment, env_file, errors, defaults={"name": env_name})
    return _anchor_root(environment, conf) if environment is not None else None


def _load_layer(layer_dir: Path, errors: list[ConfigError], specs: list[_SpecFile],
                partial: list[_SpecFile]) -> None:
    """The specs of one layer's folder: the valid ones into ``specs``, the valid part of the
    others into ``partial``, their problems into ``errors``."""
    from framework.layers import spec_model

    try:
        layer = Layer(layer_dir.name)
    except ValueError:
        valid = ", ".join(layer.value for layer in Layer)
        errors.append(ConfigError(f"expected a layer folder ({valid}), "
                                  f"found {layer_dir.name!r}", file=str(layer_dir)))
        return
    for spec_file in sorted(layer_dir.glob("*.y*ml")):
        data = _read(spec_file, errors)
        if data is None:
            continue
        try:
            model = spec_model(layer, data)
        except ConfigError as exc:
            exc.file = exc.file or str(spec_file if exc.key else layer_dir)
            errors.append(exc)
            if exc.key:
                continue
            return  # no implementation of the layer: one error for its folder
        spec = _validate(model, spec_file, errors, defaults={"name": spec_file.stem}, data=data)
        if spec is not None:
            specs.append((layer, spec, str(spec_file)))
        elif (rest := _valid_part(model, data)) is not None:
            partial.append((layer, rest, str(spec_file)))


def _check_tables(tables: list[Table]) -> list[ConfigError]:
    """The problems across tables (a table defined twice, a source not configured), and
    each spec's checks that need its environment."""
    errors = _duplicates(tables)
    configured_tables = {f"{t.layer.value}.{t.name}" for t in tables}
    for table in tables:
        for up_layer, up_name in table.spec.upstream():
            if f"{up_layer.value}.{up_name}" not in configured_tables:
                configured = ", ".join(sorted(configured_tables))
                errors.append(ConfigError(
                    f"expected the source table {up_layer.value}.{up_name} to be configured "
                    f"(known: {configured or 'none'}), found none",
                    file=table.source_file, key="source"))
        for problem in table.spec.check(table):
            problem.file = problem.file or table.source_file
            errors.append(problem)
    return errors


def _column_problems(project: ProjectConfig) -> list[ConfigError]:
    """The keys of the specs read whole that name a column their source does not declare
    (:mod:`framework.columns`); a table defined twice is left to its own error."""
    names = [(t.layer, t.name) for t in project.tables]
    once = [t for t in project.tables if names.count((t.layer, t.name)) == 1]
    known: dict[tuple[Layer, str], Columns] = {}
    problems = []
    for table in replace(project, tables=tuple(once)).in_flow_order(once):
        for problem in table.spec.column_problems(table, known):
            problem.file = problem.file or table.source_file
            problems.append(problem)
        declared = table.spec.declared_columns(table, known)
        if declared is not None:
            known[(table.layer, table.name)] = declared
    return problems


def _valid_part(model: type[M], data: dict[str, Any]) -> M | None:
    """The spec without the top-level keys that have problems (reported already), if that
    is valid: what ``validate`` still checks the SQL of, in the same pass."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        broken = {e["loc"][0] for e in exc.errors(include_url=False) if e["loc"]}
    else:
        return None
    try:
        return model.model_validate({k: v for k, v in data.items() if k not in broken})
    except ValidationError:
        return None


def _validate(
    model: type[M], file: Path, errors: list[ConfigError], defaults: dict[str, Any],
    data: dict[str, Any] | None = None,
) -> M | None:
    if data is None:
        data = _read(file, errors)
        if data is None:
            return None
    for key, value in defaults.items():
        data.setdefault(key, value)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors += [_convert(model, e, str(file)) for e in exc.errors(include_url=False)]
        return None


# Bounds on a configuration file: its size, nesting, and nodes once aliases are expanded (an
# alias "bomb" of a few lines stands for billions of values, each visited by the validation).
MAX_FILE_BYTES = 1_000_000
MAX_DEPTH = 50
MAX_NODES = 100_000


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document nested deeper than ``MAX_DEPTH``."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The nodes ``node`` stands for with every alias expanded (each shared node counted once
    per use, computed once)."""
    if id(node) not in sizes:
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        sizes[id(node)] = 1 + sum(_expanded_size(c, sizes) for c in children)
    return sizes[id(node)]


def load_yaml(file: Path) -> Any:
    """The YAML document in ``file``, within the bounds above; ``ValueError`` if it is not
    UTF-8 text, ``yaml.YAMLError`` if it is not YAML or goes past a bound."""
    size = file.stat().st_size
    if size > MAX_FILE_BYTES:
        raise yaml.YAMLError(f"a file of {size:,} bytes, over the {MAX_FILE_BYTES:,} a "
                             f"configuration file may have")
    text = file.read_bytes().decode("utf-8")  # UnicodeDecodeError is a ValueError
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        nodes = _expanded_size(node, {})
        if nodes > MAX_NODES:
            raise yaml.YAMLError(f"{nodes:,} values once its aliases are expanded, over the "
                                 f"{MAX_NODES:,} a configuration file may have")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _read(file: Path, errors: list[ConfigError]) -> dict[str, Any] | None:
    """The YAML mapping in ``file``; None, with the problem in ``errors``, if it is not one."""
    try:
        data = load_yaml(file)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        errors.append(ConfigError(f"expected valid YAML, found: {exc}", file=str(file), key=where))
        return None
    except ValueError as exc:  # not UTF-8
        errors.append(ConfigError(f"expected UTF-8 text, found: {exc}", file=str(file)))
        return None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errors.append(
            WrongTypeError(
                f"expected a mapping at the top level, found {type(data).__name__}",
                file=str(file),
            )
        )
        return None
    return data


def _convert(model: type[BaseModel], err: Any, file: str) -> ConfigError:
    loc = tuple(err["loc"])
    # pydantic appends the union member tried ("str", "SecretRef"...) to loc; keep real keys.
    key = _key_path(loc)
    kind: str = err["type"]
    cls = _ERROR_CLASSES.get(kind)
    if cls is None:
        cls = WrongTypeError if kind.endswith(_TYPE_SUFFIXES) else ConfigError
    if cls is UnknownKeyError:
        valid = _valid_keys(model, loc[:-1])
        message = f"unknown key {loc[-1]!r}; valid keys: {', '.join(valid)}"
    elif cls is MissingKeyError:
        message = f"expected key {loc[-1]!r}, found it missing"
    elif kind in _SECRET_ERRORS or cls in (MissingSecretError, MissingVariableError):
        message = err["msg"]  # never echo the input of a secret field
    else:
        found = repr(err.get("input"))
        found = found if len(found) <= 80 else found[:77] + "..."
        said = str(err["msg"]).removeprefix("Value error, ")
        # a message of the framework's own validators says what it found: once
        message = said if said.startswith("expected ") else f"{said}; found {found}"
    return cls(message, file=file, key=key)


def _key_path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and (part[:1].isupper() or part.startswith(("function-",))):
            continue  # a union member's name, not a key
        else:
            out += f".{part}" if out else str(part)
    return out


def _valid_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    target: Any = model
    for part in loc:
        target = _step(target, part)
        if target is None:
            return []
    for model in _members(target):  # (an optional block: the model of ``X | None``)
        if isinstance(model, type) and issubclass(model, BaseModel):
            return sorted(f.alias or name for name, f in model.model_fields.items())
    return []


def _step(annotation: Any, part: Any) -> Any:
    for candidate in _members(annotation):
        is_model = isinstance(candidate, type) and issubclass(candidate, BaseModel)
        if is_model and isinstance(part, str):
            for name, field in candidate.model_fields.items():
                if part in (name, field.alias):
                    return field.annotation
        origin = typing.get_origin(candidate)
        if origin in (dict, list, tuple):
            args = typing.get_args(candidate)
            if args:
                return args[-1] if origin is dict else args[0]
    return None


def _members(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return list(typing.get_args(annotation))
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    return [annotation]


def _anchor_root(env: Environment, conf: Path) -> Environment:
    """A relative local root is taken relative to the project folder (conf/'s parent)."""
    if "://" in env.root or os.path.isabs(env.root):
        return env
    root = (conf.resolve().parent / env.root).resolve()
    return env.model_copy(update={"root": str(root)})


def _duplicates(tables: list[Table]) -> list[ConfigError]:
    errors: list[ConfigError] = []
    seen: dict[str, Table] = {}
    for table in tables:
        for key in (table.full_name.lower(), table.checkpoint):
            first = seen.setdefault(key, table)
            if first is not table:
                errors.append(
                    DuplicateTableError(
                        f"expected one spec per table, found {table.full_name} defined again "
                        f"(first in {first.source_file})",
                        file=table.source_file,
                        key="name",
                    )
                )
                break
    return errors
