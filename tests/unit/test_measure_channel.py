"""A batch over the direct SSH channel: bench_measure.yml's commands and deadlines, its tasks' results.

``sshdirect.run_commands`` is replaced by a recorder that answers as a host would (its own tests run
it against an SSH server); the playbook path must not be taken where the channel follows the
inventory, and is taken where it does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible, sshdirect
from fabtune.collection import COLLECTION
from fabtune.errors import PlaybookFailed
from fabtune.inventory import InventoryInfo
from fabtune.sshdirect import Channel
from fabtune.tune import backend as backend_mod
from fabtune.tune import measure as measure_mod
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.measure import MeasureSpec, Sample, measure
from tests.unit.test_tune_failed_runs import TABLE

ETHTOOL = "NIC statistics:\n     rx_prio3_pause: {}\n     tx_prio3_pause: 0\n"
# each host's NCCL_DEBUG=INFO lines (the parser's format, tests/unit/parsers/test_nccl_debug.py): the
# transport check reads them from the first good all_reduce's output
LOG = "".join(
    f"{h}:1:2 [0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
    f"{h}:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0\n" for h in ("h01", "h02"))
SPEC = MeasureSpec(Path("inv.yml"), ("h01", "h02"), 2, {"h01": ["eth2"], "h02": ["eth2"]}, deadline_s=30)


def _target(host: str) -> sshdirect.Target:
    return sshdirect.Target(host, f"10.9.0.{host[-1]}", 22, "ops", None, ())


class Hosts:
    """Answers each call as the hosts would: pause counters that grow by 40 on h02 between the reads,
    launches that print a table (or ``launch`` when given)."""

    def __init__(self, unreachable: str | None = None, launch: dict[str, Any] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.unreachable = unreachable
        self.launch = launch

    def __call__(self, found: Any, commands: dict[str, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
        self.calls.append({"commands": commands, **kw})
        done = {}
        for host, cmds in commands.items():
            if host == self.unreachable:
                done[host] = sshdirect.HostRuns(host, (), "cannot connect to ops@10.9.0.2:22: refused")
                continue
            runs = []
            for c in cmds:
                if kw.get("sequential"):
                    test = "all_reduce" if "all_reduce_perf" in c["argv"] else "alltoall"
                    out = LOG + TABLE.format(busbw="150.0" if test == "all_reduce" else "60.0")
                    run = {"rc": 0, "stdout": out, "stderr": "", "timed_out": False}
                    run = self.launch if self.launch and c["id"] == "1" else run
                else:
                    reads = sum(1 for c in self.calls if not c.get("sequential") and host in c["commands"])
                    pauses = 40 if host == "h02" and reads > 1 else 0
                    run = {"rc": 0, "stdout": ETHTOOL.format(pauses), "stderr": "", "timed_out": False}
                runs.append({"id": c["id"], **run})
            done[host] = sshdirect.HostRuns(host, tuple(runs))
        return done


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ansible, "run_playbook", lambda *a, **k: pytest.fail("no playbook over the channel"))
    return tmp_path


def test_a_batch_over_the_channel_runs_the_playbooks_commands_and_reads_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = Hosts()
    monkeypatch.setattr(sshdirect, "run_commands", hosts)
    channel = Channel({"h01": _target("h01"), "h02": _target("h02")}, 4, {"h02": "/opt/tools/bin"})
    batch = measure(SPEC, 2, channel)
    assert batch.samples == (Sample(150.0, 60.0), Sample(150.0, 60.0)) and batch.failures == ()
    assert batch.pause_frames == 40 and batch.counters == {"h02:eth2": {"rx_prio3_pause": 40}}
    before, h02_before, launch, after, h02_after = hosts.calls
    # the reads: each host's PATH (the inventory's fabtune_tool_path, else the playbook's), each
    # read under coreutils timeout at the playbook's deadline
    assert before["prefix"] == ["env", f"PATH={measure_mod.TOOL_PATH}", "timeout", "--kill-after=10s", "60s"]
    assert h02_before["prefix"][:2] == ["env", "PATH=/opt/tools/bin"]
    assert list(h02_before["commands"]) == ["h02"]
    assert before["commands"]["h01"] == [{"id": "ethtool eth2", "argv": ["ethtool", "-S", "eth2"]}]
    assert not before.get("sequential") and after["commands"] == before["commands"]
    # the launches: on the first host, one after another, each under its deadline, the module's stop
    # 15 s later
    assert list(launch["commands"]) == ["h01"] and launch["sequential"] is True
    assert launch["prefix"] == ["timeout", "--kill-after=10s", f"{SPEC.deadline}s"]
    assert launch["deadline_s"] == SPEC.deadline + 15
    ids = [c["id"] for c in launch["commands"]["h01"]]
    assert ids == ["0", "1", "2", "3"] and "alltoall_perf" in launch["commands"]["h01"][1]["argv"]
    assert list(h02_after["commands"]) == ["h02"]


def test_a_launch_given_up_at_its_deadline_is_a_failed_run(monkeypatch: pytest.MonkeyPatch) -> None:
    given_up = {"rc": sshdirect.GIVEN_UP_RC, "stdout": "", "stderr": "", "timed_out": True}
    monkeypatch.setattr(sshdirect, "run_commands", Hosts(launch=given_up))
    batch = measure(SPEC, 2, Channel({"h01": _target("h01"), "h02": _target("h02")}, 4))
    assert batch.samples == (Sample(150.0, 60.0),)
    assert [f.reason for f in batch.failures] == [f"missed its deadline of {SPEC.deadline} s and was killed"]


def test_a_host_the_channel_cannot_reach_fails_the_batch_before_any_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = Hosts(unreachable="h02")
    monkeypatch.setattr(sshdirect, "run_commands", hosts)
    with pytest.raises(PlaybookFailed, match="h02"):
        measure(SPEC, 2, Channel({"h01": _target("h01"), "h02": _target("h02")}, 4))
    assert not any(c.get("sequential") for c in hosts.calls)


def _backend(tmp_path: Path) -> AnsibleBackend:
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01", "h02"), (), "mpirun", None)
    return AnsibleBackend(info, gpus=2, netdevs={"h01": ["eth2"], "h02": ["eth2"]})


def test_the_backend_measures_over_the_channel_with_the_inventorys_tool_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(backend_mod, "host_vars", lambda path: {
        "h01": {"ansible_host": "10.9.0.1", "ansible_user": "ops"},
        "h02": {"ansible_host": "10.9.0.2", "fabtune_tool_path": "/opt/tools/bin"}})
    hosts = Hosts()
    monkeypatch.setattr(sshdirect, "run_commands", hosts)
    batch = _backend(tmp_path).measure(1)
    assert batch.samples == (Sample(150.0, 60.0),)
    assert hosts.calls[0]["commands"].keys() == {"h01"}
    assert hosts.calls[1]["prefix"][1] == "PATH=/opt/tools/bin"


@pytest.mark.parametrize("hostvars", [
    {"h01": {"ansible_connection": "community.docker.docker"}, "h02": {}},
    {"h01": {}, "h02": {"fabtune_tool_path": "{{ lookup('env', 'TOOLS') }}"}},
])
def test_the_backend_measures_through_the_playbook_where_the_channel_cannot_follow(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostvars: dict[str, Any]) -> None:
    monkeypatch.setattr(backend_mod, "host_vars", lambda path: hostvars)
    monkeypatch.setattr(sshdirect, "run_commands", lambda *a, **k: pytest.fail("no direct channel"))
    played: list[str] = []

    def playbook(name: str, *args: Any, **kwargs: Any) -> ansible.RunOutcome:
        played.append(name)
        return ansible.RunOutcome("successful", 0, {"ok": {"h01": 1}}, (), tmp_path)

    monkeypatch.setattr(ansible, "run_playbook", playbook)
    batch = _backend(tmp_path).measure(1)
    assert played == ["bench_measure.yml"] and batch.samples == ()


def test_the_channel_keeps_the_playbooks_settings() -> None:
    """bench_measure.yml and the channel in step: the reads' PATH and deadline, the launches' kill
    delay and the module's stop after each launch's deadline."""
    plays = yaml.safe_load((COLLECTION / "playbooks" / "bench_measure.yml").read_text())
    reads = plays[0]["tasks"][0]
    assert reads["name"] == measure_mod.READ_BEFORE and plays[2]["tasks"][0]["name"] == measure_mod.READ_AFTER
    assert reads["fabtune.fabric.fabric_run"]["deadline_s"] == measure_mod.READ_DEADLINE_S
    assert f"default('{measure_mod.TOOL_PATH}')" in reads["environment"]["PATH"]
    launch = plays[1]["tasks"][0]
    assert launch["name"] == measure_mod.RUN_TASK
    assert plays[1]["vars"]["__fabtune_timeout"][:2] == ["timeout", measure_mod.KILL_AFTER]
    assert f"| int + {measure_mod.LAUNCH_GRACE_S} }}}}" in launch["fabtune.fabric.fabric_run"]["deadline_s"]
