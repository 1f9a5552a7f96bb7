"""The one run lifecycle (fabtune.lifecycle): lock held while the run is open and released after,
the run closed on every path (done, failed on an exception, interrupted on Ctrl-C and SIGTERM)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from fabtune.errors import PlaybookFailed, Terminated
from fabtune.journal import Journal
from fabtune.lifecycle import journaled_run
from fabtune.lock import LockedError, fabric_lock
from fabtune.state import HostState


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    return tmp_path


def _locked(fabric: str = "rack") -> bool:
    try:
        with fabric_lock(fabric, "probe"):
            return False
    except LockedError:
        return True


def test_the_lock_is_held_while_the_run_is_open_and_released_after(home: Path) -> None:
    with journaled_run("apply", "rack", "inv.yml", profile="p.yml") as run:
        assert _locked() and not _locked("other")
        holder = json.loads((home / "locks" / "rack.lock").read_text())
        assert holder["purpose"] == "apply"
        assert Journal().run(run.run_id).state == "running"
        run.end("done", {"knobs": 3})
    assert not _locked()
    closed = Journal().run(run.run_id)
    assert (closed.kind, closed.state, closed.profile) == ("apply", "done", "p.yml")
    assert closed.summary == {"knobs": 3}


def test_a_run_refused_by_the_lock_leaves_no_run(home: Path) -> None:
    with (
        fabric_lock("rack", "tune"),
        pytest.raises(LockedError, match="tune"),
        journaled_run("drift", "rack", "inv.yml"),
    ):
        pytest.fail("the body ran without the lock")
    assert Journal().runs() == []


def test_an_exception_closes_the_run_failed_with_its_error_and_releases_the_lock(home: Path) -> None:
    with pytest.raises(PlaybookFailed), journaled_run("apply", "rack", "inv.yml") as run:
        run.end("done", {"knobs": 1})  # what the use case had set is kept
        raise PlaybookFailed("h02: unreachable")
    closed = Journal().run(run.run_id)
    assert closed.state == "failed"
    assert closed.summary == {"knobs": 1, "error": "h02: unreachable"}
    assert not _locked()


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated("terminated by signal SIGTERM")])
def test_ctrl_c_and_sigterm_close_the_run_interrupted(home: Path, stop: KeyboardInterrupt) -> None:
    with pytest.raises(KeyboardInterrupt), journaled_run("apply", "rack", "inv.yml") as run:
        raise stop
    closed = Journal().run(run.run_id)
    assert closed.state == "interrupted"
    assert closed.summary["error"] == (str(stop) or "KeyboardInterrupt")
    assert not _locked()


def test_a_run_of_a_kind_with_a_report_writes_it_and_names_it(home: Path) -> None:
    with journaled_run("drift", "rack", "inv.yml") as run:
        seq = run.step("check", "drift check", {"source": "profile p.yml"})
        run.finish_step(seq, "done", {"items": [], "hosts": ["h01"], "failed": {}})
        run.end("clean")
    closed = Journal().run(run.run_id)
    assert closed.summary["report"] == str(home / "runs" / run.run_id / "report.json")
    assert run.reports is not None and run.reports["json"].is_file()
    assert json.loads(run.reports["json"].read_text())["kind"] == "drift"


def test_a_kind_without_a_report_writes_none(home: Path) -> None:
    with journaled_run("apply", "rack", "inv.yml") as run:
        pass
    assert run.reports is None and "report" not in Journal().run(run.run_id).summary
    assert not (home / "runs").exists()


def test_a_resume_claims_the_run_and_a_stale_lock_is_journaled(home: Path) -> None:
    journal = Journal()
    first = journal.open_run("tune", "rack", "inv.yml", None)
    journal.close_run(first, "failed", {"error": "lost"})
    lock = home / "locks" / "rack.lock"
    lock.parent.mkdir()
    lock.write_text(json.dumps({"pid": 2**22 + 1, "purpose": "tune", "since": 0}))  # its holder died
    with journaled_run("tune", "rack", "inv.yml", resume=first, journal=journal) as run:
        assert journal.run(first).state == "running"
        assert run.stale_lock is not None and "stale" in run.stale_lock
    assert run.run_id == first and [r.id for r in journal.runs()] == [first]
    assert [(s.kind, s.name) for s in journal.steps(first)] == [("lock", "stale lock taken over")]
    assert journal.run(first).state == "done"
    journal.close()


def test_a_drift_run_refused_by_the_lock_leaves_no_run_and_still_exports_its_error(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabtune import drift
    from fabtune.cli import main
    from fabtune.errors import ExitStatus
    from fabtune.inventory import InventoryInfo

    inventory = home / "inv.yml"
    inventory.write_text("all: {}\n")
    info = InventoryInfo(inventory, "rack", "roce", ("h01",), (), "mpirun", None)
    verb = importlib.import_module("fabtune.commands.drift")
    monkeypatch.setattr(verb, "read_inventory", lambda _path: info)
    source = drift.DesiredSource(HostState(), "test")
    monkeypatch.setattr(drift, "desired_for", lambda _info, _profile: source)
    textfile = home / "drift.prom"
    with fabric_lock("rack", "tune"):
        assert main(["drift", "-i", str(inventory), "--textfile", str(textfile)]) == ExitStatus.LOCKED
    assert Journal().runs() == []
    assert 'fabtune_drift_exit_code{fabric="rack"} 1' in textfile.read_text()
