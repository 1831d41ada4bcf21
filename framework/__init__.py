"""A configuration-driven medallion ingestion framework on Spark and Delta Lake.

Importing this package has no side effects: no SparkSession, configuration or logging is set
up until a job or the ``medallion`` command asks for it.
"""

from __future__ import annotations

__version__ = "0.1.0"
