"""Annotated value types shared by every configuration model."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


class Model(BaseModel):
    """Base of every configuration object: frozen, typed, and strict about unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _identifier(value: str) -> str:
    if not IDENTIFIER.match(value):
        raise PydanticCustomError(
            "invalid_identifier",
            "expected an identifier of letters, digits and '_' not starting with a digit "
            "(at most 128 characters), found {found}",
            {"found": repr(value)},
        )
    return value


def interpolate(value: Any) -> Any:
    """Replace ``${VAR}`` and ``${VAR:-default}`` in a string with the environment's values."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        name, default = m.group("name"), m.group("default")
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise PydanticCustomError(
            "missing_variable",
            "expected environment variable {name} to be set (or a default, as {example}), "
            "found it unset",
            {"name": name, "example": f"'${{{name}:-value}}'"},
        )

    return _VAR.sub(sub, value)


def _account(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9]{3,24}", value):
        raise PydanticCustomError(
            "invalid_identifier",
            "expected a storage account name of 3 to 24 lowercase letters and digits, "
            "found {found}",
            {"found": repr(value)},
        )
    return value


#: A SQL identifier (catalog, schema, table or column name); nothing else can reach SQL text.
Identifier = Annotated[str, AfterValidator(_identifier)]
#: A string in which ``${VAR}`` / ``${VAR:-default}`` are replaced by environment variables.
Text = Annotated[str, BeforeValidator(interpolate)]
#: An Azure storage account name (after interpolation).
AccountName = Annotated[str, BeforeValidator(interpolate), AfterValidator(_account)]
