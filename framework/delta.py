"""Small Delta helpers shared by the layers."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal (quotes and backslashes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table(
    spark: SparkSession,
    name: str,
    schema: StructType,
    location: str,
    *,
    partition_by: Sequence[str] = (),
    comment: str = "",
) -> None:
    """Create a Delta catalog table at ``location`` unless it exists (idempotent).

    ``name`` is a validated ``catalog.schema.table``; SQL is used because Delta's builder API
    does not take catalog-qualified names.
    """
    parts = [f"CREATE TABLE IF NOT EXISTS {name} ({schema.toDDL()}) USING DELTA"]
    if partition_by:
        parts.append(f"PARTITIONED BY ({', '.join(partition_by)})")
    if comment:
        parts.append(f"COMMENT {sql_string(comment)}")
    parts.append(f"LOCATION {sql_string(location)}")
    spark.sql(" ".join(parts))
