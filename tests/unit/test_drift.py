"""Drift: report building from task results, exit codes, Prometheus textfile, systemd units."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from fabtune import drift
from fabtune.ansible import RunOutcome, TaskResult
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from fabtune.inventory import InventoryInfo
from fabtune.perf.pairs import PairResult
from fabtune.state import HostState

IF = "enp25s0np0"


def _task(
    host: str, task: str, result: dict[str, Any], event: str = "runner_on_ok", action: str = ""
) -> TaskResult:
    return TaskResult(host, task, action, event, bool(result.get("changed")), result)


def _outcome(tasks: list[TaskResult], failures: dict[str, int] | None = None) -> RunOutcome:
    hosts = sorted({t.host for t in tasks})
    stats = {"ok": dict.fromkeys(hosts, 1), "failures": failures or {}}
    return RunOutcome(
        "successful" if not failures else "failed",
        0 if not failures else 2,
        stats,
        tuple(tasks),
        Path("/nonexistent"),
    )


def _drift_tasks() -> list[TaskResult]:
    qos = {
        "changed": True,
        "results": [
            {
                "changed": True,
                "item": {"key": IF},
                "changes": [{"knob": f"{IF}.pfc", "before": [], "after": [3]}],
            }
        ],
    }
    sysfs = {
        "changed": True,
        "results": [
            {
                "changed": True,
                "item": {"key": IF},
                "changes": [
                    {"knob": f"{IF}.ecn", "before": {"np": [], "rp": [3]}, "after": {"np": [3], "rp": [3]}}
                ],
            }
        ],
    }
    mtu = {
        "changed": True,
        "results": [
            {
                "changed": True,
                "item": {"key": IF},
                "changes": [{"knob": f"{IF}.mtu", "before": 1500, "after": 4200}],
            }
        ],
    }
    nccl = {
        "changed": True,
        "dest": "/etc/nccl.conf",
        "diff": [
            {
                "before": "NCCL_IB_TC=106\nNCCL_IB_GID_INDEX=3\n",
                "after": "NCCL_IB_TC=106\nNCCL_IB_GID_INDEX=3\n",
            }
        ],
    }
    tasks = [_task("h01", "Set trust, DSCP map, PFC and ETS", {"changed": False, "results": []})]
    for host in ("h02", "h04"):
        tasks += [
            _task(host, "Set trust, DSCP map, PFC and ETS", qos),
            _task(host, "Set ECN per priority and CNP DSCP and priority", sysfs),
            _task(host, "Set the MTU", mtu),
        ]
    tasks.append(
        _task(
            "h03",
            "Write the NCCL configuration",
            {**nccl, "diff": [{"before": "NCCL_IB_TC=0\n", "after": "NCCL_IB_TC=106\n"}]},
            action="ansible.builtin.template",
        )
    )
    return tasks


def test_report_lists_host_knob_expected_found() -> None:
    report = drift.build_report(_outcome(_drift_tasks()), ["h01", "h02", "h03", "h04"])
    assert report.hosts == ("h01", "h02", "h03", "h04")
    assert report.as_tuples() == {
        ("h02", f"{IF}.pfc", "[3]", "[]"),
        ("h02", f"{IF}.ecn", "{np: [3], rp: [3]}", "{np: [], rp: [3]}"),
        ("h02", f"{IF}.mtu", "4200", "1500"),
        ("h04", f"{IF}.pfc", "[3]", "[]"),
        ("h04", f"{IF}.ecn", "{np: [3], rp: [3]}", "{np: [], rp: [3]}"),
        ("h04", f"{IF}.mtu", "4200", "1500"),
        ("h03", "/etc/nccl.conf:NCCL_IB_TC", "106", "0"),
    }
    assert report.drifted_hosts == ["h02", "h03", "h04"]
    assert [report.count(h) for h in report.hosts] == [0, 3, 1, 3]


def test_failed_host_is_reported_not_as_drift() -> None:
    tasks = [
        *_drift_tasks(),
        _task("h05", "Set the MTU", {"msg": "mlnx_qos failed (rc 1): boom"}, event="runner_on_failed"),
    ]
    report = drift.build_report(_outcome(tasks, {"h05": 1}))
    assert report.failed == {"h05": "Set the MTU: mlnx_qos failed (rc 1): boom"}
    assert not any(i.host == "h05" for i in report.items)


def test_unchanged_results_are_no_drift() -> None:
    tasks = [_task("h01", "Set the MTU", {"changed": False, "results": [{"changed": False, "changes": []}]})]
    report = drift.build_report(_outcome(tasks), ["h01"])
    assert not report.drifted and report.items == ()


def _bw(pair_gbps: list[float | None], busbw: float | None) -> drift.Bandwidth:
    results = tuple(PairResult("h01", f"h0{i + 2}", 0, "mlx5_0", g, 392.0) for i, g in enumerate(pair_gbps))
    return drift.Bandwidth(results, busbw)


def test_worse_bandwidth_is_detected_beyond_tolerance() -> None:
    before = _bw([380.0, 380.0], 90.0)
    assert drift.got_worse(before, _bw([378.0, 379.0], 89.0)) == []  # noise
    reasons = drift.got_worse(before, _bw([380.0, 300.0], 90.0))
    assert any("minimum" in r for r in reasons)
    assert drift.got_worse(before, _bw([380.0, 380.0], None))  # all_reduce broke
    assert drift.got_worse(before, _bw([None, 380.0], 90.0))  # a pair broke
    assert drift.got_worse(_bw([None, None], None), _bw([380.0, 380.0], 90.0)) == []


def _result(items: int = 0, **kw: Any) -> drift.DriftResult:
    report = drift.DriftReport(
        ("h01", "h02"),
        tuple(drift.DriftItem("h02", f"k{i}", 1, 0) for i in range(items)),
        kw.pop("failed", {}),
    )
    return drift.DriftResult("rack1", "profile p.yml", report, finished=1700000000.5, **kw)


def test_exit_codes_for_monitoring() -> None:
    assert _result().exit_status == ExitStatus.OK
    assert _result(3).exit_status == ExitStatus.DRIFT_FOUND
    assert _result(failed={"h01": "unreachable"}).exit_status == ExitStatus.DRIFT_FOUND
    fixed = drift.Remediation(
        True, _bw([380.0], 90.0), _bw([381.0], 91.0), False, (), drift.DriftReport(("h01", "h02"), ())
    )
    assert _result(3, remediation=fixed).exit_status == ExitStatus.OK
    rolled = drift.Remediation(True, _bw([380.0], 90.0), _bw([200.0], 91.0), True, ("worse",))
    assert _result(3, remediation=rolled).exit_status == ExitStatus.DRIFT_FOUND
    assert _result(3, error="PlaybookFailed").exit_status == ExitStatus.ERROR
    assert int(ExitStatus.DRIFT_FOUND) == 8
    assert drift.DriftFound("x").code == ExitStatus.DRIFT_FOUND


def test_no_desired_state_is_a_clear_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    info = InventoryInfo(tmp_path / "inv.yml", "rackx", "roce", ("h01",), (), "mpirun", None)
    with pytest.raises(ConfigError) as err:
        drift.desired_for(info, None)
    assert "no tuned desired state" in err.value.problems[0] and "--profile" in err.value.problems[0]


def test_tuned_desired_state_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fabtune.desired import save_tuned

    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    save_tuned("rackx", HostState(nics={"all": {"mtu": 4200}}), "run1")
    info = InventoryInfo(tmp_path / "inv.yml", "rackx", "roce", ("h01",), (), "mpirun", None)
    source = drift.desired_for(info, None)
    assert source.desired.tree() == {"nics": {"all": {"mtu": 4200}}}
    assert "desired/rackx.yml" in source.source


def test_one_round_puts_every_host_in_a_pair() -> None:
    rounds = drift.one_round(["h01", "h02", "h03", "h04"], rails=2)
    assert len(rounds) == 1
    assert sorted({h for p in rounds[0] for h in (p.server, p.client)}) == ["h01", "h02", "h03", "h04"]
    assert len({p.port for p in rounds[0]}) == 4
    odd = drift.one_round(["h01", "h02", "h03"], rails=1)
    assert sorted({h for rnd in odd for p in rnd for h in (p.server, p.client)}) == ["h01", "h02", "h03"]


# --------------------------------------------------------------------------- Prometheus format

METRIC_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_exposition(text: str) -> dict[str, dict[str, Any]]:
    """A strict parser of the Prometheus text format 0.0.4: raises AssertionError on any violation.

    Returns per family: type, help and samples (labels dict, value).
    """
    assert text.endswith("\n"), "the last line must end with a newline"
    families: dict[str, dict[str, Any]] = {}
    current: str | None = None
    closed: set[str] = set()
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        assert line == line.strip() or line.startswith("# "), f"line {number}: stray whitespace"
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert METRIC_RE.match(name), f"line {number}: bad metric name {name!r}"
                fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
                assert not fam["samples"], f"line {number}: {parts[1]} after samples of {name}"
                assert name not in closed, f"line {number}: family {name} appears twice"
                key = parts[1].lower()
                assert fam[key] is None, f"line {number}: second {parts[1]} for {name}"
                if parts[1] == "TYPE":
                    assert len(parts) == 4 and parts[3] in TYPES, f"line {number}: bad TYPE"
                    fam["type"] = parts[3]
                else:
                    fam["help"] = parts[3] if len(parts) == 4 else ""
                if current not in (None, name):
                    closed.add(current)  # type: ignore[arg-type]
                current = name
            continue
        assert line, f"line {number}: empty line"
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)( -?\d+)?$", line)
        assert match, f"line {number}: not a sample: {line!r}"
        name, labels_text, value = match.group(1), match.group(2) or "", match.group(3)
        assert name in families, f"line {number}: sample of {name} before its TYPE"
        assert name == current, f"line {number}: samples of {name} not contiguous"
        labels: dict[str, str] = {}
        if labels_text:
            inner = labels_text[1:-1]
            pos = 0
            while pos < len(inner):
                lm = LABEL_RE.match(inner, pos)
                assert lm, f"line {number}: bad label at {inner[pos:]!r}"
                assert lm.group(1) not in labels, f"line {number}: duplicate label {lm.group(1)}"
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
                if pos < len(inner):
                    assert inner[pos] == ",", f"line {number}: expected ',' in labels"
                    pos += 1
        number_value = float(value)  # raises on a malformed value
        assert not math.isnan(number_value) or value == "NaN"
        assert all(s[0] != labels for s in families[name]["samples"]), f"line {number}: duplicate series"
        families[name]["samples"].append((labels, number_value))
    return families


def _full_result() -> drift.DriftResult:
    report = drift.DriftReport(
        ("h01", "h02", 'we"ird\\host'),
        (drift.DriftItem("h02", f"{IF}.pfc", [3], []), drift.DriftItem("h02", f"{IF}.mtu", 4200, 1500)),
        {'we"ird\\host': "unreachable"},
    )
    rem = drift.Remediation(
        True,
        _bw([300.0, 310.5], 80.0),
        _bw([385.0, 386.0], 90.25),
        False,
        (),
        drift.DriftReport(report.hosts, ()),
    )
    return drift.DriftResult("rack1", "profile p.yml", report, rem, finished=1700000000.25)


def test_textfile_is_valid_exposition_format() -> None:
    families = parse_exposition(drift.prometheus_text(_full_result()))
    knobs = {s[0]["host"]: s[1] for s in families["fabtune_drift_knobs"]["samples"]}
    assert knobs == {"h01": 0.0, "h02": 0.0, 'we\\"ird\\\\host': 0.0}  # remediated: nothing left
    found = {s[0]["host"]: s[1] for s in families["fabtune_drift_found_knobs"]["samples"]}
    assert found["h02"] == 2.0
    assert families["fabtune_drift_last_run_timestamp_seconds"]["samples"] == [
        ({"fabric": "rack1"}, 1700000000.25)
    ]
    assert families["fabtune_drift_last_run_success"]["samples"][0][1] == 1.0
    bw = {
        (s[0]["benchmark"], s[0]["stat"], s[0]["phase"]): s[1]
        for s in families["fabtune_bandwidth_gbps"]["samples"]
    }
    assert bw[("ib_write_bw", "mean", "after")] == pytest.approx(385.5)
    assert bw[("all_reduce_busbw", "mean", "after")] == pytest.approx(722.0)
    assert all(f["type"] == "gauge" for f in families.values())


def test_textfile_of_a_failed_run() -> None:
    families = parse_exposition(drift.prometheus_text(_result(error="boom")))
    assert families["fabtune_drift_last_run_success"]["samples"][0][1] == 0.0
    assert families["fabtune_drift_exit_code"]["samples"][0][1] == 1.0
    assert "fabtune_bandwidth_gbps" not in families


def test_validator_rejects_broken_text() -> None:
    for bad in (
        "x 1",
        '# TYPE x gauge\nx{a="1"} one\n',
        "x 1\n",
        "# TYPE x gauge\nx{a=1} 1\n",
        "# TYPE x gauge\n# TYPE y gauge\nx 1\n",
    ):
        with pytest.raises((AssertionError, ValueError)):
            parse_exposition(bad)


def test_textfile_parses_with_prometheus_client() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    names = {f.name for f in parser.text_string_to_metric_families(drift.prometheus_text(_full_result()))}
    assert {
        "fabtune_drift_knobs",
        "fabtune_drift_last_run_timestamp_seconds",
        "fabtune_bandwidth_gbps",
    } <= names


def test_textfile_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "collector" / "fabtune.prom"
    drift.write_textfile(target, "a 1\n")
    drift.write_textfile(target, "a 2\n")
    assert target.read_text() == "a 2\n"
    assert [p.name for p in target.parent.iterdir()] == ["fabtune.prom"]  # no temporary left
    assert target.stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- scheduling


def test_units_render_and_match_contrib(tmp_path: Path) -> None:
    units = drift.render_units()
    contrib = Path(__file__).resolve().parents[2] / "contrib" / "systemd"
    for name, text in units.items():
        assert (contrib / name).read_text() == text, f"contrib/systemd/{name} is stale: re-render it"
    written = drift.install_units(
        drift.render_units(
            Path("/srv/inv.yml"),
            profile=Path("/srv/p.yml"),
            remediate=True,
            executable="/opt/ft/bin/fabtune",
            on_calendar="*:0/30",
            home=Path("/srv/fabtune home"),
        ),
        tmp_path,
    )
    assert sorted(p.name for p in written) == ["fabtune-drift.service", "fabtune-drift.timer"]
    service = (tmp_path / "fabtune-drift.service").read_text()
    assert (
        "ExecStart=/opt/ft/bin/fabtune drift -i /srv/inv.yml --profile /srv/p.yml --remediate "
        "--textfile /var/lib/node_exporter/textfile_collector/fabtune.prom"
    ) in service
    assert "SuccessExitStatus=8 9" in service and "Type=oneshot" in service
    assert "Environment='FABTUNE_HOME=/srv/fabtune home'" in service  # the caller's home, not a default
    timer = (tmp_path / "fabtune-drift.timer").read_text()
    assert "OnCalendar=*:0/30" in timer and "Unit=fabtune-drift.service" in timer
    assert "WantedBy=timers.target" in timer


def test_the_timer_remediates_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14: --install-timer added --remediate unasked and pinned FABTUNE_HOME=/var/lib/fabtune."""
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    h01: {ansible_host: 127.0.0.1, ansible_port: 9}\n")
    units = tmp_path / "units"
    assert main(["drift", "-i", str(inventory), "--install-timer", "--unit-dir", str(units)]) == 0
    service = (units / "fabtune-drift.service").read_text()
    assert "--remediate" not in service
    assert f"Environment=FABTUNE_HOME={tmp_path / 'home'}" in service


def test_install_timer_option_writes_units(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fabtune.commands.drift import drift as command

    inv = tmp_path / "inv.yml"
    inv.write_text("all: {hosts: {h01: {}}}\n")
    out = CliRunner().invoke(
        command, ["-i", str(inv), "--install-timer", "--unit-dir", str(tmp_path / "units")]
    )
    assert out.exit_code == 0, out.output
    assert f"drift -i {inv}" in (tmp_path / "units" / "fabtune-drift.service").read_text()
    assert "systemctl enable --now fabtune-drift.timer" in out.output


def test_cron_line() -> None:
    line = drift.cron_line()
    assert line.startswith(
        "17 * * * * root /usr/local/bin/fabtune drift -i /etc/fabtune/inventory.yml --textfile"
    )
    assert "--remediate" in drift.cron_line(remediate=True)
    assert line.endswith("\n")


# --------------------------------------------------------------------------- remediation flow


class _Playbooks:
    """A stand-in for ansible.run_playbook that records each call and answers like the real runs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []

    def __call__(self, playbook: str, inventory: Path, **kw: Any) -> RunOutcome:
        self.calls.append((playbook, dict(kw.get("extravars") or {}), kw.get("limit")))
        tasks = []
        if playbook == "facts.yml":
            for host in str(kw["limit"]).split(","):
                facts = {"nics": {IF: {"mtu": 1500, "pfc": []}}, "nccl": None, "hardware": {"gpus": 1}}
                result = {"ansible_facts": {"fabric_facts": facts}}
                tasks.append(_task(host, "Read the state", result, action="fabtune.fabric.fabric_facts"))
        return _outcome(tasks)


def _remediate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, after: drift.Bandwidth
) -> tuple[drift.Remediation, _Playbooks]:
    from fabtune.journal import Journal

    books = _Playbooks()
    measured = iter([_bw([380.0, 380.0], 90.0), after])
    monkeypatch.setattr(drift.ansible, "run_playbook", books)
    monkeypatch.setattr(drift, "read_hosts", lambda _inv: {})
    monkeypatch.setattr(drift, "measure", lambda *_a, **_k: next(measured))
    monkeypatch.setattr(drift, "detect", lambda *_a, **_k: drift.DriftReport(("h01", "h02"), ()))
    journal = Journal(tmp_path / "journal.sqlite")
    run_id = journal.open_run("drift", "rack1", "inv.yml", None)
    report = drift.DriftReport(("h01", "h02"), (drift.DriftItem("h02", f"{IF}.mtu", 4200, 1500),))
    info = InventoryInfo(tmp_path / "inv.yml", "rack1", "roce", ("h01", "h02"), (), "mpirun", None)
    rem = drift.remediate(
        tmp_path / "inv.yml", info, HostState(nics={"all": {"mtu": 4200}}), report, journal=journal,
        run_id=run_id,
    )
    snaps = journal.first_snapshot(run_id)
    steps = [(s.kind, s.state) for s in journal.steps(run_id)]
    journal.close()
    assert snaps == {"h02": {"nics": {IF: {"mtu": 1500, "pfc": []}}, "nccl": None}}
    assert (steps[0] == ("snapshot", "done") and ("rollback", "rolled_back") in steps) or not rem.rolled_back
    return rem, books


def test_remediation_kept_when_bandwidth_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rem, books = _remediate(monkeypatch, tmp_path, _bw([385.0, 386.0], 91.0))
    assert rem.verified and not rem.rolled_back
    assert [c[0] for c in books.calls] == ["facts.yml", "apply.yml"]
    assert books.calls[1][1] == {"fabric_desired": {"nics": {"all": {"mtu": 4200}}}}


def test_remediation_rolled_back_to_the_snapshot_when_bandwidth_drops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rem, books = _remediate(monkeypatch, tmp_path, _bw([380.0, 200.0], 90.0))
    assert rem.rolled_back and rem.reasons
    assert [c[0] for c in books.calls] == ["facts.yml", "apply.yml", "apply.yml"]
    _playbook, extravars, limit = books.calls[2]
    assert limit == "h02"
    assert extravars == {
        "fabric_desired": {"nics": {IF: {"mtu": 1500, "pfc": []}}, "nccl": None},
        "fabric_enforce_couplings": False,
    }


def test_enable_runs_systemctl_where_systemd_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with pytest.raises(ConfigError, match="systemd does not run this machine"):
        drift.enable_timer(tmp_path / "no-systemd")
    assert not calls.exists()
    (tmp_path / "systemd").mkdir()
    assert drift.enable_timer(tmp_path / "systemd")[-1] == ["systemctl", "enable", "--now", drift.TIMER]
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now fabtune-drift.timer"]
    fake.write_text("#!/bin/sh\necho boom >&2\nexit 1\n")
    with pytest.raises(ConfigError, match="systemctl daemon-reload: exit 1: boom"):
        drift.enable_timer(tmp_path / "systemd")
