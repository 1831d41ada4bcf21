"""Silver's ``medallion`` command: ``quarantine list|replay|discard`` (:mod:`silver.quarantine`)."""

from __future__ import annotations

import argparse
import signal
import uuid
from enum import StrEnum

from framework.commands import EXIT_OK, lake_run_id, print_table, project_of, spark_for
from framework.config.model import Layer
from framework.errors import StorageError, UsageError
from framework.layers import Commands
from framework.logging import get_logger
from framework.storage import parse_retention


class QuarantineAction(StrEnum):
    LIST = "list"
    REPLAY = "replay"
    DISCARD = "discard"


def add_commands(commands: Commands) -> None:
    p = commands.add(
        "quarantine", cmd_quarantine,
        help="list, replay or discard a silver table's quarantined rows",
        description="list: the table's quarantined and held rows per state and rule, with the "
        "oldest and newest (--rows N: the first N rows too). replay: send the quarantined rows "
        "chosen through the table's spec as it is now (its columns, transforms, rules and "
        "checks), exactly once: those that pass are appended with the replay's id (_replay_id) "
        "or, in an upsert or SCD2 table, applied as changes at their place in each key's "
        "history; those that break a rule again are quarantined again; a replay stopped "
        "half way is completed by the next quarantine command. discard: set the chosen rows "
        "aside for good, with a reason (they stay in the quarantine, state discarded). "
        "Rows are chosen by --rule and --older-than; by default all quarantined rows.")
    p.add_argument("action", choices=[a.value for a in QuarantineAction])
    p.add_argument("table", help="a silver table (orders or silver.orders)")
    p.add_argument("--rule", metavar="NAME",
                   help="only rows that broke this rule (or check, or cast:<column>)")
    p.add_argument("--older-than", metavar="AGE",
                   help="only rows quarantined longer ago than AGE: 30d, 12h or 90m")
    p.add_argument("--rows", type=int, default=0, metavar="N",
                   help="list: print the first N rows chosen too (oldest first)")
    p.add_argument("--reason", help="discard: why the rows are set aside (required)")


def cmd_quarantine(args: argparse.Namespace) -> int:
    from framework.job import StopSignal
    from framework.refresh import resolve_table
    from silver.quarantine import Selection, discard, replay, sample, summary, unfinished

    action = QuarantineAction(args.action)
    if action is QuarantineAction.DISCARD and not (args.reason or "").strip():
        raise UsageError("expected --reason with discard (why the rows are set aside), found "
                         "none")
    try:
        older = parse_retention(args.older_than) if args.older_than else None
    except StorageError as exc:
        raise UsageError(f"expected --older-than as 30d, 12h or 90m, found {args.older_than!r}"
                         ) from exc
    selection = Selection(args.rule, older)
    project = project_of(args)
    table = resolve_table(project, args.table) if "." in args.table else \
        project.table(args.table, Layer.SILVER)
    if table.layer is not Layer.SILVER:
        raise UsageError(f"expected a silver table (quarantined rows are a silver table's), "
                         f"found {table.layer.value}.{table.name}")
    writes = action is not QuarantineAction.LIST
    spark = spark_for(project, f"medallion quarantine {action.value}", writes=writes)
    if action is QuarantineAction.LIST:
        rows = summary(spark, table, selection)
        print_table(["state", "rule", "rows", "oldest", "newest"],
                    [[s, r or "", n, str(o)[:19], str(w)[:19]] for s, r, n, o, w in rows])
        if args.rows:
            print_table(["quarantined at", "state", "rules", "row"],
                        [[str(a)[:19], s, r, row] for a, s, r, row in
                         sample(spark, table, selection, args.rows)])
        left = unfinished(spark, table)
        if left is not None:
            print(f"replay {left} was stopped half way: 'medallion quarantine replay "
                  f"{table.full_name}' completes it")
        return EXIT_OK
    if action is QuarantineAction.DISCARD:
        count = discard(spark, table, selection, args.reason)
        print(f"{table.full_name}: {count} quarantined rows discarded ({args.reason})")
        return EXIT_OK
    run_id = lake_run_id() or uuid.uuid4().hex
    context = {"env": project.env.name, "table": table.full_name, "run_id": run_id}
    stop = StopSignal()  # a replay is one batch: asked to stop, it ends it first, then exits
    with stop.on_signals(signal.SIGTERM, signal.SIGINT):
        done = replay(spark, table, selection, context)
    log = get_logger(**context)
    for step in done:
        log.info("silver.quarantine.replayed", replay_id=step.replay_id, rows=step.rows,
                 rows_written=step.written, quarantined_rows=step.quarantined,
                 held_rows=step.held, dropped_rows=step.dropped, duplicates=step.duplicates,
                 finishing=step.finishing)
        print(f"{table.full_name}: {step.render()}")
    if not done:
        print(f"{table.full_name}: no quarantined rows to replay")
    return EXIT_OK
