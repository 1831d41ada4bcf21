"""Secret references: configuration names where a secret lives, never the secret itself.

Two forms are accepted, and nothing else in a secret field:

* ``${NAME}``: the environment variable ``NAME`` (service principals, CI, spark-submit);
* ``{{secrets/<scope>/<key>}}``: a Databricks secret scope (the form Databricks itself uses
  in cluster and job configuration), resolved through ``dbutils.secrets`` on Databricks.

A :class:`SecretRef` prints as its reference, so a config object's ``repr`` never shows a
secret; resolved values are registered with the log redactor before they are returned.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from framework.redaction import register_secret

ENV_REF = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}$")
SCOPE_REF = re.compile(r"^\{\{secrets/(?P<scope>[\w.-]+)/(?P<key>[\w.-]+)\}\}$")

FORMS = "'${ENV_VAR}' or '{{secrets/<scope>/<key>}}'"


class SecretRef:
    """A reference to a secret, resolved only when the secret is about to be used."""

    __slots__ = ("reference",)

    def __init__(self, reference: str) -> None:
        if not (ENV_REF.match(reference) or SCOPE_REF.match(reference)):
            raise ValueError(
                "a secret must be a reference: expected '${ENV_VAR}' or "
                "'{{secrets/<scope>/<key>}}', found a literal value"
            )
        self.reference = reference

    @property
    def env_var(self) -> str | None:
        """The environment variable this refers to, or None for a secret-scope reference."""
        m = ENV_REF.match(self.reference)
        return m.group("name") if m else None

    def is_available(self) -> bool:
        """Whether the reference can be resolved here without side effects (env refs only)."""
        name = self.env_var
        return name is None or name in os.environ

    def resolve(self) -> str:
        """The secret's value; registered with the log redactor before it is returned."""
        name = self.env_var
        if name is not None:
            if name not in os.environ:
                from framework.errors import MissingSecretError

                raise MissingSecretError(
                    f"expected environment variable {name} to be set for {self.reference}, "
                    "found it unset"
                )
            value = os.environ[name]
        else:
            m = SCOPE_REF.match(self.reference)
            assert m is not None
            value = _databricks_secret(m.group("scope"), m.group("key"))
        register_secret(value)
        return value

    def __repr__(self) -> str:
        return f"SecretRef({self.reference!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretRef) and other.reference == self.reference

    def __hash__(self) -> int:
        return hash(self.reference)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validate_secret,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda s: s.reference
            ),
        )


def _validate_secret(value: Any) -> SecretRef:
    if isinstance(value, SecretRef):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError(
            "secret_type",
            "expected a secret reference string ({forms}), found {found}",
            {"forms": FORMS, "found": type(value).__name__},
        )
    try:
        ref = SecretRef(value.strip())
    except ValueError:
        raise PydanticCustomError(
            "literal_secret",
            "expected a secret reference ({forms}), found a literal value (not shown)",
            {"forms": FORMS},
        ) from None
    if not ref.is_available():
        raise PydanticCustomError(
            "missing_secret",
            "expected environment variable {name} to be set (referenced as {ref}), found it unset",
            {"name": ref.env_var, "ref": ref.reference},
        )
    return ref


def _databricks_secret(scope: str, key: str) -> str:
    """Read a secret through dbutils; only possible on a Databricks cluster."""
    from framework.errors import SessionError

    try:
        from pyspark.dbutils import DBUtils
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SessionError(
            f"expected a Databricks runtime to resolve secret scope reference "
            f"{{{{secrets/{scope}/{key}}}}}, found none (pyspark.dbutils is missing)"
        ) from exc
    spark = SparkSession.getActiveSession()
    if spark is None:
        raise SessionError("expected an active SparkSession to read Databricks secrets")
    return str(DBUtils(spark).secrets.get(scope=scope, key=key))
