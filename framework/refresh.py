"""``medallion refresh``: rebuild tables from their sources, as one operation that a kill
cannot leave half done.

A refresh of silver and gold tables (with ``--downstream``, of every table that reads them
too) takes these steps, in the tables' flow order, each recorded in the lake's journal
(:mod:`framework.journal`) once done:

1. ``planned``: the tables, and for each the Delta tables it writes (its own, its quarantine,
   its change log) with their version and rows before the refresh;
2. ``set_aside``: each table's checkpoint moved into the operation's folder (one rename), so
   that its query reads its source again from the start, with state from zero;
3. ``reset``: each table emptied with ``DELETE FROM`` (its former rows stay in its Delta
   history), and a materialized mart's record of what it was built from removed, so that its
   next build is whole;
4. ``rebuilt``: the tables run (availableNow) from their new checkpoints;
5. ``done``: the journal closed, the old checkpoints deleted.

A table rebuilt by reading its inputs again (``RebuildMethod.REREAD``: a feed of files) keeps
its checkpoint; it is emptied, and its job in the rebuild, told by the run's ``operation``, reads
its batches again. Its layer's ``reread`` capability (:class:`framework.layers.Reread`) says
whether it can be rebuilt now (its inputs may be gone): one that cannot is refused at the plan,
before anything is emptied. With a ``--since``/``--until`` slice (such tables only), the plan
holds the predicate of the rows of the inputs delivered in it (:meth:`Reread.where
<framework.layers.Reread.where>`): the reset deletes those rows alone, the job reads those inputs
alone, and the tables downstream are rebuilt whole as always.

**Killed at any step, a refresh is completed**, never rolled back, by the next ``medallion
refresh`` or ``medallion run``, which reads the journal first: the steps from the last one
recorded on are taken again, each safe to take twice (a checkpoint moved is not moved again; no
job ran since the tables were emptied, so emptying them again loses nothing; the rebuild resumes
from the new checkpoints). **A rebuild that fails** (a bad expression in the new spec, say) leaves
the refresh open, with the reason: the next command tries again and completes it once the cause
is fixed; putting the former spec back rebuilds the tables as they were.

Why forward and not back: once a table is emptied, a query that reads it as a stream (gold
reading silver) can only go on from a new checkpoint. Restoring the table (``RESTORE``) and the
reader's old checkpoint would have the reader meet the emptying commit (Delta's stream source
fails on deleted rows) and then the restore's commit, whose files it would read as new rows:
a rollback is consistent only before the first table is emptied, and a refresh is only ever
finished by rebuilding every table it emptied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession

from framework.config.model import Layer, ProjectConfig, RebuildMethod, Table
from framework.delta import (
    delete_rows,
    is_delta_table,
    latest_commit,
    read_table,
    unset_properties,
)
from framework.errors import JobError, OperationOpenError, StorageError, UsageError, first_line
from framework.job import RunContext, RunStatus, RunSummary, TriggerPolicy
from framework.journal import Journal, JournalState, OperationKind, Record
from framework.layers import reread_of
from framework.lineage import RefreshLineage
from framework.logging import get_logger
from framework.staleness import SPEC_WRITTEN
from framework.storage import Storage, storage_for
from framework.timeslice import TimeSlice


@dataclass(frozen=True)
class Target:
    """A Delta table a refresh empties, with its version and rows before (None: no table)."""

    location: str
    version: int | None
    rows: int


@dataclass(frozen=True)
class PlannedTable:
    """One table of a refresh: how it is rebuilt (None: a view, which reads the new rows by
    itself), its checkpoint and where it is set aside, and the Delta tables it writes."""

    table: str  # its full name
    layer: str
    name: str
    method: str | None
    checkpoint: str | None = None
    targets: tuple[Target, ...] = ()
    properties: tuple[str, ...] = ()
    # of a slice read again: the rows its tables lose and get again (None: all of them)
    where: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedTable:
        method = data["method"]
        return cls(**{**data, "targets": tuple(Target(**t) for t in data["targets"]),
                      "properties": tuple(data["properties"]),
                      # (the name of REREAD in a journal written before it was renamed)
                      "method": RebuildMethod.REREAD.value if method == "replay" else method})


@dataclass(frozen=True)
class RefreshPlan:
    """The tables a refresh rebuilds, in flow order."""

    tables: tuple[PlannedTable, ...]
    asked: tuple[str, ...] = field(default=())
    reread_slice: TimeSlice | None = None  # --since/--until: only the inputs delivered in it

    def to_json(self) -> dict[str, Any]:
        return {"asked": list(self.asked), "tables": [asdict(t) for t in self.tables],
                "reread_slice": self.reread_slice.to_json() if self.reread_slice else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RefreshPlan:
        # (a journal written before the key was renamed names it replay_slice)
        sliced = data.get("reread_slice", data.get("replay_slice"))
        return cls(tuple(PlannedTable.from_json(t) for t in data["tables"]),
                   tuple(data.get("asked", ())), TimeSlice.from_json(sliced) if sliced else None)

    def render(self) -> str:
        """The plan as a person reads it: a line per table, in the order they are rebuilt."""
        lines = ["refresh plan, in flow order:"]
        width = max(len(t.table) for t in self.tables)
        for t in self.tables:
            if t.method is None:
                lines.append(f"  {t.table:<{width}}  view: reads the new rows")
                continue
            held = []
            for target in t.targets:
                name = target.location.rstrip("/").rpartition("/")[2]
                held.append(f"{name} {target.rows:,} rows at version {target.version}"
                            if target.version is not None else f"{name} (none yet)")
            how = "emptied, rebuilt whole" if t.method == RebuildMethod.WHOLE.value \
                else "emptied, its query read again from the start"
            if t.method == RebuildMethod.REREAD.value:
                how = f"the rows of the files delivered in {self.reread_slice} read again" \
                    if t.where else "emptied, the files it was fed read again"
            lines.append(f"  {t.table:<{width}}  {how}: " + "; ".join(held))
            if t.checkpoint:
                lines.append(f"  {'':<{width}}  checkpoint {t.checkpoint} set aside until the "
                             f"rebuild commits")
        return "\n".join(lines)


def resolve_table(project: ProjectConfig, name: str) -> Table:
    """A configured table by its full name, ``layer.name`` or short name."""
    layer, dot, short = name.partition(".")
    if dot and layer in {x.value for x in Layer} and "." not in short:
        return project.table(short, Layer(layer))
    return project.table(name)


def plan_refresh(spark: SparkSession, project: ProjectConfig, names: list[str],
                 downstream: bool, reread_slice: TimeSlice | None = None) -> RefreshPlan:
    """The plan of refreshing ``names`` (and, with ``downstream``, every table that reads them):
    what each table holds now; with ``reread_slice`` (feeds of files only), the rows read again.
    Raises :class:`UsageError` for a table a refresh cannot rebuild and, without ``downstream``,
    for tables reading a refreshed one, which would keep rows their source no longer has."""
    asked = [resolve_table(project, n) for n in names]
    _check_asked(asked, reread_slice)
    tables = project.fed_by(asked)
    _check_readers(asked, tables, downstream)
    for table in tables:
        rebuild = table.spec.rebuild(table)
        reread = reread_of(table) if rebuild and rebuild.method is RebuildMethod.REREAD else None
        why = reread.problem(spark, table, reread_slice) if reread else None
        if why:
            raise UsageError(f"expected {table.full_name} to be one refresh can rebuild, "
                             f"found that {why}")
    planned = tuple(_planned_table(spark, table, reread_slice) for table in tables)
    return RefreshPlan(planned, tuple(t.full_name for t in asked), reread_slice)


def _check_asked(asked: list[Table], reread_slice: TimeSlice | None) -> None:
    """Raise :class:`UsageError` unless refresh can rebuild every table asked for (with
    ``reread_slice``, by reading again the files it was fed)."""
    for table in asked:
        why = table.spec.rebuild_refusal(table)
        if why:
            raise UsageError(f"expected a table refresh can rebuild, found {table.full_name}: "
                             f"{why}")
    if reread_slice is not None:
        whole = [t.full_name for t in asked if (r := t.spec.rebuild(t)) is None
                 or r.method is not RebuildMethod.REREAD]
        if whole:
            raise UsageError(f"expected feeds of files (bronze) to refresh with --since/--until, "
                             f"found {', '.join(whole)}: a refresh reads its source's whole "
                             f"history again (refresh it without a slice, or refresh the bronze "
                             f"feed with the slice and this table with --downstream)")


def _check_readers(asked: list[Table], tables: Sequence[Table], downstream: bool) -> None:
    """Raise :class:`UsageError` when tables that read those asked for (in ``tables``) are not
    refreshed with them (no ``downstream``), or cannot be rebuilt."""
    chosen = {(t.layer, t.name) for t in asked}
    readers = [t for t in tables if (t.layer, t.name) not in chosen
               and t.spec.rebuild(t) is not None]
    if readers and not downstream:
        raise UsageError(
            f"expected the tables that read {', '.join(t.full_name for t in asked)} to be "
            f"refreshed with them, found {', '.join(t.full_name for t in readers)} not asked "
            f"for: they would keep rows their source no longer has. Add --downstream to "
            f"refresh them too")
    for table in readers:
        why = table.spec.rebuild_refusal(table)
        if why:
            raise UsageError(f"expected every table downstream to be one refresh can rebuild, "
                             f"found {table.full_name}: {why}")


def _planned_table(spark: SparkSession, table: Table,
                   reread_slice: TimeSlice | None) -> PlannedTable:
    """How ``table`` is rebuilt, and what the Delta tables it writes hold now."""
    rebuild = table.spec.rebuild(table)
    if rebuild is None:
        return PlannedTable(table.full_name, table.layer.value, table.name, None)
    where = None
    if reread_slice is not None and rebuild.method is RebuildMethod.REREAD:
        where = reread_of(table).where(spark, table, reread_slice)
        if where is None:
            raise UsageError(f"expected files of {table.full_name} delivered in "
                             f"{reread_slice} to read again, found none in its ledger")
    targets = tuple(_target(spark, location) for location in rebuild.locations)
    return PlannedTable(
        table.full_name, table.layer.value, table.name, rebuild.method.value,
        rebuild.checkpoint,
        # (its own table always, companions that exist)
        tuple(t for i, t in enumerate(targets) if i == 0 or t.version is not None),
        rebuild.properties, where)


def _target(spark: SparkSession, location: str) -> Target:
    if not is_delta_table(spark, location):
        return Target(location, None, 0)
    last = latest_commit(spark, location)
    rows = read_table(spark, location).count()  # (from the log's statistics)
    return Target(location, last.version if last else None, rows)


# How tables are run: framework.runner.run_tables (given, as the runner completes an open refresh)
RunTables = Callable[[SparkSession, ProjectConfig, Sequence[Table], RunContext], RunSummary]


class Refresh:
    """Takes a refresh's steps (see the module's account), from a plan or from the journal;
    ``run`` runs the tables it rebuilds."""

    def __init__(self, spark: SparkSession, project: ProjectConfig, ctx: RunContext,
                 run: RunTables, journal: Journal | None = None) -> None:
        self.spark = spark
        self.project = project
        self.ctx = ctx
        self.run = run
        root = project.env.root
        self.store: Storage = storage_for(root, project.env, spark)
        self.journal = journal or Journal(self.store, root)
        self.log = get_logger(env=project.env.name, run_id=ctx.run_id)

    # ------------------------------------------------------------------ entry points
    def begin(self, plan: RefreshPlan) -> RunSummary:
        """Record the plan, then take every step."""
        record = self.journal.begin(OperationKind.REFRESH, {"plan": plan.to_json()})
        self.log.info("refresh.planned", op=record.op, tables=[t.table for t in plan.tables])
        return self.resume()

    def resume(self) -> RunSummary:
        """Take the open refresh's steps from the last one recorded on; returns the rebuild's
        summary (empty if done already). A failed rebuild raises :class:`JobError`, and a stop
        request ends it between steps or at the rebuild's next batch boundary: both leave the
        refresh open."""
        records = self.journal.records()
        summary = RunSummary(run_id=self.ctx.run_id, env=self.project.env.name)
        if not records:
            return summary
        op, state = records[-1].op, records[-1].state
        kind = records[0].body.get("kind")
        if kind != OperationKind.REFRESH.value:
            raise OperationOpenError(f"expected a refresh open in {self.journal.folder}, found "
                                     f"{op}, a {kind}: complete it with its own command first")
        plan = _plan_of(records)
        log = self.log.bind(op=op)
        if plan is None:  # (begun, killed before its plan was recorded: nothing was done)
            self.journal.append(JournalState.ABANDONED, reason="no plan recorded")
            self.journal.close()
            return summary
        lineage = RefreshLineage.open(self.project.env, op, [
            (t.table, t.targets[0].location) for t in plan.tables if t.targets], log)
        if lineage is not None:
            lineage.started()
        try:
            summary, done = self._steps(op, plan, state, summary, log)
        except (Exception, KeyboardInterrupt) as exc:
            if lineage is not None:
                lineage.ended("FAIL" if isinstance(exc, Exception) else "ABORT",
                              first_line(exc) if isinstance(exc, Exception) else str(exc))
            raise
        if lineage is not None:
            lineage.ended("COMPLETE" if done else "ABORT")
        return summary

    def _steps(self, op: str, plan: RefreshPlan, state: JournalState, summary: RunSummary,
               log: Any) -> tuple[RunSummary, bool]:
        """The refresh's steps from ``state`` on; the rebuild's summary, and whether the
        refresh is done (not: stopped between two steps, or in its rebuild)."""
        if state is JournalState.PLANNED:
            self._set_aside(op, plan, log)
            state = self.journal.append(JournalState.SET_ASIDE).state
        if state is JournalState.SET_ASIDE and not self._stopped(log):
            self._reset(op, plan, log)
            state = self.journal.append(JournalState.RESET).state
        if state is JournalState.RESET and not self._stopped(log):
            summary = self._rebuild(op, plan, log)
            if summary.status is RunStatus.FAILED:
                failed = [t.table for t in summary.tables if t.status is RunStatus.FAILED]
                log.error("refresh.rebuild.failed", tables=failed)
                raise JobError("refresh", "rebuild", f"expected every table of refresh {op} to "
                               f"rebuild, found {', '.join(failed)} failed. The refresh stays "
                               f"open: fix the cause and run 'medallion run' or 'medallion "
                               f"refresh' again, which completes it (to go back, put the former "
                               f"spec back: the tables are rebuilt as they were). Until it is "
                               f"done, the old checkpoints are kept under "
                               f"{self.journal.workspace(op)} and the tables' former versions "
                               f"in their Delta history")
            if summary.status is not RunStatus.SUCCEEDED or self._stopped(log):
                return summary, False
            state = self.journal.append(JournalState.REBUILT).state
        if state in (JournalState.SET_ASIDE, JournalState.RESET):
            return summary, False  # (stopped before its next step)
        if state is JournalState.REBUILT:
            log.info("refresh.finishing")
            self.journal.append(JournalState.DONE)
        self.journal.close()
        log.info("refresh.done", tables=[t.table for t in plan.tables])
        return summary, True

    def _stopped(self, log: Any) -> bool:
        if self.ctx.stop.is_set():
            log.warning("refresh.stopped", reason="a stop was requested: the next 'medallion "
                        "run' or 'medallion refresh' completes the refresh")
        return self.ctx.stop.is_set()

    # ------------------------------------------------------------------ the steps
    def _aside(self, op: str, table: PlannedTable) -> str:
        return f"{self.journal.workspace(op)}/aside/{table.layer}/{table.name}"

    def _set_aside(self, op: str, plan: RefreshPlan, log: Any) -> None:
        for t in plan.tables:
            if not t.checkpoint:
                continue
            aside = self._aside(op, t)
            there, moved = self.store.exists(t.checkpoint), self.store.exists(aside)
            if there and moved:
                raise StorageError(f"expected the checkpoint of {t.table} in one place for "
                                   f"refresh {op}, found it at {t.checkpoint} and set aside at "
                                   f"{aside}")
            if there:
                log.info("refresh.checkpoint.moving", table=t.table, checkpoint=t.checkpoint,
                         aside=aside)
                self.store.move_folder(t.checkpoint, aside)
                log.info("refresh.checkpoint.moved", table=t.table)

    def _reset(self, op: str, plan: RefreshPlan, log: Any) -> None:
        for t in plan.tables:
            for target in t.targets:
                if not is_delta_table(self.spark, target.location):
                    continue
                log.info("refresh.table.resetting", table=t.table, location=target.location,
                         rows="the slice's" if t.where else "all")
                delete_rows(self.spark, target.location, t.where)
            # what its rows were built from and with goes with them (all of them)
            if not t.where and t.targets and is_delta_table(self.spark, t.targets[0].location):
                unset_properties(self.spark, t.targets[0].location,
                                 (*t.properties, SPEC_WRITTEN))
            log.info("refresh.table.reset", table=t.table)

    def _rebuild(self, op: str, plan: RefreshPlan, log: Any) -> RunSummary:
        tables = []
        for t in plan.tables:
            found = [x for x in self.project.tables
                     if x.layer.value == t.layer and x.name == t.name]
            if found:
                tables.append(found[0])
            else:  # (emptied, and no longer configured: nothing to rebuild it with)
                log.warning("refresh.table.gone", table=t.table)
        log.info("refresh.rebuild.started", tables=[t.full_name for t in tables])
        # availableNow whatever the command's trigger (a continuous run completing it first);
        # the run history's rows of the rebuild name the refresh
        ctx = replace(self.ctx, trigger=TriggerPolicy(), operation=op,
                      reread_slice=plan.reread_slice)
        return self.run(self.spark, self.project, tables, ctx)


def _plan_of(records: list[Record]) -> RefreshPlan | None:
    first = records[0].body.get("plan") if records else None
    return RefreshPlan.from_json(first) if first else None


def finish_open(spark: SparkSession, project: ProjectConfig, ctx: RunContext,
                run: RunTables) -> str | None:
    """Complete a refresh a command left open, before anything else writes the lake; returns
    why it is still open (failed rebuild, stop request), else None. With nothing open it costs
    one check of the journal's folder."""
    store = storage_for(project.env.root, project.env, spark)
    journal = Journal(store, project.env.root)
    if not store.exists(journal.folder):
        return None
    last = journal.last()
    if last is None:
        return None
    log = get_logger(env=project.env.name, run_id=ctx.run_id, op=last.op)
    log.warning("refresh.resuming", state=last.state.value,
                reason="a refresh was left open (stopped, killed or failed): it is completed "
                       "first")
    try:
        Refresh(spark, project, ctx, run, journal).resume()
    except JobError as exc:
        log.error("refresh.rebuild.failed", error=str(exc))
        return str(exc)
    if journal.records():
        return f"refresh {last.op} was stopped before it was done"
    return None


