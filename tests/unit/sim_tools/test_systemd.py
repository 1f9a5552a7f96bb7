"""The emulated systemd-run / systemctl: transient timers that fire, stop, refuse reuse (tmp dirs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fabtune.sim.tools import TOOLS, systemd

Capture = pytest.CaptureFixture[str]


def wait_for(path: Path, seconds: float) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


def test_registered() -> None:
    assert TOOLS["systemd-run"] is systemd.run_main and TOOLS["systemctl"] is systemd.systemctl_main


SPANS = [("15", 15.0), ("15s", 15.0), ("1min 30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("x", None),
         ("", None)]


@pytest.mark.parametrize(("text", "seconds"), SPANS)
def test_timespan(text: str, seconds: float | None) -> None:
    assert systemd.parse_timespan(text) == seconds


def test_timer_fires_and_stays_loaded_until_stopped(tmp_path: Path, capsys: Capture) -> None:
    run_dir, fired = tmp_path / "transient", tmp_path / "fired"
    code = systemd.run_main(["--unit=t1", "--on-active=1s", "--timer-property=AccuracySec=1s",
                             "/bin/sh", "-c", f"echo $PATH > {fired}"], run_dir=run_dir)
    assert code == 0
    said = capsys.readouterr().err
    assert said == "Running timer as unit: t1.timer\nWill run service as unit: t1.service\n"
    record = systemd.load(run_dir, "t1")
    assert record is not None and record.state == "waiting" and record.properties == {"AccuracySec": "1s"}
    assert systemd.systemctl_main(["is-active", "t1.timer"], run_dir=run_dir) == 0
    assert capsys.readouterr().out == "active\n"
    assert wait_for(fired, 5)
    assert fired.read_text().strip() == systemd.SERVICE_PATH  # systemd's service environment
    deadline = time.time() + 3
    rec = systemd.load(run_dir, "t1")
    while rec is not None and rec.state != "elapsed" and time.time() < deadline:
        time.sleep(0.05)
        rec = systemd.load(run_dir, "t1")
    assert rec is not None and rec.state == "elapsed"
    assert systemd.run_main(["--unit=t1", "--on-active=1s", "/bin/true"], run_dir=run_dir) == 1
    assert capsys.readouterr().err == ("Failed to start transient timer unit: Unit t1.timer was already "
                                       "loaded or has a fragment file.\n")
    assert systemd.systemctl_main(["stop", "t1.timer"], run_dir=run_dir) == 0
    assert not (run_dir / "t1.timer").exists()
    assert "Started t1.service" in (run_dir / "t1.service.log").read_text()


def test_stop_before_the_deadline_cancels(tmp_path: Path, capsys: Capture) -> None:
    run_dir, fired = tmp_path / "transient", tmp_path / "fired"
    argv = ["-q", "--unit", "t2", "--on-active=1", "/bin/touch", str(fired)]
    assert systemd.run_main(argv, run_dir=run_dir) == 0
    assert capsys.readouterr().err == ""
    record = systemd.load(run_dir, "t2")
    assert record is not None
    assert systemd.systemctl_main(["stop", "t2.timer"], run_dir=run_dir) == 0
    time.sleep(1.6)
    assert not fired.exists()
    assert systemd.systemctl_main(["is-active", "t2.timer"], run_dir=run_dir) == 3
    assert capsys.readouterr().out == "inactive\n"
    # the name is free again
    assert systemd.run_main(["--unit=t2", "--on-active=30s", "/bin/true"], run_dir=run_dir) == 0
    assert systemd.systemctl_main(["stop", "t2"], run_dir=run_dir) == 5  # t2.service is not running
    assert systemd.systemctl_main(["stop", "t2.timer"], run_dir=run_dir) == 0


def test_stop_unknown_unit_is_the_real_error(tmp_path: Path, capsys: Capture) -> None:
    assert systemd.systemctl_main(["stop", "nope.timer"], run_dir=tmp_path) == 5
    assert capsys.readouterr().err == "Failed to stop nope.timer: Unit nope.timer not loaded.\n"


def test_list_timers(tmp_path: Path, capsys: Capture) -> None:
    assert systemd.run_main(["--unit=t3", "--on-active=60s", "/bin/true"], run_dir=tmp_path) == 0
    capsys.readouterr()
    assert systemd.systemctl_main(["list-timers", "--all", "--no-pager"], run_dir=tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NEXT", "LEFT", "LAST", "PASSED", "UNIT", "ACTIVATES"]
    assert lines[1].split()[-2:] == ["t3.timer", "t3.service"]
    assert lines[-1] == "1 timers listed."
    systemd.systemctl_main(["stop", "t3.timer"], run_dir=tmp_path)


def test_argument_errors(tmp_path: Path, capsys: Capture) -> None:
    assert systemd.run_main(["--unit=t4", "--on-active=1s"], run_dir=tmp_path) == 1
    assert capsys.readouterr().err == "Command line to execute required.\n"
    assert systemd.run_main(["--unit=t4", "--on-active=soon", "/bin/true"], run_dir=tmp_path) == 1
    assert capsys.readouterr().err == "Failed to parse timer value: soon\n"
    assert systemd.run_main(["--unit=t4", "--on-active=1s", "no-such-command-x"], run_dir=tmp_path) == 1
    assert "Failed to find executable no-such-command-x" in capsys.readouterr().err
    assert not (tmp_path / "t4.timer").exists()


def test_other_verbs_are_refused_clearly(tmp_path: Path, capsys: Capture) -> None:
    assert systemd.systemctl_main(["restart", "opensm.service"], run_dir=tmp_path) == 1
    assert "not supported on this emulated host" in capsys.readouterr().err


def test_never_creates_run_systemd_system(tmp_path: Path) -> None:
    run_dir = tmp_path / "run/systemd/transient"
    assert systemd.run_main(["-q", "--unit=t5", "--on-active=60s", "/bin/true"], run_dir=run_dir) == 0
    assert not (tmp_path / "run/systemd/system").exists()
    systemd.systemctl_main(["stop", "t5.timer"], run_dir=run_dir)


def test_advance_lets_time_pass_for_the_timers_waiting_now(tmp_path: Path, capsys: Capture) -> None:
    """A test's clock: the waiting timers' deadlines move earlier and the sleepers follow; a timer
    armed after the advance keeps its own deadline, a stopped one never fires."""
    run_dir = tmp_path / "transient"
    early, late, stopped = tmp_path / "early", tmp_path / "late", tmp_path / "stopped"
    def arm(unit: str, mark: Path) -> None:
        assert systemd.run_main(["-q", f"--unit={unit}", "--on-active=600s", "/bin/touch", str(mark)],
                                run_dir=run_dir) == 0

    arm("a1", early)
    arm("a2", stopped)
    assert systemd.systemctl_main(["stop", "a2.timer"], run_dir=run_dir) == 0
    armed = systemd.load(run_dir, "a1")
    assert armed is not None
    assert systemd.advance(run_dir, 599) == ["a1"]
    moved = systemd.load(run_dir, "a1")
    assert moved is not None and moved.deadline == pytest.approx(armed.deadline - 599, abs=0.01)
    arm("a3", late)
    assert wait_for(early, 5)
    time.sleep(1.0)
    assert not late.exists() and not stopped.exists()
    later = systemd.load(run_dir, "a3")
    assert later is not None and later.deadline > time.time() + 590
    with pytest.raises(ValueError, match="negative"):
        systemd.advance(run_dir, -1)
    assert systemd.systemctl_main(["stop", "a1.timer", "a3.timer"], run_dir=run_dir) == 0
    assert systemd.advance(tmp_path / "none", 10) == []
