"""Bootstrap: tool and firmware checks, threshold math, suspect-pair re-tests and blame."""

from __future__ import annotations

import dataclasses

import pytest

from fabtune import bootstrap as b
from fabtune.errors import ExitStatus
from fabtune.perf.pairs import PairResult
from fabtune.perf.parsers.ibstat import IbCa, IbStat
from fabtune.perf.schedule import Pair, pair_rounds


def _stat(fw: str) -> IbStat:
    return IbStat((IbCa("mlx5_0", "MT4129", 1, fw), IbCa("mlx5_1", "MT4129", 1, fw)))


def test_firmware_must_agree_across_hosts() -> None:
    assert b.firmware_check({"h01": _stat("28.39.1002"), "h02": _stat("28.39.1002")})[0].verdict == "pass"
    results = b.firmware_check(
        {"h01": _stat("28.39.1002"), "h02": _stat("28.39.1002"), "h03": _stat("28.36.1010")}
    )
    assert {(r.host, r.verdict) for r in results} == {("h03", "fail")}
    assert "28.36.1010" in results[0].summary and "28.39.1002" in results[0].summary


def test_busbw_reference_and_threshold() -> None:
    ref = b.busbw_reference(rails=2, ceiling_gbps=392.0)
    assert ref == pytest.approx(98.0)  # 2 x 392 / 8
    assert b.busbw_check(89.5, ref, 0.8).verdict == "pass"
    low = b.busbw_check(70.0, ref, 0.8)
    assert low.verdict == "fail" and "71%" in low.summary
    assert b.busbw_check(None, ref, 0.8).verdict == "fail"


def _pr(server: str, client: str, gbps: float | None, rail: int = 0, error: str | None = None) -> PairResult:
    return PairResult(server, client, rail, f"mlx5_{rail}", gbps, 400.0, error)


def test_pair_threshold_is_a_share_of_the_ceiling() -> None:
    assert b.judge_pair(_pr("h01", "h02", 361.0), 0.9).verdict == "pass"  # 90.25 %
    assert b.judge_pair(_pr("h01", "h02", 359.0), 0.9).verdict == "fail"
    assert b.judge_pair(_pr("h01", "h02", None, error="timeout"), 0.9).verdict == "fail"


def _matrix(bad: str) -> list[b.PairVerdict]:
    hosts = ["h01", "h02", "h03", "h04"]
    results = []
    for i, s in enumerate(hosts):
        for c in hosts[i + 1 :]:
            results.append(_pr(s, c, 200.0 if bad in (s, c) else 380.0))
    return [b.judge_pair(r, 0.9) for r in results]


def test_suspect_pairs_are_retested_with_known_good_partners_and_the_bad_host_blamed() -> None:
    verdicts = _matrix("h03")
    assert b.good_hosts(verdicts, 0) == {"h01", "h02", "h04"}
    tests = b.plan_retests(verdicts)
    assert {t.host for t in tests} == {"h01", "h02", "h03", "h04"}
    assert all(t.partner is not None and t.partner != "h03" for t in tests)
    rounds = b.retest_rounds(tests)
    for rnd in rounds:  # no host twice in a round
        used = [h for _t, p in rnd for h in (p.server, p.client)]
        assert len(used) == len(set(used))
    # the re-tests: h03 fails with anyone, the others pass
    measured = [
        (t, b.judge_pair(_pr(t.partner or "", t.host, 200.0 if t.host == "h03" else 380.0), 0.9))
        for t in tests
    ]
    blamed = b.blame(verdicts, measured, 0.9)
    assert [(r.host, r.verdict) for r in blamed] == [("h03", "fail")]
    assert "known-good" in blamed[0].summary and "h03" in blamed[0].evidence


def test_pair_failing_only_together_blames_the_path() -> None:
    verdicts = [
        b.judge_pair(r, 0.9)
        for r in (
            _pr("h01", "h02", 100.0),
            _pr("h03", "h04", 380.0),
            _pr("h01", "h03", 380.0),
            _pr("h02", "h04", 380.0),
        )
    ]
    tests = b.plan_retests(verdicts)
    assert {(t.host, t.partner) for t in tests} == {("h01", "h03"), ("h02", "h03")}
    assert len(b.retest_rounds(tests)) == 2  # h03 cannot serve two re-tests at once
    measured = [(t, b.judge_pair(_pr(t.partner or "", t.host, 380.0), 0.9)) for t in tests]
    blamed = b.blame(verdicts, measured, 0.9)
    assert [r.host for r in blamed] == ["h02<->h01"]


def _together() -> tuple[list[b.PairVerdict], list[tuple[b.Retest, b.PairVerdict | None]]]:
    """h02->h01 below the threshold once; each end passes with h03 (the known-good partner)."""
    verdicts = [b.judge_pair(r, 0.9) for r in (_pr("h01", "h02", 316.6), _pr("h03", "h04", 380.0),
                                                 _pr("h01", "h03", 380.0), _pr("h02", "h04", 380.0))]
    tests = b.plan_retests(verdicts)
    return verdicts, [(t, b.judge_pair(_pr(t.partner or "", t.host, 380.0), 0.9)) for t in tests]


def test_a_pair_failing_only_together_is_run_again_and_a_slow_run_is_a_warning() -> None:
    """Real ib_write_bw has an occasional slow run (calibration §7): the clean-clone run's bootstrap
    failed a rack for one pair at 81 % whose ends both passed with others. The pair runs again; a pass
    then is a warning, and the rack is accepted."""
    verdicts, measured = _together()
    cleared = {(t.host, t.rail) for t, v in measured if v is not None and v.verdict == "pass"}
    [again] = b.only_together(verdicts, cleared)
    assert (again.client, again.server) == ("h02", "h01")
    assert b.rerun_rounds([again]) == [[Pair(server="h01", client="h02", rail=0, port=18515)]]
    passed = b.judge_pair(_pr("h01", "h02", 379.0), 0.9, b.RERUN_NOTE)
    [warned] = b.blame(verdicts, measured, 0.9, {("h02", "h01", 0): passed})
    assert (warned.host, warned.verdict) == ("h02<->h01", "warn")
    assert "one slow run" in warned.summary and "379.0 Gb/s" in warned.summary
    report = b.BootstrapReport("rack", "p.yml", 0.9, 0.8, phase="done", checks=[warned], pairs=verdicts,
                               retests=[passed])
    assert report.passed
    failed_again = b.judge_pair(_pr("h01", "h02", 300.0), 0.9, b.RERUN_NOTE)
    [path] = b.blame(verdicts, measured, 0.9, {("h02", "h01", 0): failed_again})
    assert path.verdict == "fail" and "its re-run too: 300.0 Gb/s" in path.summary
    assert not dataclasses.replace(report, checks=[path], retests=[failed_again]).passed


def test_rerun_rounds_keep_each_host_in_one_run() -> None:
    failed = [b.judge_pair(r, 0.9) for r in (_pr("h01", "h02", 1.0), _pr("h01", "h03", 1.0),
                                             _pr("h04", "h05", 1.0))]
    rounds = b.rerun_rounds(failed)
    assert [[(p.client, p.server, p.port) for p in r] for r in rounds] == [
        [("h02", "h01", 18515), ("h05", "h04", 18516)], [("h03", "h01", 18515)]]


def test_no_known_good_partner() -> None:
    verdicts = [b.judge_pair(_pr("h01", "h02", 100.0), 0.9)]
    tests = b.plan_retests(verdicts)
    assert all(t.partner is None for t in tests)
    assert b.retest_rounds(tests) == []
    blamed = b.blame(verdicts, [(t, None) for t in tests], 0.9)
    assert {r.host for r in blamed} == {"h01", "h02"} and all("no known-good" in r.summary for r in blamed)


def test_report_verdict_and_exit_code() -> None:
    report = b.BootstrapReport("rack", "p.yml", 0.9, 0.8, phase="done")
    assert report.passed
    report.checks.append(b.CheckResult("affinity", "h03", "fail", "GPU0 <-> mlx5_0: SYS"))
    assert not report.passed and report.failed_hosts == ["h03"]
    assert b.BootstrapFailed("x").code == ExitStatus.CHECK_FAILED
    assert not b.BootstrapReport("rack", "p.yml", 0.9, 0.8, phase="preflight").passed


def test_odd_host_count_matrix_covers_every_pair() -> None:
    rounds = pair_rounds(["h01", "h02", "h03"], 1)
    seen = sorted(tuple(sorted((p.server, p.client))) for rnd in rounds for p in rnd)
    assert seen == [("h01", "h02"), ("h01", "h03"), ("h02", "h03")]


def test_failures_carry_the_raw_tool_line_as_evidence() -> None:
    from fabtune.perf.fabric import HostView

    topo = "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tSYS\t0-47\nNIC0\tSYS\t X \t\n"
    gids = (
        "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
        "mlx5_0\t1\t4\t0000:0000:0000:0000:0000:ffff:0ad0:010c\t10.208.1.12  \tv1\tenp25s0np0\n"
        "mlx5_0\t1\t5\t0000:0000:0000:0000:0000:ffff:0ad0:010c\t10.208.1.12  \tv2\tenp25s0np0\n"
    )
    views = {"h02": HostView("h02", (), {"topo": topo, "gids": gids})}
    results = b.with_evidence(
        [
            b.CheckResult("affinity", "h02", "fail", "GPU0 <-> mlx5_0: SYS", "\tGPU0\tNIC0"),
            b.CheckResult("gid_index", "h02", "fail", "mlx5_0: RoCEv2 GID at index 5, the rack uses 3", "x"),
            b.CheckResult("link", "*", "pass", "ok"),
        ],
        views,
    )
    assert results[0].evidence == "nvidia-smi topo -m: GPU0 X SYS 0-47"
    assert results[1].evidence == (
        "show_gids: mlx5_0 1 5 0000:0000:0000:0000:0000:ffff:0ad0:010c 10.208.1.12 v2 enp25s0np0"
    )
    assert results[2].evidence == ""
