"""Run reports: every run type's JSON validates against the schema, is rebuilt from the journal alone
(equal to the one written when the run ended), and renders as self-contained HTML and Markdown.

The journals are written by the real code paths (the tuning loop over a scripted rack, the bootstrap
phases and the drift remediation with their host I/O replaced), so they hold what real runs journal.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from fabtune import ansible, report
from fabtune import bootstrap as b
from fabtune import drift as d
from fabtune.ansible import RunOutcome, TaskResult
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from fabtune.lifecycle import journaled_run
from fabtune.perf.checks import CheckResult
from fabtune.perf.pairs import PairResult
from fabtune.perf.schedule import covering_rounds, pair_rounds, rail_pairs
from fabtune.profile import Profile
from fabtune.state import HostState
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneOptions, Tuner
from fabtune.tune.measure import Batch, Sample
from tests.unit.test_tune_loop import FakeRack

HOSTS = ("h01", "h02", "h03", "h04")
FACTORY = {
    "trust": "pcp",
    "pfc": [],
    "mtu": 1500,
    "ecn": {"np": [], "rp": []},
    "cnp_dscp": 48,
    "cnp_prio": 6,
    "roce_tos": 0,
    "roce_mode": 2,
    "dscp2prio": {},
}
HARDWARE = {
    "ports": [
        {"dev": "mlx5_0", "netdev": "eth2", "roce_v2_gid_index": 3},
        {"dev": "mlx5_1", "netdev": "eth3", "roce_v2_gid_index": 3},
    ],
    "topology": None,
}
NCCL_LINE = "h01:1234:1301 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA"
CEILING = 392.7


def ok_outcome(tasks: tuple[TaskResult, ...] = ()) -> RunOutcome:
    return RunOutcome(
        "successful", 0, {"failures": {}, "dark": {}, "changed": {}}, tasks, Path("/nonexistent")
    )


class Rack(FakeRack):
    """Four RoCE hosts whose switches run lossless priority 4; bandwidth follows PFC/ToS and MTU."""

    def __init__(self) -> None:
        super().__init__(4, hosts=HOSTS, factory=FACTORY, hardware=HARDWARE, seed=7)
        self.matrices: list[bool] = []  # each pair matrix asked for: full or one round

    def _lossless(self) -> bool:
        nic = self.state["h01"]["nics"]["eth2"]
        return nic.get("trust") == "dscp" and 4 in (nic.get("pfc") or []) and nic.get("roce_tos") == 138

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        nic = self.state["h01"]["nics"]["eth2"]
        lossless = self._lossless()
        ar = 33.0 * (1.32 if lossless else 1.0) * (1.07 if nic.get("mtu") == 4200 else 1.0)
        aa = 21.0 * (2.6 if lossless else 1.0)
        noise = self.rng.normal(0, 0.012, (repetitions, 2))
        samples = tuple(
            Sample(round(ar * float(np.exp(x)), 2), round(aa * float(np.exp(y)), 2)) for x, y in noise
        )
        transport = tuple(
            CheckResult("transport", h, "pass", "NET/IB over Ethernet", NCCL_LINE.replace("h01", h))
            for h in HOSTS
        )
        pauses = 310 * repetitions if lossless else 0
        return Batch(samples, pauses, transport)

    def pair_matrix(self, full: bool) -> list[PairResult]:
        """ib_write_bw of every rail, every pair or one covering round: 71 % of the ceiling untuned,
        96 % lossless."""
        self.matrices.append(full)
        share = 0.96 if self._lossless() else 0.71
        rounds = pair_rounds(list(HOSTS), 2) if full else rail_pairs(covering_rounds(list(HOSTS)), 2)
        return [
            PairResult(
                p.server, p.client, p.rail, f"mlx5_{p.rail}", round(CEILING * share, 1), CEILING, None,
                {f"{p.server}:eth{2 + p.rail}": {"rx_prio4_pause": 10 if self._lossless() else 0}},
            )
            for rnd in rounds
            for p in rnd
        ]


def tune_run_journal(journal: Journal, home: Path) -> tuple[str, Any]:
    """A tuning run as ``fabtune tune`` makes it: loop, tuned state, close, report."""
    oracle = {"best_busbw": 47.9, "tuned_busbw": 46.4, "share_of_best": 46.4 / 47.9, "size_bytes": 8 << 30}
    with journaled_run("tune", "rack1", home / "inventory.yml", journal=journal) as run:
        tuner = Tuner(Rack(), journal, run.run_id, "roce", options=TuneOptions(skip_groups=("gdr",)))
        result = tuner.run()
        tune_run.finish(run, result, home / "desired" / "rack1.yml", oracle=oracle)
    return run.run_id, result


def _pairs_of(cable_fault: bool) -> list[PairResult]:
    rounds = pair_rounds(list(HOSTS), 2)
    rng = np.random.default_rng(3)
    out = []
    for rnd in rounds:
        for pair in rnd:
            gbps = CEILING * float(rng.uniform(0.955, 0.985))
            if cable_fault and pair.rail == 1 and "h03" in (pair.server, pair.client):
                gbps = CEILING * float(rng.uniform(0.55, 0.62))
            counters = {
                f"{pair.server}:eth{2 + pair.rail}": {"rx_prio3_pause": int(rng.integers(0, 400))},
                f"{pair.client}:eth{2 + pair.rail}": {"tx_prio3_pause": int(rng.integers(0, 400))},
            }
            out.append(
                PairResult(
                    pair.server,
                    pair.client,
                    pair.rail,
                    f"mlx5_{pair.rail}",
                    round(gbps, 2),
                    CEILING,
                    None,
                    counters,
                )
            )
    return out


def bootstrap_run_journal(
    journal: Journal,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    cable_fault: bool = True,
    preflight_fails: bool = False,
) -> str:
    """A bootstrap run through the real phases, with the host I/O replaced by what a rack would say."""
    info = InventoryInfo(home / "inventory.yml", "rack1", "roce", HOSTS, (), "mpirun", None)
    fake_bootstrap_phases(monkeypatch, cable_fault=cable_fault, preflight_fails=preflight_fails)
    run_id = journal.open_run("bootstrap", "rack1", str(info.path), "roce.yml")
    profile = Profile(Path("roce.yml"), HostState(), {})
    rep = b.run_bootstrap(info.path, info, profile, journal=journal, run_id=run_id)
    journal.close_run(
        run_id,
        "passed" if rep.passed else "failed",
        {"phase": rep.phase, "failed_hosts": rep.failed_hosts, "busbw_gbytes": rep.busbw_gbytes},
    )
    return run_id


def fake_bootstrap_phases(
    monkeypatch: pytest.MonkeyPatch, *, cable_fault: bool, preflight_fails: bool = False
) -> None:
    """The bootstrap phases' host I/O replaced by what a 4-host rack (2 rails) would say."""

    def preflight(
        inventory: Path, info: InventoryInfo, rep: b.BootstrapReport, say: Any
    ) -> dict[str, Any] | None:
        rep.checks.append(CheckResult("reachable", "*", "pass", "4 hosts answer"))
        rep.checks += [CheckResult("tools", h, "pass", "19 tools found", "Debian/Ubuntu") for h in HOSTS]
        rep.checks.append(CheckResult("link", "*", "pass", "all ports Active at 400 Gb/s, MTU 1500"))
        rep.checks.append(
            CheckResult("firmware", "*", "pass", "one firmware per HCA model: MT4129 28.39.1002")
        )
        if preflight_fails:
            rep.checks.append(
                CheckResult(
                    "affinity",
                    "h02",
                    "fail",
                    "GPU1 <-> NIC1: SYS",
                    "nvidia-smi topo -m: GPU1 SYS X NODE SYS PIX",
                )
            )
        return {}

    def apply_profile(inventory: Path, profile: Profile, rep: b.BootstrapReport, say: Any) -> bool:
        tasks = tuple(
            TaskResult(
                h,
                "Configure RoCE QoS",
                "fabtune.fabric.roce_qos",
                "runner_on_ok",
                True,
                {
                    "changed": True,
                    "changes": [
                        {"knob": f"{dev}.trust", "before": "pcp", "after": "dscp"},
                        {"knob": f"{dev}.pfc", "before": [], "after": [3]},
                        {"knob": f"{dev}.mtu", "before": 1500, "after": 4200},
                    ],
                },
            )
            for h in HOSTS
            for dev in ("eth2", "eth3")
        )
        rep.changes = dict.fromkeys(HOSTS, 6)
        rep.applied = {h: [c for t in tasks if t.host == h for c in t.result["changes"]] for h in HOSTS}
        rep.checks.append(CheckResult("apply", "*", "pass", "profile applied (24 knobs changed)"))
        return True

    def acceptance(inventory: Path, info: InventoryInfo, rep: b.BootstrapReport, say: Any) -> None:
        rep.checks.append(CheckResult("link", "*", "pass", "all ports Active at 400 Gb/s, MTU 4200"))
        rep.pairs = [b.judge_pair(r, rep.pair_threshold) for r in _pairs_of(cable_fault)]
        tests = b.plan_retests(rep.pairs)
        measured = {}
        for t in tests:
            gbps = CEILING * (0.58 if t.host == "h03" else 0.97)
            v = b.judge_pair(
                PairResult(t.partner or "h01", t.host, t.rail, f"mlx5_{t.rail}", round(gbps, 1), CEILING),
                rep.pair_threshold,
                f"re-test of {t.host} with known-good {t.partner}",
            )
            measured[(t.host, t.rail)] = v
            rep.retests.append(v)
        rep.checks += b.blame(
            rep.pairs, [(t, measured.get((t.host, t.rail))) for t in tests], rep.pair_threshold
        )
        if not any(p.verdict == "fail" for p in rep.pairs):
            rep.checks.append(CheckResult("pair_bandwidth", "*", "pass", f"{len(rep.pairs)} pair runs"))
        rep.busbw_reference_gbytes = b.busbw_reference(2, CEILING)
        rep.busbw_gbytes = 88.1 if cable_fault else 91.6
        rep.checks.append(
            b.busbw_check(
                rep.busbw_gbytes,
                rep.busbw_reference_gbytes,
                rep.busbw_threshold,
                "8GB over 4 hosts x 2 GPUs, 2 rails of 392.7 Gb/s",
            )
        )
        rep.checks += [
            CheckResult("transport", h, "pass", "NET/IB over Ethernet", NCCL_LINE.replace("h01", h))
            for h in HOSTS
        ]

    monkeypatch.setattr(b, "preflight", preflight)
    monkeypatch.setattr(b, "apply_profile", apply_profile)
    monkeypatch.setattr(b, "acceptance", acceptance)


def _bandwidth(scale: float) -> d.Bandwidth:
    pairs = tuple(
        PairResult(
            s,
            c,
            r,
            f"mlx5_{r}",
            round(CEILING * 0.96 * scale, 1),
            CEILING,
            None,
            {f"{s}:eth{2 + r}": {"rx_prio3_pause": 120}},
        )
        for s, c in (("h01", "h02"), ("h03", "h04"))
        for r in (0, 1)
    )
    return d.Bandwidth(pairs, round(44.0 * scale, 2))


def drift_run_journal(
    journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch, *, worse: bool = False, clean: bool = False
) -> str:
    """A drift run as ``fabtune drift --remediate`` journals it (check, snapshot, measure, apply...)."""
    info = InventoryInfo(home / "inventory.yml", "rack1", "roce", HOSTS, (), "mpirun", None)
    items = (
        ()
        if clean
        else (
            d.DriftItem("h02", "eth2.pfc", [3], []),
            d.DriftItem("h02", "eth3.pfc", [3], []),
            d.DriftItem("h04", "eth2.mtu", 4200, 1500),
            d.DriftItem("h04", "nccl.NCCL_IB_TC", "106", None),
        )
    )
    found = d.DriftReport(HOSTS, items)
    source = "tuned desired state /var/lib/fabtune/desired/rack1.yml"
    run_id = journal.open_run("drift", "rack1", str(info.path), None)
    seq = journal.step(run_id, "check", "drift check", {"source": source})
    journal.finish_step(run_id, seq, "done", d.drift_payload(found, source))
    rem = None
    if not clean:
        measured = iter([_bandwidth(0.8), _bandwidth(0.7 if worse else 1.0)])
        monkeypatch.setattr(
            d, "snapshot_facts", lambda inv, hosts: {h: HostState(nics={"eth2": FACTORY}) for h in hosts}
        )
        monkeypatch.setattr(d, "read_hosts", lambda inv: {})
        monkeypatch.setattr(d, "measure", lambda inv, views, info: next(measured))
        monkeypatch.setattr(d, "restore", lambda inv, snaps: None)
        monkeypatch.setattr(
            d, "detect", lambda inv, desired, hosts, own=None, extravars=None: d.DriftReport(HOSTS, ())
        )
        task = TaskResult(
            "h04",
            "Configure RoCE QoS",
            "fabtune.fabric.roce_qos",
            "runner_on_ok",
            True,
            {"changed": True, "changes": [{"knob": "eth2.mtu", "before": 1500, "after": 4200}]},
        )
        monkeypatch.setattr(ansible, "run_playbook", lambda *a, **k: ok_outcome((task,)))
        rem = d.remediate(info.path, info, HostState(), found, journal=journal, run_id=run_id)
    result = d.DriftResult("rack1", source, found, rem)
    state = "clean" if clean else "rolled_back" if rem and rem.rolled_back else "remediated"
    journal.close_run(
        run_id,
        state,
        {
            "knobs": len(found.items),
            "hosts": found.drifted_hosts,
            "error": None,
            "exit": int(result.exit_status),
        },
    )
    return run_id


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def journal(home: Path) -> Journal:
    return Journal(home / "journal.sqlite")


KINDS = [
    "tune",
    "bootstrap",
    "bootstrap-pass",
    "bootstrap-preflight",
    "drift",
    "drift-rolled-back",
    "drift-clean",
]


def make(kind: str, journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if kind == "tune":
        return tune_run_journal(journal, home)[0]
    if kind.startswith("bootstrap"):
        return bootstrap_run_journal(
            journal,
            home,
            monkeypatch,
            cable_fault=kind == "bootstrap",
            preflight_fails=kind == "bootstrap-preflight",
        )
    return drift_run_journal(
        journal, home, monkeypatch, worse=kind == "drift-rolled-back", clean=kind == "drift-clean"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_every_run_type_validates_and_regenerates_from_the_journal(
    kind: str, journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = make(kind, journal, home, monkeypatch)
    written = (
        report.write_all(journal, run_id)
        if kind != "tune"
        else {f: report.report_dir(run_id) / f"report.{f}" for f in report.FORMATS}
    )  # tune wrote its own at the end
    doc = json.loads(written["json"].read_text())
    report.validate(doc)
    assert doc["schema"] == "fabtune.report" and doc["schema_version"] == 1
    assert doc["kind"] == kind.split("-", maxsplit=1)[0] and doc["run"]["id"] == run_id
    # regenerated later, from a fresh handle on the journal alone: byte for byte the same
    again = Journal(journal.path)
    regenerated = report.build(again, run_id)
    assert regenerated == doc
    for fmt, path in written.items():
        assert path.read_text() == report.render(regenerated, fmt, str(written["html"])), fmt


def test_tune_report_holds_the_run(journal: Journal, home: Path) -> None:
    run_id, result = tune_run_journal(journal, home)
    doc = json.loads((report.report_dir(run_id) / "report.json").read_text())
    assert doc["oracle"]["share_of_best"] == pytest.approx(46.4 / 47.9)  # what the testbed test reads
    t = doc["tune"]
    assert [(m["name"], m["outcome"]) for m in t["decisions"]] == [(m.name, m.outcome) for m in result.moves]
    assert [m["outcome"] for m in t["decisions"]] == [
        "rolled_back",
        "kept",
        "kept",
        "rolled_back",  # the QP ladder stops at its first rung that does not improve
    ]
    assert t["baseline_median"] == pytest.approx(float(np.median(result.baseline)), rel=1e-3)
    assert t["final_median"] == pytest.approx(float(np.median(result.final)), rel=1e-3)
    kept = t["decisions"][1]
    assert kept["all_reduce"]["ci_low"] > 1.0 and kept["alltoall"]["ratio"] > 2 and kept["pause_frames"] > 0
    primary, guard = doc["bandwidth"]
    assert [p["outcome"] for p in primary["series"]][:3] == ["baseline", "rolled_back", "kept"]
    assert all(p["ci_low"] <= p["median"] <= p["ci_high"] for p in primary["series"])
    assert guard["series"][2]["n"] == len(result.moves[1].alltoall) > 0
    net = {
        (s["host"], s["knob"]): (s["before"], s["after"])
        for s in doc["settings"]
        if s["change"] == "whole run"
    }
    assert net[("h03", "nics.eth3.mtu")] == (1500, 4200) and net[("h01", "nics.eth2.pfc")] == ([], [4])
    assert ("h01", "nics.eth2.roce_tos") in net and all(
        k[1] != "nccl.NCCL_IB_QPS_PER_CONNECTION" for k in net
    )
    rolled = [s for s in doc["settings"] if s["change"] == "lossless priority 3"]
    assert (
        rolled and {s["outcome"] for s in rolled} == {"rolled_back"} and len({s["host"] for s in rolled}) == 4
    )
    assert {c["host"] for c in doc["checks"] if c["check"] == "transport"} == set(HOSTS)
    assert doc["status"] == "pass" and "GB/s" in doc["headline"]


def test_bootstrap_report_has_pairs_gpus_counters_and_evidence(
    journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = report.build(journal, bootstrap_run_journal(journal, home, monkeypatch))
    assert doc["status"] == "fail" and "h03" in doc["bootstrap"]["failed_hosts"]
    matrix = [p for p in doc["pairs"]["results"] if not p["retest"]]
    assert len(matrix) == 12 and all(p["share"] is not None for p in matrix)  # 6 host pairs x 2 rails
    assert {p["verdict"] for p in matrix if "h03" in (p["client"], p["server"]) and p["rail"] == 1} == {
        "fail"
    }
    assert any(p["retest"] for p in doc["pairs"]["results"])
    gpus = {g["gpu"]: g for g in doc["gpus"]}
    assert gpus["GPU1"]["share_min"] < 0.7 and gpus["GPU0"]["share_min"] > 0.9
    assert doc["counters"] and {c["counter"] for c in doc["counters"]} == {"rx_prio3_pause", "tx_prio3_pause"}
    blamed = [c for c in doc["checks"] if c["check"] == "pair_bandwidth" and c["host"] == "h03"]
    assert blamed and "mlx5_1" in blamed[0]["evidence"]
    assert any(c["check"] == "tools" and c["verdict"] == "pass" and c["evidence"] for c in doc["checks"])
    assert {(s["knob"], json.dumps(s["after"])) for s in doc["settings"] if s["host"] == "h01"} >= {
        ("eth2.pfc", "[3]"),
        ("eth3.mtu", "4200"),
    }
    assert doc["bandwidth"][0]["reference"] == pytest.approx(2 * CEILING / 8)


def test_drift_report(journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = report.build(journal, drift_run_journal(journal, home, monkeypatch, worse=True))
    assert doc["status"] == "fail" and "rolled back" in doc["headline"]
    rem = doc["drift"]["remediation"]
    assert rem["rolled_back"] and rem["reasons"] and rem["before"]["busbw_gbytes"] == pytest.approx(35.2)
    assert {(s["host"], s["knob"], s["outcome"]) for s in doc["settings"]} >= {
        ("h04", "eth2.mtu", "rolled_back")
    }
    assert [c["verdict"] for c in doc["checks"] if c["check"] == "drift"] == ["pass", "warn", "pass", "warn"]
    assert doc["pairs"]["source"] == "after" and doc["gpus"][0]["ceiling_gbps"] == CEILING


def test_schema_rejects_what_it_should(journal: Journal, home: Path) -> None:
    run_id, _ = tune_run_journal(journal, home)
    doc = report.build(journal, run_id)
    for broken in (
        {k: v for k, v in doc.items() if k != "tune"},
        {**doc, "schema_version": 2},
        {**doc, "status": "great"},
        {**doc, "run": {**doc["run"], "started": "yesterday"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            report.validate(broken)


def test_html_is_self_contained(journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for kind in ("tune", "bootstrap", "drift"):
        html = report.render_html(report.build(journal, make(kind, journal, home, monkeypatch)))
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", html, re.I), kind
        assert "<script" not in html and "<link" not in html and "@import" not in html and "url(" not in html
        assert html.count("<svg") >= 3, kind
        assert ">Checks and their evidence</h2>" in html and ">Settings applied (diff)</h2>" in html


def test_markdown_summary(journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id, _ = tune_run_journal(journal, home)
    md = (report.report_dir(run_id) / "report.md").read_text()
    assert md.startswith(f"**fabtune tune** `{run_id}` on `rack1` (4 hosts): **PASS**")
    assert "| lossless priority 4 | kept |" in md and "of the model's best reachable busbw" in md
    assert f"{report.report_dir(run_id)}/report.html" in md and len(md.splitlines()) < 30
    boot = report.render_markdown(report.build(journal, bootstrap_run_journal(journal, home, monkeypatch)))
    assert "**FAIL**" in boot and "| h03 | pair_bandwidth |" in boot


def test_report_command(journal: Journal, home: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fabtune.commands.report import report as command

    run_id, _ = tune_run_journal(journal, home)
    runner = CliRunner()
    out = runner.invoke(command, [run_id, "--format", "md"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("**fabtune tune**")
    target = tmp_path / "r.html"
    out = runner.invoke(command, [run_id, "--format", "html", "--output", str(target)])
    assert out.exit_code == 0 and target.read_text().startswith("<!DOCTYPE html>")
    out = runner.invoke(command, [run_id])
    assert out.exit_code == 0 and json.loads(out.output)["run"]["id"] == run_id
    assert runner.invoke(command, ["no-such-run"]).exit_code != 0



def test_report_command_follows_the_output_convention(
    journal: Journal, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from fabtune.commands.report import report as command

    run_id, _ = tune_run_journal(journal, home)
    runner = CliRunner()
    out = runner.invoke(command, [run_id, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["run"]["id"] == run_id
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(command, [run_id, "-o", "-"])
    assert out.exit_code == 0 and json.loads(out.stdout)["run"]["id"] == run_id
    assert not (tmp_path / "-").exists()
    assert runner.invoke(command, [run_id, "--json", "--format", "md"]).exit_code == 2


def test_progress_lines_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabtune.commands._progress import Progress
    from fabtune.events import phases, round_event

    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    progress = Progress(jsonl=True)
    progress(*round_event("pair matrix", 3, 7, 12.4))
    phases(progress)("applying the baseline profile")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["kind"] == "round" and (lines[0]["round"], lines[0]["rounds"], lines[0]["eta_s"]) == (
        3,
        7,
        12,
    )
    assert lines[0]["phase"] == "pair matrix" and lines[1]["kind"] == "phase"
    plain = Progress(jsonl=False)
    assert not plain.console.is_terminal  # under pytest: plain lines on stderr
