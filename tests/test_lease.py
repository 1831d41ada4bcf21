"""One writer per lake: the lease a command takes before Spark starts (framework.lease).

The holders here are real processes: one that holds the lake and is killed, stopped or lets
go; and a real ``medallion run`` that a second one finds holding the lake.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from framework.cli import main
from framework.errors import LakeInUseError
from framework.lease import Lease
from framework.storage import LocalStorage
from tests.support import REPO, CliRun, Lakehouse, bronze_spec, medallion_cmd, write_order_files

HOLDER = textwrap.dedent("""
    import sys, time
    from framework.lease import Lease
    from framework.logging import configure_logging
    from framework.storage import LocalStorage
    configure_logging("json", "info")
    root, ttl, hold, release = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    lease = Lease(LocalStorage(), root, "holder", ttl=ttl).acquire()
    print(lease.run_id, flush=True)
    time.sleep(hold)
    if release == "release":
        lease.release()
    print("done", flush=True)
""")


def _holder(root: Path, *, ttl: float = 60, hold: float = 600, release: bool = True
            ) -> tuple[subprocess.Popen[str], str]:
    """A process holding the lake; returns it and its run id once it holds it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(ttl), str(hold),
         "release" if release else "keep"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert run_id, proc.stderr.read() if proc.stderr else ""
    return proc, run_id


def _lease_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "_lease").iterdir())


def test_a_second_command_hears_who_holds_the_lake_and_gets_it_once_released(
        tmp_path: Path) -> None:
    first = Lease(LocalStorage(), str(tmp_path), "medallion run all").acquire()
    with pytest.raises(LakeInUseError) as caught:
        Lease(LocalStorage(), str(tmp_path), "medallion run silver").acquire()
    since = time.strftime("%Y-%m-%d %H:%M", time.gmtime(first.holder.since))
    assert str(caught.value).startswith(
        f"lake in use by run {first.run_id} (medallion run all, pid {os.getpid()}) on "
        f"{socket.gethostname()} since {since}")
    assert _lease_files(tmp_path) == ["0000000001.json"]

    first.release()
    held = json.loads((tmp_path / "_lease" / "0000000001.json").read_text())
    assert held["released"] is True and held["run_id"] == first.run_id
    second = Lease(LocalStorage(), str(tmp_path), "medallion run silver").acquire()
    assert second.number == 2
    assert _lease_files(tmp_path) == ["0000000002.json"]  # earlier numbers are forgotten
    second.release()


def test_a_killed_holders_lease_is_taken_over_at_once(tmp_path: Path) -> None:
    proc, dead_id = _holder(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    started = time.monotonic()
    lease = Lease(LocalStorage(), str(tmp_path), "medallion run all").acquire()
    assert time.monotonic() - started < 5  # not after the lease's 60 s
    assert lease.number == 2 and lease.run_id != dead_id
    lease.release()


def test_a_holder_that_stopped_renewing_loses_the_lake_and_stops(tmp_path: Path) -> None:
    proc, stalled_id = _holder(tmp_path, ttl=2)
    os.kill(proc.pid, signal.SIGSTOP)  # alive, but renewing nothing
    try:
        with pytest.raises(LakeInUseError, match=stalled_id):
            Lease(LocalStorage(), str(tmp_path), "medallion run all").acquire()
        time.sleep(2.5)
        lease = Lease(LocalStorage(), str(tmp_path), "medallion run all", ttl=60).acquire()
        assert lease.number == 2
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # back, the stalled holder finds a newer lease at its next renewal, and stops itself
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert proc.stderr is not None and "lake.lease.lost" in proc.stderr.read()
    assert lease.renew()  # the new holder keeps the lake
    lease.release()


def test_wait_takes_the_lake_when_its_holder_lets_go(tmp_path: Path) -> None:
    proc, _ = _holder(tmp_path, hold=2)
    started = time.monotonic()
    lease = Lease(LocalStorage(), str(tmp_path), "medallion run all").acquire(wait=True,
                                                                             poll=0.2)
    assert time.monotonic() - started > 1
    assert proc.wait(timeout=30) == 0
    assert lease.number == 2
    lease.release()


def test_a_second_run_exits_2_before_starting_spark(tmp_path: Path) -> None:
    """Two runs on one lake: the second says at once who holds it, instead of waiting on the
    embedded metastore's lock and failing with a Hive stack a minute later."""
    lh = Lakehouse(tmp_path)
    lh.add_table("bronze", "orders", bronze_spec())
    write_order_files(lh.path("landing", "orders"), files=2, per_file=5)
    first = CliRun(["run", "bronze", "--log-level", "debug"], lh.cli_env())
    taken = first.wait_for("lake.lease.taken")
    started = time.monotonic()
    second = subprocess.run([*medallion_cmd(), "run", "bronze", "--log-format", "console"],
                            env=lh.cli_env(), cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    code, out = first.finish()
    assert code == 0, "".join(first.lines[-20:])
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip().splitlines()[-1].startswith(
        f"error: lake in use by run {taken['run_id']} (medallion run bronze, pid "
        f"{first.proc.pid}) on {socket.gethostname()} since ")
    assert len(second.stderr.splitlines()) <= 3 and "Hive" not in second.stderr
    assert elapsed < 20  # no Spark was started
    assert f"run {taken['run_id']} " in out  # the run's summary carries the lease's id


def test_status_answers_while_another_command_holds_the_lake(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """status reads the lake's files, not the embedded metastore: it needs no lease, so it
    answers at once while a run holds the lake, and takes none."""
    lh = Lakehouse(tmp_path)
    lh.add_table("bronze", "orders", bronze_spec())
    proc, _ = _holder(lh.root, hold=600)
    try:
        started = time.monotonic()
        assert main(["status", "--conf", str(lh.conf), "--env", lh.env_name]) == 0
        assert time.monotonic() - started < 20
        assert "orders | missing" in capsys.readouterr().out
        assert _lease_files(lh.root) == ["0000000001.json"]
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_run_asked_to_stop_while_it_takes_the_lake_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM from a scheduler before any table started (the lake just taken, Spark
    starting): the run exits 0 with a summary that says it stopped, and gives the lake back."""
    lh = Lakehouse(tmp_path)
    lh.add_table("bronze", "orders", bronze_spec())
    write_order_files(lh.path("landing", "orders"), files=1, per_file=5)
    run = CliRun(["run", "bronze", "--log-level", "debug"], lh.cli_env())
    run.wait_for("lake.lease.taken")
    run.proc.send_signal(signal.SIGTERM)
    code, out = run.finish()
    assert code == 0, "".join(run.lines[-20:])
    assert "): stopped in" in out.splitlines()[0], out
    assert "a stop was requested (SIGTERM)" in out
    [lease] = (lh.root / "_lease").iterdir()
    assert json.loads(lease.read_text())["released"] is True
    assert len(list(lh.path("landing", "orders").iterdir())) == 1  # nothing was read


def test_an_advertised_address_stays_in_the_lease_through_renewals(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    lease = Lease(LocalStorage(), root, "medallion serve", ttl=0.2).acquire()
    try:
        assert Lease(LocalStorage(), root, "medallion sql").current().serves is None
        lease.advertise("127.0.0.1:10001")
        time.sleep(0.3)  # renewed every 0.05 s meanwhile
        holder = Lease(LocalStorage(), root, "medallion sql").current()
        assert holder is not None and holder.run_id == lease.run_id
        assert holder.renewed > holder.since and holder.serves == "127.0.0.1:10001"
    finally:
        lease.release()
    assert Lease(LocalStorage(), root, "medallion sql").current() is None


def test_a_renewal_after_the_release_leaves_the_lake_released(tmp_path: Path) -> None:
    # as the renewing thread does when release's wait for it runs out mid-renewal
    root, lost = str(tmp_path / "lake"), []
    lease = Lease(LocalStorage(), root, "medallion run all", ttl=60,
                  on_lost=lambda: lost.append(True)).acquire()
    lease.release()
    assert not lease.renew()
    assert lost == []  # not taken for a lake lost to another command (which stops the run)
    assert json.loads((tmp_path / "lake" / "_lease" / "0000000001.json").read_text())["released"]
    assert Lease(LocalStorage(), root, "medallion sql").current() is None
