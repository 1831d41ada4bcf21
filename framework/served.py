"""``medallion sql`` through a running ``medallion serve``: the query goes to the server that holds
the lake (its address is in the lake's lease, :meth:`framework.lease.Lease.advertise`) over
HiveServer2's protocol, with a Python client (impyla), and no Spark starts in the command. The
server's session answers as ``medallion sql``'s own would: the same catalog, settings and time zone.

Only a server without authentication (``NONE``, loopback only, or ``NOSASL``) is used this
way; behind LDAP or Kerberos the command asks for the lake as before.
"""

from __future__ import annotations

from typing import Any

from framework.config.model import ProjectConfig
from framework.errors import QueryError
from framework.logging import get_logger

AUTHENTICATION = "hive.server2.authentication"
UNAUTHENTICATED = ("NONE", "NOSASL")
CONNECT_SECONDS = 30


def authentication(project: ProjectConfig) -> str:
    """HiveServer2's authentication mode as the environment sets it (``NONE`` by default)."""
    conf = project.env.spark_conf
    value = conf.get(f"spark.hadoop.{AUTHENTICATION}") or conf.get(f"spark.{AUTHENTICATION}")
    value = value or "NONE"
    return str(value).upper()


def query(project: ProjectConfig, address: str, sql: str, limit: int
          ) -> tuple[list[str], list[tuple[Any, ...]]] | None:
    """Run ``sql`` on the server at ``address`` (a ``medallion serve`` of this lake) through
    HiveServer2's protocol: its columns and at most ``limit`` rows. None when the server
    cannot be used without credentials (an authentication other than ``NONE`` or ``NOSASL``)
    or does not answer; a query it refuses is a :class:`QueryError`."""
    import getpass

    from impala.dbapi import connect
    from impala.error import Error as ClientError

    mode = authentication(project)
    if mode not in UNAUTHENTICATED:
        return None
    host, _, port = address.rpartition(":")
    try:
        conn = connect(host=host, port=int(port), timeout=CONNECT_SECONDS,
                       user=getpass.getuser(),
                       auth_mechanism="NOSASL" if mode == "NOSASL" else "PLAIN")
        cursor = conn.cursor()
    except (ClientError, OSError) as exc:
        get_logger(address=address).warning("sql.server_unreachable", error=str(exc)[:300])
        return None
    try:
        cursor.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        rows = [tuple(r) for r in cursor.fetchmany(limit)] if columns else []
    except ClientError as exc:  # the server's refusal (impyla's OperationalError, ...)
        raise QueryError(f"Spark cannot run the query: {server_error(str(exc))}") from None
    finally:
        conn.close()
    return columns, rows


def server_error(text: str) -> str:
    """Spark's own error in a HiveServer2 error message, which wraps it in the server's
    exception ('...HiveSQLException: Error running query: [CLASS] ...AnalysisException:
    [CLASS] message'): its first line, from the message of the innermost exception named."""
    line = next((x for x in text.splitlines() if x.strip()), text).strip()
    if "Exception: " in line:
        line = line.rsplit("Exception: ", 1)[1]
    return line[:500]
