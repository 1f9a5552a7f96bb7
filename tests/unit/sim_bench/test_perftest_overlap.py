"""Emulated perftest: a flow that shares a link for part of its sampled window reads the
time-weighted mean of the shared and the unshared rate.

Source: perftest reports a ``-D`` run's bandwidth as the bytes moved between the start and the end
of its sampled window over the window's length (``catch_alarm`` in perftest_resources.c takes
the start and end samples; the margins before and after are not counted). Traffic flows through the
margins too, so another run sees this one's then. The sums below are exact: every piece is modelled
with the same run index, so each rate is the same draw of the model.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fabtune.sim import observe, tools
from fabtune.sim.node import NodeState
from fabtune.sim.tools import perftest
from fabtune.sim.tools._perftest_args import parse
from fabtune.testbed import files
from tests.unit.sim_bench.conftest import make_rack

RUN_INDEX = 7
T0 = 1_000_000.0


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """Three hosts: h01 and h02 each send to h03's first NIC (a 2:1 incast when they overlap)."""
    make_rack(tmp_path, hosts=3)
    return tmp_path


def ctx_of(base: Path, host: str, argv: list[str]) -> perftest.Ctx:
    args = parse("ib_write_bw", argv)
    state = NodeState.under(base / host)
    picked = perftest._pick_nic(state, args)
    assert picked is not None
    return perftest.Ctx(args, state, picked[0], picked[1], observe.host_config(state), base / "fabric")


def record(
    base: Path, host: str, start: float, duration: int, port: int
) -> tuple[perftest.Ctx, dict[str, Any]]:
    """A client on ``host`` to h03 started at ``start``, and its published flow record."""
    argv = ["-D", str(duration), "-p", str(port), "--report_gbits", "h03"]
    client = ctx_of(base, host, argv)
    server = ctx_of(base, "h03", argv[:-1])
    peer = perftest.hello(server, perftest.local_side(server))
    return client, perftest._flow_record(client, peer, start)


def rate(base: Path, ctx: perftest.Ctx, mine: dict[str, Any], others: list[dict[str, Any]]) -> float:
    begin, end, _ = perftest.sampled_window(ctx.args)
    records = sorted([mine, *others], key=lambda r: (float(r["start"]), str(r["key"])))
    outcome = perftest.run_model(ctx, mine, records, RUN_INDEX,
                                 (float(mine["start"]) + begin, float(mine["start"]) + end))
    assert outcome.failure is None
    (row,) = outcome.rows
    return row.gbps


def test_flows_started_together_share_for_the_whole_window(base: Path) -> None:
    ctx, a = record(base, "h01", T0, 2, 19500)
    _, b = record(base, "h02", T0, 2, 19501)
    alone, shared = rate(base, ctx, a, []), rate(base, ctx, a, [b])
    assert shared < 0.6 * alone  # two flows into one 400G port


def test_a_flow_started_halfway_through_the_window_averages_the_two_rates(base: Path) -> None:
    ctx, a = record(base, "h01", T0, 2, 19500)
    _, b = record(base, "h02", T0, 2, 19501)
    _, late = record(base, "h02", T0 + 1.0, 2, 19501)
    alone, shared = rate(base, ctx, a, []), rate(base, ctx, a, [b])
    assert rate(base, ctx, a, [late]) == pytest.approx(0.5 * alone + 0.5 * shared, rel=1e-9)
    _, quarter = record(base, "h02", T0 + 1.5, 2, 19501)
    assert rate(base, ctx, a, [quarter]) == pytest.approx(0.75 * alone + 0.25 * shared, rel=1e-9)


def test_a_flow_that_ended_before_the_window_or_ran_in_its_margin_only_is_not_seen(base: Path) -> None:
    ctx, a = record(base, "h01", T0, 8, 19500)  # -D 8: margin 2 s, sampled from T0+2 to T0+6
    _, before = record(base, "h02", T0 - 1.0, 2, 19501)  # runs until T0+1, inside the first margin
    _, after = record(base, "h02", T0 + 6.5, 2, 19502)  # starts inside the closing margin
    alone = rate(base, ctx, a, [])
    assert rate(base, ctx, a, [before, after]) == pytest.approx(alone, rel=1e-9)
    _, b = record(base, "h02", T0, 8, 19501)
    _, overlapping = record(base, "h02", T0 + 5.0, 8, 19501)  # shares 1 s of the 4 s window
    shared = rate(base, ctx, a, [b])
    assert rate(base, ctx, a, [overlapping]) == pytest.approx(0.75 * alone + 0.25 * shared, rel=1e-9)


def test_segments_cut_where_flows_start_and_stop_and_merge_equal_pieces() -> None:
    mine = {"key": "a", "start": 0.0, "until": 10.0}
    b = {"key": "b", "start": 2.0, "until": 4.0}
    c = {"key": "c", "start": 6.0, "until": 12.0}
    got = {tuple(r["key"] for r in s.records): s.share
           for s in perftest.segments(mine, [mine, b, c], (0.0, 10.0))}
    assert got == pytest.approx({("a",): 0.4, ("a", "b"): 0.2, ("a", "c"): 0.4})
    assert sum(got.values()) == pytest.approx(1.0)
    # the flow itself is always in, whether or not it was read back from the directory
    alone = perftest.segments(mine, [], (0.0, 10.0))
    assert [(s.share, [r["key"] for r in s.records]) for s in alone] == [(1.0, ["a"])]


def test_the_emulators_own_start_up_is_left_out_of_a_flows_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real perftest (C) starts its traffic milliseconds after it is started; the emulator's
    interpreter, imports and exchange are not the tool's. Here the process (this test's worker) was
    forked long before the launch, as one a start barrier exec'd: the launcher's time counts."""
    assert perftest.startup_s() == 0.0  # called from Python: no launcher
    monkeypatch.setitem(tools._LAUNCHED, "at", time.time() - 0.5)
    assert 0.5 <= perftest.startup_s() < perftest.STARTUP_MAX_S
    monkeypatch.setitem(tools._LAUNCHED, "at", time.time() - 3600)
    assert perftest.startup_s() == perftest.STARTUP_MAX_S


@pytest.mark.parametrize(("before_launch_s", "from_fork"), [(0.3, True), (1.5, False)])
def test_a_launched_process_starts_when_it_was_forked_unless_it_waited(before_launch_s: float,
                                                                       from_fork: bool) -> None:
    """The time before the launcher's first line is the interpreter's too (fork, from /proc), unless
    it is longer than an interpreter takes: then a program that ran first (a start barrier) exec'd
    the tool, and the launcher's time is the start."""
    code = (f"import time; time.sleep({before_launch_s}); t = time.time(); from fabtune.sim import tools; "
            "tools._LAUNCHED['at'] = t; from fabtune.sim.tools import perftest; "
            "print(perftest.startup_s(), time.time() - t)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    startup, since_launch = map(float, done.stdout.split())
    if from_fork:  # /proc's start ticks are 10 ms apart: the fork may read up to one tick early
        assert since_launch + before_launch_s - 0.011 <= startup < since_launch + perftest.INTERPRETER_MAX_S
    else:
        assert startup == pytest.approx(since_launch, abs=0.05)


def test_a_tool_the_server_runs_starts_when_its_launcher_was_forked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tool server's child runs the tool for a launcher: the start is the launcher's fork (its
    pid), not the child's, which the server forked later."""
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        monkeypatch.setitem(tools._LAUNCHED, "at", time.time())
        monkeypatch.setitem(tools._LAUNCHER, "pid", launcher.pid)
        started = time.time()
        startup = perftest.startup_s()
        assert 0.3 - 0.011 <= startup <= time.time() - started + perftest.INTERPRETER_MAX_S
        monkeypatch.delitem(tools._LAUNCHER, "pid")
        assert perftest.startup_s() < 0.3  # this process's own fork: the test's worker, long before
    finally:
        launcher.kill()
        launcher.wait(timeout=30)


def test_the_launcher_takes_the_time_before_the_tools_imports(tmp_path: Path) -> None:
    files._install_tools(tmp_path, {})
    launcher = (tmp_path / files.TOOL_PATHS["ib_write_bw"].lstrip("/")).read_text().splitlines()
    stamp = launcher.index("LAUNCHED = time.time()")
    assert stamp < launcher.index("from fabtune.sim.toolclient import run")
    assert launcher[-1] == "run('ib_write_bw', LAUNCHED)"
