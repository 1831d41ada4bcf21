"""What a ``medallion`` sub-command is made of, for the framework's commands and a layer's own.

A layer adds its commands through its plugin (:mod:`framework.layers`): it is given a
:class:`Commands`, and each command it adds gets the common options (``--conf``, ``--env``,
the log options) and a handler ``(args) -> exit code``. The helpers here load the project and
start Spark the same way for every command.

Exit codes: 0 success (a run stopped on request is a success), 1 a job failed, 2 the
configuration or the command line is invalid, or another command holds the lake.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from framework.config.loader import load_project
from framework.config.model import Environment, ProjectConfig, Runtime
from framework.logging import LogFormat
from framework.redaction import redact
from framework.text import render_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.lease import Lease
    from framework.storage import Storage

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
GROUP = "medallion.commands"

Handler = Callable[[argparse.Namespace], int]


def common_options() -> argparse.ArgumentParser:
    """The options every command takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--conf", help="configuration folder (default: $MEDALLION_CONF or ./conf)")
    common.add_argument("--env", help="environment name (default: $MEDALLION_ENV or local)")
    common.add_argument(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default=LogFormat.AUTO.value,
        help="auto: readable on a terminal, JSON otherwise",
    )
    common.add_argument(
        "--wait", action="store_true",
        help="if another command holds the lake, wait for it (default: exit 2 at once)")
    common.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"],
        help="default: info; warning for the demo, whose progress lines say what happens. "
        "Spark's own log only with debug"
    )
    return common


def instant(text: str) -> datetime:
    """An ISO 8601 time; UTC when it names no zone."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-01-31T00:00:00, found {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Commands:
    """Where commands are added: the ``medallion`` parser's sub-commands (what
    :class:`framework.layers.Commands` asks for)."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self._sub = sub
        self._common = common

    def add(self, name: str, handler: Handler, *, help: str, description: str
            ) -> argparse.ArgumentParser:
        """A sub-command with the common options; add its own arguments to the parser returned."""
        parser: argparse.ArgumentParser = self._sub.add_parser(
            name, parents=[self._common], help=help, description=description)
        parser.set_defaults(handler=handler)
        return parser


def installed_commands() -> list[Callable[[Commands], None]]:
    """Commands of installed packages that are not layers (an example's ``demo``), declared
    under the entry point group ``medallion.commands`` as functions that add them."""
    return [ep.load() for ep in entry_points(group=GROUP)]


def project_of(args: argparse.Namespace) -> ProjectConfig:
    """The project ``--conf`` and ``--env`` name (``--wait`` noted for the lake's lease)."""
    _Lake.wait = bool(getattr(args, "wait", False))
    return load_project(args.conf, args.env)


class _Lake:
    """The lake's lease as this process holds it (one per process: the command's)."""

    lease: Lease | None = None
    wait: bool = False


def take_lake(project: ProjectConfig, command: str, *, writes: bool) -> str | None:
    """Take the lake's lease (:mod:`framework.lease`) before Spark starts: always for a command
    that writes, and for any command when the metastore is an embedded Derby database, which one
    process at a time can open. Returns the lease's run id (None when none is needed); a lake held
    by another command is a :class:`LakeInUseError`, or is waited for after ``--wait``."""
    from framework.lease import Lease
    from framework.session import resolved_runtime
    from framework.storage import storage_for

    if _Lake.lease is not None:
        return _Lake.lease.run_id
    env = project.env
    runtime = resolved_runtime(env)
    embedded = runtime is Runtime.LOCAL and not (env.metastore or "").startswith("thrift://")
    if not (writes or embedded):
        return None
    if _reachable_without_spark(env):
        store = storage_for(env.root, env)
    else:  # hdfs://, dbfs:/...: through Spark's file system (a cluster's metastore, not Derby)
        from framework.session import get_spark

        store = storage_for(env.root, env, get_spark(env, command))
    _Lake.lease = Lease(store, env.root, command).acquire(_Lake.wait)
    return _Lake.lease.run_id


def _reachable_without_spark(env: Environment) -> bool:
    """Whether the root's store can be read and written without a Spark session: the local
    file system, or a store with an implementation of its own and its settings (ADLS)."""
    from framework.storage import IMPLEMENTATIONS, scheme_of

    scheme = scheme_of(env.root)
    return scheme in ("", "file") or (scheme in IMPLEMENTATIONS and env.storage is not None)


def advertise(address: str) -> None:
    """Say in this process's lease that it serves the lake's catalog at ``address``."""
    if _Lake.lease is not None:
        _Lake.lease.advertise(address)


def served_at(project: ProjectConfig) -> str | None:
    """The address (host:port) of a ``medallion serve`` that holds the lake, read from its
    lease without taking it; None when none does (or the root's store needs Spark)."""
    from framework.lease import Lease
    from framework.storage import storage_for

    env = project.env
    if not _reachable_without_spark(env):
        return None
    holder = Lease(storage_for(env.root, env), env.root, "medallion sql").current()
    return holder.serves if holder is not None else None


def first_time(project: ProjectConfig, what: str) -> bool:
    """Whether ``what`` happens for the first time on this lake (a marker under the root's
    ``_hints/``, made now); False when the root's store needs Spark."""
    from framework.storage import storage_for

    env = project.env
    if not _reachable_without_spark(env):
        return False
    return storage_for(env.root, env).create(env.path("_hints", what), b"")


def lake_run_id() -> str | None:
    """The run id of the lease this process holds (None without one)."""
    return _Lake.lease.run_id if _Lake.lease is not None else None


def release_lake() -> None:
    """Give the lake back, if this process took it; and end a Spark Connect session the
    command opened (its server-side session is released, and the client's threads end, so
    the process can exit)."""
    from framework.session import end_connect_sessions

    end_connect_sessions()
    if _Lake.lease is not None:
        _Lake.lease.release()
        _Lake.lease = None


def spark_for(project: ProjectConfig, app: str, *, writes: bool = False) -> SparkSession:
    """The Spark session of the project's environment (started on first use), after taking
    the lake's lease where :func:`take_lake` says one is needed."""
    from framework.session import get_spark

    take_lake(project, app, writes=writes)
    return get_spark(project.env, app)


def storage_of(project: ProjectConfig, path: str, app: str = "medallion") -> Storage:
    """The store of ``path`` for a command outside a job: local and ADLS paths through their own
    clients (no Spark needed); any other scheme (``hdfs://``, ``s3a://``, ``dbfs:/``...) through
    the Hadoop ``FileSystem`` of the environment's Spark session, with Spark's credentials."""
    from framework.storage import IMPLEMENTATIONS, scheme_of, storage_for

    if scheme_of(path) in IMPLEMENTATIONS:
        return storage_for(path, project.env)
    return storage_for(path, project.env, spark_for(project, app))


def at_least_one(unit: str) -> Callable[[str], int]:
    """An argparse type: a whole number of ``unit`` (rows, tables), 1 or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected a whole number of {unit}, 1 or more, "
                                             f"found {text!r}")
        return value

    return parse


def write_json(path: str, data: dict[str, Any]) -> None:
    """``data`` as indented JSON in the file ``path`` (a run's summary), redacted."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(redact(data), fh, indent=2, default=str)


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows as a text table on stdout, with their count."""
    print(render_table(header, rows))
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
