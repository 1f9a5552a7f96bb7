"""Every benchmark launch has a deadline derived from what it runs; the inventory can set it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible
from fabtune.ansible import PLAYBOOKS
from fabtune.errors import ConfigError
from fabtune.inventory import bench_timeout, ssh_reuse
from fabtune.perf import deadline, pairs
from fabtune.perf.argv import NcclOptions, PerftestOptions


def test_an_nccl_deadline_grows_with_the_sweep_the_iterations_and_the_hosts() -> None:
    small = NcclOptions(min_bytes="64M", max_bytes="64M", iters=5, warmup_iters=1)
    wide = NcclOptions(min_bytes="1G", max_bytes="8G", iters=20, warmup_iters=5)
    assert deadline.sweep(wide) == [1 << 30, 2 << 30, 4 << 30, 8 << 30]
    # start-up, plus 2 x every byte of every iteration at the floor rate (1 GB/s)
    assert deadline.nccl_deadline_s(wide, 2) == 60 + 2 + int(2 * (15 << 30) * 25 / 1e9) + 1
    assert deadline.nccl_deadline_s(small, 2) < deadline.nccl_deadline_s(wide, 2)
    assert deadline.nccl_deadline_s(wide, 64) - deadline.nccl_deadline_s(wide, 2) == 62 * 2
    more = NcclOptions(min_bytes="1G", max_bytes="8G", iters=40, warmup_iters=5)
    assert deadline.nccl_deadline_s(more, 2) > deadline.nccl_deadline_s(wide, 2)


def test_the_override_replaces_every_derived_deadline() -> None:
    assert deadline.nccl_deadline_s(NcclOptions(), 8, 45) == 45
    assert deadline.perftest_deadline_s(PerftestOptions(duration_s=5), 45) == 45


def test_a_perftest_deadline_follows_its_duration() -> None:
    assert deadline.perftest_deadline_s(PerftestOptions(duration_s=5)) == 30 + 10
    assert deadline.perftest_deadline_s(PerftestOptions(duration_s=60)) == 30 + 120


def test_task_and_run_timeouts_back_the_host_deadline_up() -> None:
    assert deadline.task_timeout_s(100) == 100 + deadline.KILL_AFTER_S + deadline.TASK_SLACK_S
    assert deadline.run_timeout_s(100, 4) == 4 * deadline.task_timeout_s(100) + deadline.RUN_SLACK_S
    assert deadline.timed_out(124) and deadline.timed_out(137)
    assert not deadline.timed_out(0) and not deadline.timed_out(3) and not deadline.timed_out(None)


def test_sizes_are_read_like_nccl_tests_does() -> None:
    assert deadline.size_bytes("8M") == 8 << 20
    assert deadline.size_bytes("1g") == 1 << 30
    assert deadline.size_bytes("4096") == 4096
    with pytest.raises(ValueError, match="'8X' is not a size"):
        deadline.size_bytes("8X")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "fabtune_bench_timeout_s: 'abc' must be a whole number of seconds"),
        (-5, "fabtune_bench_timeout_s: -5 must be a whole number of seconds"),
        (2.5, "fabtune_bench_timeout_s: 2.5 must be a whole number of seconds"),
        (True, "fabtune_bench_timeout_s: True must be a whole number of seconds"),
        (3, "fabtune_bench_timeout_s: 3 must be from 10 to 86400"),
        (10**6, "fabtune_bench_timeout_s: 1000000 must be from 10 to 86400"),
    ],
)
def test_a_bad_inventory_timeout_is_refused_by_name(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        bench_timeout(Path("inv.yml"), value)
    assert err.value.problems == [message]


@pytest.mark.parametrize("value", ["yes please", 2, [True]])
def test_a_bad_ssh_reuse_flag_is_refused_by_name(value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        ssh_reuse(Path("inv.yml"), value)
    assert err.value.problems == [f"fabtune_mpirun_ssh_reuse: {value!r} must be true or false"]


def test_the_ssh_reuse_flag_is_read() -> None:
    assert ssh_reuse(Path("inv.yml"), None) is True
    assert ssh_reuse(Path("inv.yml"), False) is False
    assert ssh_reuse(Path("inv.yml"), "no") is False  # an INI inventory's value is a string


def test_an_inventory_timeout_is_read() -> None:
    assert bench_timeout(Path("inv.yml"), None) is None
    assert bench_timeout(Path("inv.yml"), 90) == 90
    assert bench_timeout(Path("inv.yml"), "90") == 90


def _task(playbook: str, name: str) -> dict[str, Any]:
    plays = yaml.safe_load((PLAYBOOKS / playbook).read_text())
    tasks = [t for p in plays for t in p["tasks"] for t in (t.get("block") or [t])]
    return next(t for t in tasks if t["name"] == name)


@pytest.mark.parametrize(
    ("playbook", "task"),
    [
        ("bench_nccl.yml", "Run the launcher"),
        ("bench_measure.yml", "Run nccl-tests"),
        ("bench_ib_write_bw.yml", "Read counters before and start the servers"),
        ("bench_ib_write_bw.yml", "Run clients"),
        ("bench_ib_write_bw.yml", "Run clients, stop the servers and read counters after"),
    ],
)
def test_every_launch_runs_under_timeout_with_a_task_deadline(playbook: str, task: str) -> None:
    found = _task(playbook, task)
    text = yaml.safe_dump(found)
    launch = found.get("ansible.builtin.command") or found["fabtune.fabric.fabric_run"]
    assert "timeout" in launch.get("argv", []) or "__fabtune_timeout" in text
    assert launch.get("start_prefix", "{{ __fabtune_timeout }}") == "{{ __fabtune_timeout }}"
    assert "--kill-after=10s" in (PLAYBOOKS / playbook).read_text()
    assert "timeout" in found or "async" in found


def test_playbook_runs_have_a_deadline_and_every_task_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    class Done:
        status, rc, stats = "timeout", 254, {}
        config = type("C", (), {"artifact_dir": str(tmp_path)})

    def fake_run(**kwargs: Any) -> Done:
        seen.update(kwargs)
        return Done()

    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    monkeypatch.delenv("ANSIBLE_TASK_TIMEOUT", raising=False)
    monkeypatch.setattr(ansible.ansible_runner, "run", fake_run)
    outcome = ansible.run_playbook("facts.yml", tmp_path / "inv.yml", timeout_s=77)
    # fabtune stops the run at 77 s itself (the cancel callback: the whole process tree);
    # ansible-runner's own timeout is a backstop behind it
    assert seen["timeout"] == 77 + ansible.BACKSTOP_S and callable(seen["cancel_callback"])
    assert seen["envvars"]["ANSIBLE_TASK_TIMEOUT"] == str(ansible.TASK_TIMEOUT_S)
    with pytest.raises(ansible.PlaybookFailed, match="did not finish within its deadline"):
        outcome.raise_for_failure("reading facts")
    ansible.run_module("ansible.builtin.ping", "", tmp_path / "inv.yml")
    assert seen["timeout"] == ansible.RUN_TIMEOUT_S + ansible.BACKSTOP_S


def test_a_perftest_client_past_its_deadline_is_a_failed_pair_with_evidence() -> None:
    run = {"client": "h02", "client_argv": ["ib_write_bw", "-d", "mlx5_0", "10.0.0.1"]}
    gbps, error = pairs._client_result({"rc": 124, "stdout": "", "timed_out": False}, run, 40)
    assert gbps is None
    assert error == "timeout: h02: 'ib_write_bw -d mlx5_0 10.0.0.1' missed its deadline of 40 s"
    # stopped by fabric_run's own deadline (the backstop after coreutils timeout's)
    assert pairs._client_result({"rc": -15, "stdout": "", "timed_out": True}, run, 40)[1] == error
