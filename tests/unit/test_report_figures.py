"""The report's figures carry the run's numbers (issue 14): settings per knob with maps as maps,
counters per host port as small multiples, busbw per GPU against the line rate and the rule of
thumb, the noise band around the model's best, the p-value the reason cites; and the tune verb's
closing line uses the median the report uses.

The journals come from the real code paths (the tuning loop over a scripted rack, the bootstrap
phases and the drift remediation of test_report.py); the rack here answers as mlnx_qos does (the
whole 64-entry DSCP map under DSCP trust) and counts CNPs on one port.
"""

from __future__ import annotations

import copy
import html as htmllib
import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import linkrate, report
from fabtune.ansible import RunOutcome, TaskResult
from fabtune.commands.tune import print_result
from fabtune.errors import ConfigError, PlaybookFailed
from fabtune.journal import Journal
from fabtune.lifecycle import journaled_run
from fabtune.perf import pairs, rdmacounters
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.pairs import PairResult
from fabtune.perf.schedule import Pair
from fabtune.profile import tune_options
from fabtune.report.build import diff_states, median_ci
from fabtune.tune import measure
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneOptions, Tuner, TuneResult
from fabtune.tune.measure import Batch
from fabtune.tune.stats import decide
from tests.unit.test_report import (
    CEILING,
    HOSTS,
    Rack,
    bootstrap_run_journal,
    drift_run_journal,
)

PORTS = [
    {
        "dev": f"mlx5_{i}",
        "port": 1,
        "netdev": f"eth{2 + i}",
        "link_layer": "Ethernet",
        "rate": "400 Gb/sec (4X NDR)",
        "roce_v2_gid_index": 3,
    }
    for i in (0, 1)
]
BEST = 47.9
CNPS_PER_RUN = 3


class FigureRack(Rack):
    """test_report's rack with port rates, mlnx_qos's full DSCP map and CNPs counted on h02's eth3."""

    def __init__(self) -> None:
        super().__init__()
        self.hardware = {"ports": PORTS, "topology": None}

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        found = super().facts(hosts=hosts)
        for fact in found.values():
            for nic in fact["nics"].values():
                if nic.get("trust") == "dscp":  # mlnx_qos prints the whole table, the defaults included
                    nic["dscp2prio"] = {d: d >> 3 for d in range(64)} | {
                        int(k): v for k, v in (nic.get("dscp2prio") or {}).items()
                    }
        return found

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        batch = super().measure(repetitions)
        counters = {"h02:eth3": {"np_cnp_sent": CNPS_PER_RUN * repetitions}}
        return Batch(batch.samples, batch.pause_frames, batch.transport, counters=counters)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def journal(home: Path) -> Journal:
    return Journal(home / "journal.sqlite")


@pytest.fixture
def tuned(journal: Journal, home: Path) -> tuple[dict[str, Any], str]:
    options = TuneOptions(skip_groups=("gdr",), pair_matrix="full")
    oracle = {"best_busbw": BEST, "tuned_busbw": 46.4, "share_of_best": 46.4 / BEST, "size_bytes": 8 << 30}
    with journaled_run("tune", "rack1", home / "inventory.yml", journal=journal) as run:
        result = Tuner(FigureRack(), journal, run.run_id, "roce", options=options).run()
        tune_run.finish(run, result, home / "desired" / "rack1.yml", oracle=oracle)
    run_id = run.run_id
    doc = report.build(journal, run_id)
    report.validate(doc)
    return doc, report.render_html(doc)


def section(page: str, ident: str) -> str:
    start = page.index(f'<h2 id="{ident}">')
    end = page.find("<h2 ", start + 4)
    return page[start : end if end > 0 else len(page)]


def rows(table_html: str) -> list[list[str]]:
    """The cells of each body row, as text."""
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", table_html, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            out.append([htmllib.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in cells])
    return [[" ".join(c) for c in r] for r in out]


def values(figure: str, family: str | None = None) -> list[int]:
    """The numbers a small multiple shows (of one counter family's row when named)."""
    if family is not None:
        match = re.search(rf'<g aria-label="{re.escape(family)}">(.*?)</g>', figure, re.S)
        assert match, family
        figure = match[1]
    return [int(v.replace(",", "")) for v in re.findall(r">([\d,]+)</text>", figure)]


def panel(page: str, title: str) -> str:
    match = re.search(rf'<svg[^>]*aria-label="{re.escape(title)}".*?</svg>', page, re.S)
    assert match, title
    return match[0]


# --------------------------------------------------------------------------- settings


def test_a_map_knob_is_one_setting_of_the_entries_that_changed() -> None:
    full = {str(d): d >> 3 for d in range(64)}
    before = {"nics": {"eth2": {"trust": "pcp"}}}
    after = {"nics": {"eth2": {"trust": "dscp", "dscp2prio": {**full, "26": 4}}}}
    assert diff_states(before, after) == [
        ("nics.eth2.dscp2prio", {"26": 3}, {"26": 4}),  # absent under PCP trust: the driver's default held
        ("nics.eth2.trust", "pcp", "dscp"),
    ]
    # a desired state names only the entries it manages: the others are not changes
    assert diff_states(
        {"nics": {"eth2": {"dscp2prio": {**full, "26": 4}}}},
        {"nics": {"eth2": {"dscp2prio": {"26": 3, "48": 6}}}},
    ) == [("nics.eth2.dscp2prio", {"26": 4}, {"26": 3})]
    assert (
        diff_states({"nics": {"eth2": {"dscp2prio": full}}}, {"nics": {"eth2": {"dscp2prio": {"48": 6}}}})
        == []
    )


def test_tune_settings_are_one_row_per_knob_with_its_hosts(tuned: tuple[dict[str, Any], str]) -> None:
    doc, page = tuned
    assert not [s for s in doc["settings"] if re.search(r"dscp2prio\.\d+$", s["knob"])]
    whole = section(page, "settings").split("<details>")[0]
    table = {r[0]: r for r in rows(whole)}
    assert sorted(table) == ["ecn.np", "ecn.rp", "mtu", "nccl.NCCL_IB_TC", "pfc", "roce_tos", "trust"]
    assert table["mtu"][1:4] == ["1500", "4200", "all 4 hosts \u00b7 eth2, eth3"]
    assert table["trust"][1:3] == ["pcp", "dscp"] and table["nccl.NCCL_IB_TC"][3] == "all 4 hosts"


# --------------------------------------------------------------------------- tune figures


def test_tune_counters_per_port_as_small_multiples(tuned: tuple[dict[str, Any], str]) -> None:
    doc, page = tuned
    cnps = {c["source"]: c["delta"] for c in doc["counters"] if c["counter"] == "np_cnp_sent"}
    assert {c["host"] for c in doc["counters"] if c["counter"] == "np_cnp_sent"} == {"h02"}
    assert cnps["baseline"] == CNPS_PER_RUN * 8
    for d in doc["tune"]["decisions"]:
        assert cnps[d["name"]] == CNPS_PER_RUN * d["runs"], d["name"]
    figure = panel(section(page, "counters"), "h02 \u00b7 eth3")
    shown = values(figure, "CNPs sent")
    # one bar per step that counted, in the run's order: the final pair round counted pauses, no CNP
    assert shown == [cnps["baseline"], *(cnps[d["name"]] for d in doc["tune"]["decisions"]), 0]
    assert "pairs final" in section(page, "counters")


def test_tune_busbw_per_gpu_against_line_rate_rule_of_thumb_and_noise(
    tuned: tuple[dict[str, Any], str],
) -> None:
    doc, page = tuned
    t = doc["tune"]
    ref = t["busbw_reference"]
    reference = 2 * linkrate.ceiling_gbps("Ethernet", 400, 4200) / 8  # 2 rails at the tuned MTU
    assert ref["rails"] == 2 and ref["line_rate_gbytes"] == 100.0
    assert ref["reference_gbytes"] == pytest.approx(reference, abs=1e-3)
    assert ref["rule_of_thumb_gbytes"] == pytest.approx(0.9 * reference, abs=1e-3)
    gpus = section(page, "gpus")
    assert "line rate R x rate / 8 100.0" in gpus
    assert f"rule of thumb 90% {0.9 * reference:.1f}" in gpus
    assert f"in goodput R x C_min / 8 = {reference:.1f} GB/s" in gpus
    assert f"Tuned: {t['final_median'] / reference:.0%} of R x C_min / 8 below the rule of thumb." in gpus
    low, high = doc["bandwidth"][0]["reference_band"]
    spread = 2 * t["noise_floor"]
    assert (low, high) == (
        pytest.approx(BEST * (1 - spread), abs=1e-3),
        pytest.approx(BEST * (1 + spread), abs=1e-3),
    )
    assert page.count("noise band") >= 3  # the step chart's band, the per-GPU band, the words
    words = htmllib.unescape(gpus)
    assert f"Tuned median {t['final_median']:.1f} GB/s = {t['final_median'] / BEST:.1%}" in words
    assert f"{low:.1f}..{high:.1f}" in words
    # the Markdown summary says the same: the model's own share and the measured one
    model, measured = f"{doc['oracle']['share_of_best']:.1%}", f"{t['final_median'] / BEST:.1%}"
    md = report.render_markdown(doc)
    said = f"reaches {model} of the model's best reachable busbw in the model (measured median {measured}"
    assert said in md
    assert f"puts the tuned rack at {model} of its best" in words


def test_the_decision_table_shows_the_p_value_its_reason_cites(tuned: tuple[dict[str, Any], str]) -> None:
    doc, page = tuned
    table = rows(section(page, "decisions"))
    assert len(table) == len(doc["tune"]["decisions"]) == 4
    cited = 0
    for row in table:
        p_cell, reason = row[5], row[8]
        match = re.search(r"\(p=([0-9.e+-]+)", reason)
        if match:
            assert p_cell == match[1], row
            cited += 1
    assert cited >= 2
    worse = next(d for d in doc["tune"]["decisions"] if "worse" in d["reason"])
    assert worse["all_reduce"]["p"] == worse["all_reduce"]["p_loss"] != worse["all_reduce"]["p_gain"]


def test_the_closing_line_uses_the_median_the_progress_and_report_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = TuneResult("r1", [120.0, 120.2, 120.6, 120.8], [130.0, 134.0], 0.01, [], {}, [])
    print_result(result, Path("/nonexistent/report.json"))
    base, final = statistics.median(result.baseline), statistics.median(result.final)
    # 120.4 -> 132.0, as the baseline progress line and the report say; the upper median said 120.6
    assert f"{base:.1f} -> {final:.1f} GB/s" in capsys.readouterr().out
    assert median_ci(result.baseline)[0] == pytest.approx(base)


# --------------------------------------------------------------------------- bootstrap and drift


def test_bootstrap_counters_per_port_sum_the_pair_runs(
    journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = report.build(journal, bootstrap_run_journal(journal, home, monkeypatch))
    page = report.render_html(doc)
    matrix = [p for p in doc["pairs"]["results"] if not p["retest"]]
    for host in HOSTS:
        for netdev in ("eth2", "eth3"):
            figure = panel(section(page, "counters"), f"{host} \u00b7 {netdev}")
            sums = [
                sum(
                    v
                    for p in matrix
                    for k, v in p["counters"].get(f"{host}:{netdev}", {}).items()
                    if k.startswith(direction)
                )
                for direction in ("rx_", "tx_")
            ]
            shown = [int(v.replace(",", "")) for v in re.findall(r">([\d,]+)</text>", figure)]
            assert shown == sums, (host, netdev)
    assert 'aria-label="pair heatmap (matrix)"' in page and 'aria-label="per-GPU bandwidth"' in page


def test_drift_counters_show_before_and_after(
    journal: Journal, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = report.build(journal, drift_run_journal(journal, home, monkeypatch))
    page = report.render_html(doc)
    counters = section(page, "counters")
    assert "pairs before remediation" in counters and "pairs after remediation" in counters
    figure = panel(counters, "h01 \u00b7 eth2")
    assert re.findall(r">([\d,]+)</text>", figure) == ["120", "120"]  # one pair on h01's eth2, each round
    table = {r[0]: r for r in rows(section(page, "settings"))}
    assert table["pfc"][1:4] == ["[]", "[3]", "h02 \u00b7 eth2, eth3"]


# --------------------------------------------------------------------------- the counters read


GREP = "\n".join(
    f"/sys/class/infiniband/mlx5_1/ports/1/hw_counters/{name}:{value}"
    for name, value in (("np_cnp_sent", 10), ("rp_cnp_handled", 4), ("np_ecn_marked_roce_packets", 12))
)


def _read(host: str, task: str, results: list[dict[str, Any]]) -> TaskResult:
    return TaskResult(host, task, "ansible.builtin.command", "runner_on_ok", False, {"results": results})


def test_hw_counters_are_read_from_sysfs_and_differenced() -> None:
    argv = rdmacounters.read_argv("mlx5_1", 1)
    assert argv[:4] == ["grep", "-s", "-H", "."]
    assert argv[4:] == [
        f"/sys/class/infiniband/mlx5_1/ports/1/hw_counters/{n}" for n in rdmacounters.HW_COUNTERS
    ]
    assert rdmacounters.parse(GREP + "\ngrep: something odd\n") == {
        "np_cnp_sent": 10,
        "rp_cnp_handled": 4,
        "np_ecn_marked_roce_packets": 12,
    }
    item = rdmacounters.read_item("eth3", "mlx5_1", 1)
    later = GREP.replace(":10", ":25").replace(":12", ":12")
    before = {"h01": {"results": [{"item": item, "stdout": GREP}]}}
    after = {"h01": {"results": [{"item": item, "stdout": later}]}}
    assert rdmacounters.deltas(before, after) == {("h01", "eth3"): {"np_cnp_sent": 15}}


def _reads(host: str, when: str, ethtool: str, grep: str, task: str = "") -> TaskResult:
    """One host's fabric_run counter read (``Read counters before|after``, or ``task``): eth3 on mlx5_1."""
    runs = [{"id": "ethtool eth3", "rc": 0, "stdout": ethtool, "stderr": "", "timed_out": False},
            {"id": "hw eth3", "rc": 0, "stdout": grep, "stderr": "", "timed_out": False}]
    return TaskResult(host, task or f"Read counters {when}", "fabtune.fabric.fabric_run", "runner_on_ok",
                      False, {"runs": runs})


def test_a_tuning_batch_keeps_pause_and_hw_counters_per_port() -> None:
    ethtool = "NIC statistics:\n     rx_prio3_pause: {}\n     tx_prio3_pause: 0\n"
    tasks = (
        _reads("h01", "before", ethtool.format(5), GREP),
        _reads("h01", "after", ethtool.format(45), GREP.replace("handled:4", "handled:9")),
    )
    outcome = RunOutcome("successful", 0, {}, tasks, Path("/nonexistent"))
    deltas = measure.counter_deltas(outcome)
    assert deltas == {"h01:eth3": {"rx_prio3_pause": 40, "rp_cnp_handled": 5}}
    assert measure.pause_frames(deltas) == 40


def test_a_pair_round_keeps_hw_counters_beside_the_pause_counters() -> None:
    ethtool = "NIC statistics:\n     rx_prio3_pause: {}\n"
    tasks = (
        _reads("h02", "before", ethtool.format(1), GREP, pairs.BEFORE_TASK),  # with the servers started
        _reads("h02", "after", ethtool.format(8), GREP.replace(":12", ":19"), pairs.AFTER_TASK),
    )
    outcome = RunOutcome("successful", 0, {}, tasks, Path("/nonexistent"))
    before = rdmacounters.reads_of(outcome.results(pairs.BEFORE_TASK))
    after = rdmacounters.reads_of(outcome.results(pairs.AFTER_TASK))
    assert pairs.read_deltas(before, after) == {
        ("h02", "eth3"): {"rx_prio3_pause": 7, "np_ecn_marked_roce_packets": 7}
    }


def test_a_round_reads_each_port_of_each_host_once() -> None:
    item = rdmacounters.read_item("eth3", "mlx5_1", 1)
    runs = [{"server": "h01", "client": "h02", "server_netdev": "eth3", "client_netdev": "eth3",
             "server_hw": item, "client_hw": item}] * 2
    reads = pairs._counter_reads(runs)
    assert sorted(reads) == ["h01", "h02"]
    assert reads["h01"] == [{"id": "ethtool eth3", "argv": ["ethtool", "-S", "eth3"]},
                            {"id": "hw eth3", "argv": item["argv"]}]


def test_measure_passes_the_hw_reads_to_the_playbook(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def run_playbook(name: str, inventory: Path, **kwargs: Any) -> RunOutcome:
        seen.update(kwargs["extravars"])
        return RunOutcome("successful", 0, {}, (), Path("/nonexistent"))

    monkeypatch.setattr(measure.ansible, "run_playbook", run_playbook)
    reads = {"h01": [rdmacounters.read_item("eth2", "mlx5_0", 1)]}
    spec = measure.MeasureSpec(Path("/inv.yml"), ("h01", "h02"), 1, {"h01": ["eth2"]}, hw_reads=reads)
    measure.measure(spec, 1)
    assert seen["fabtune_counter_reads"] == {"h01": [
        {"id": "ethtool eth2", "argv": ["ethtool", "-S", "eth2"]},
        {"id": "hw eth2", "argv": copy.deepcopy(reads["h01"][0]["argv"])},
    ]}


# --------------------------------------------------------------------------- the tune pair matrix


def test_tune_report_shows_the_pair_matrix_before_and_after(tuned: tuple[dict[str, Any], str]) -> None:
    doc, page = tuned
    sources = {s: [p for p in doc["pairs"]["results"] if p["source"] == s] for s in ("baseline", "final")}
    assert [len(v) for v in sources.values()] == [12, 12]  # 6 host pairs x 2 rails, each time
    assert {p["share"] for p in sources["baseline"]} == {round(round(CEILING * 0.71, 1) / CEILING, 4)}
    assert {p["share"] for p in sources["final"]} == {round(round(CEILING * 0.96, 1) / CEILING, 4)}
    pairs_html = section(page, "pairs")
    before = re.search(r'aria-label="pair heatmap \(baseline\)".*?</svg>', pairs_html, re.S)
    after = re.search(r'aria-label="pair heatmap \(final\)".*?</svg>', pairs_html, re.S)
    assert before and after
    assert before[0].count(">71%<") == 12 and after[0].count(">96%<") == 12  # 4 x 4 less the diagonal
    assert "before tuning (after the baseline): mean 71%, lowest 71%" in pairs_html
    assert "after tuning: mean 96%" in pairs_html
    assert doc["gpus"][0]["share_mean"] == pytest.approx(0.96, abs=0.001)  # the rails of the final matrix


class PairlessRack(FigureRack):
    def pair_matrix(self, full: bool) -> list[PairResult]:
        raise PlaybookFailed("perftest round failed: h03: unreachable")


def test_the_loop_runs_a_pair_matrix_after_the_baseline_and_at_the_end(journal: Journal, home: Path) -> None:
    def steps_of(rack: FigureRack, options: TuneOptions) -> list[tuple[str, str, str]]:
        run_id = journal.open_run("tune", "rack1", str(home / "inventory.yml"), None)
        Tuner(rack, journal, run_id, "roce", options=options).run()
        return [(s.kind, s.name, s.state) for s in journal.steps(run_id)]

    rack = FigureRack()
    steps = steps_of(rack, TuneOptions(skip_groups=("gdr",)))
    assert rack.matrices == [False, False]  # one covering round each time unless the profile says full
    names = [n for _k, n, _s in steps]
    assert names.index("pairs baseline") == names.index("baseline") + 1
    assert names.index("pairs final") == names.index("final") - 1
    assert ("pairs", "pairs final", "done") in steps
    # off in the profile: no round; a round that cannot run is journaled and the run goes on
    assert not [n for n in steps_of(FigureRack(), TuneOptions(pair_matrix="off")) if n[0] == "pairs"]
    failed = steps_of(PairlessRack(), TuneOptions(skip_groups=("gdr",)))
    assert ("pairs", "pairs baseline", "failed") in failed and ("phase", "final", "done") in failed


def test_the_profile_chooses_the_pair_matrix_and_refuses_anything_else() -> None:
    assert tune_options({})[0].pair_matrix == "round"
    assert tune_options({"pair_matrix": "off"})[0].pair_matrix == "off"
    assert tune_options({"pair_matrix": "full"})[0].pair_matrix == "full"
    assert tune_options(yaml.safe_load("pair_matrix: off"))[0].pair_matrix == "off"  # YAML's false
    with pytest.raises(ConfigError, match=r"fabtune_tune.pair_matrix: 'all' must be one of round, full, off"):
        tune_options({"pair_matrix": "all"})


def test_a_decision_records_the_p_value_its_reason_cites() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]
    for cand, start in (
        ([100.1, 99.9, 100.0, 100.05], "no gain"),
        ([97.0, 96.5, 97.2, 96.8], "worse"),
        ([105.0, 105.5, 104.8, 105.2], "+"),
    ):
        made = decide(base, cand)
        assert made.reason.startswith(start) and f"p={made.p:.3g}" in made.reason, made


def test_a_pair_round_reads_the_hw_counters_of_the_ports_perftest_uses() -> None:
    rail = Rail("mlx5_1", "eth3", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    views = {h: HostView(h, (rail, rail), {}) for h in ("h01", "h02")}
    spec = pairs._run_spec(Pair("h01", "h02", 1, 18516), views, PerftestOptions())
    assert "-i" in spec["server_argv"] and spec["server_argv"][spec["server_argv"].index("-i") + 1] == "1"
    for end in ("server_hw", "client_hw"):
        assert spec[end] == rdmacounters.read_item("eth3", "mlx5_1", 1)  # IB port 1, not TCP port 18516


def test_demo_prints_its_result_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabtune.cli import main
    from fabtune.testbed import demo

    report_json = tmp_path / "report.json"
    (tmp_path / "report.html").write_text("<html></html>")
    result = TuneResult("r1", [120.0, 120.8], [130.0, 134.0], 0.01, [], {}, [])
    monkeypatch.setattr(demo.build, "up", lambda spec: tmp_path)
    monkeypatch.setattr(demo.build, "down", lambda name: None)
    monkeypatch.setattr("fabtune.tune.run.tune", lambda *a, **k: (result, report_json))
    assert main(["demo", "--json", "--down"]) == 0
    out = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert out["run_id"] == "r1" and out["report_html"] == str(tmp_path / "report.html")
