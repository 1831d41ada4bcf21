"""A SQLAlchemy dialect for ``medallion serve`` (Spark's Thrift server), over PyHive's.

PyHive's ``hive`` dialect lists a schema's tables with ``SHOW TABLES IN schema`` and takes each
row's first column: Hive's one column, the table's name. Spark answers with three columns
(``namespace``, ``tableName``, ``isTemporary``; ``spark.sql.legacy.keepCommandOutputSchema``
only renames the first to ``database``), so ``inspect(engine).get_table_names(schema="gold")``
gave the schema's name once per table. This dialect takes the ``tableName`` column, and leaves
out the session's temporary views, which belong to no schema. Its URL is ``hive+spark://``
(registered under ``sqlalchemy.dialects`` by the package); it needs PyHive and SQLAlchemy, which
the package does not install (``pip install 'pyhive[hive_pure_sasl]' sqlalchemy``).
"""

from __future__ import annotations

from typing import Any

from pyhive.sqlalchemy_hive import HiveDialect
from sqlalchemy import text

NAME = "hive.spark"  # the dialect's name in SQLAlchemy's registry: URLs hive+spark://


class SparkHiveDialect(HiveDialect):
    """PyHive's Hive dialect, reading the output of Spark's ``SHOW TABLES``."""

    name = "hive"
    driver = "spark"
    supports_statement_cache = False  # (PyHive's compiler predates SQLAlchemy's cache)

    @classmethod
    def import_dbapi(cls) -> Any:
        from pyhive import hive

        return hive

    def get_table_names(self, connection: Any, schema: str | None = None,
                        **kw: Any) -> list[str]:
        query = "SHOW TABLES"
        if schema:
            query += " IN " + self.identifier_preparer.quote_identifier(schema)
        result = connection.execute(text(query))
        columns = list(result.keys())
        if "tableName" not in columns:  # (Hive's own server: one column, the name)
            return [row[0] for row in result]
        name, temporary = columns.index("tableName"), columns.index("isTemporary")
        return [row[name] for row in result if not _true(row[temporary])]


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"
