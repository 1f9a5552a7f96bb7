"""``fabtune uninstall --restore RUN`` leaves every host as it was before fabtune's first change.

Each host's file tree is read before anything runs: the overlay upper layer of the paths fabtune
could touch (``/etc``, ``/usr/local``, ``/var/lib``, ``/var/log``), that is everything the host wrote
over the shared base, with a content hash per file (directories only copied up from the base are
not the host's own). Its knob state is fabtune's own facts. Two journaled runs then change the
hosts through the commit-confirmed path (the roce profile, then MTU 9000), armed and confirmed;
uninstall restores the first run's pre-run state and removes what fabtune installed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import HOSTS, PROFILE, apply_armed, build, confirm, facts, inventory, on_host

pytestmark = pytest.mark.testbed

TREES = ("etc", "usr/local", "var/lib", "var/log")
# What sshd and the login (not fabtune) write on every connection.
# Login records, and the testbed's own emulator logs (the NIC counter engine logs each benchmark's
# counter posts, the tool server each tool it ran; not something fabtune installs or writes).
NOT_FABTUNE = frozenset({"var/log/wtmp", "var/log/btmp", "var/log/lastlog", "var/log/faillog",
                         "var/log/fabtune-nicd.log", "var/log/fabtune-toolserver.log", "var/log/opensm.log"})
INSTALLED = ("/usr/local/sbin/fabtune-revert", "/usr/local/lib/fabtune", "/var/lib/fabtune/revert",
             "/etc/fabtune/rdma_cm.conf", "/usr/local/sbin/fabtune-rdma-cm", "/etc/nccl.conf",
             "/etc/systemd/system/fabtune-rdma-cm.service", "/etc/udev/rules.d/90-fabtune-rdma-cm.rules")


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("un1", "10.253")


def _entry(path: Path, rel: str) -> tuple[Any, ...] | None:
    info = path.lstat()
    if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
        return ("whiteout",)
    if stat.S_ISLNK(info.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(info.st_mode):  # a directory the base has too was only copied up
        return None if Path("/", rel).is_dir() else ("dir", stat.S_IMODE(info.st_mode))
    return ("file", stat.S_IMODE(info.st_mode), hashlib.sha256(path.read_bytes()).hexdigest())


def tree(spec: TestbedSpec, host: str) -> dict[str, tuple[Any, ...]]:
    """What ``host`` wrote under the paths fabtune could touch (its overlay upper layer)."""
    upper = layout.testbed_dir(spec.name) / "hosts" / host / "upper"
    found: dict[str, tuple[Any, ...]] = {}
    for top in TREES:
        for dirpath, dirnames, filenames in os.walk(upper / top):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                rel = str(path.relative_to(upper))
                entry = None if rel in NOT_FABTUNE else _entry(path, rel)
                if entry is not None:
                    found[rel] = entry
    return found


def trees(spec: TestbedSpec) -> dict[str, dict[str, tuple[Any, ...]]]:
    return {h: tree(spec, h) for h in HOSTS}


def journaled_move(rack: TestbedSpec, desired: Any) -> str:
    """A run of one move, as the tuning loop journals it (the snapshot first), armed and confirmed."""
    before = facts(rack)
    journal = Journal()
    run_id = journal.open_run("tune", rack.name, str(inventory(rack)), None)
    seq = journal.step(run_id, "move", "profile", {"desired": desired})
    journal.snapshot(run_id, seq, before)
    apply_armed(rack, desired, run_id, before).raise_for_failure("the move")
    confirm(rack, run_id).raise_for_failure("keeping the move")
    journal.finish_step(run_id, seq, "kept")
    journal.close_run(run_id, "done", {})
    journal.close()
    return run_id


def installed(rack: TestbedSpec, host: str) -> list[str]:
    return [p for p in INSTALLED if on_host(rack, host, f"test -e {p} && echo yes || true").strip() == "yes"]


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_uninstall_restore_leaves_the_hosts_as_before_the_first_run(
    rack: TestbedSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = str(inventory(rack))
    before_tree, before = trees(rack), facts(rack)
    assert all(installed(rack, h) == [] for h in HOSTS)

    first = journaled_move(rack, PROFILE)
    second = copy.deepcopy(PROFILE)
    second["nics"]["all"]["mtu"] = 9000
    journaled_move(rack, second)
    changed_tree = trees(rack)
    assert facts(rack) != before
    assert changed_tree != before_tree
    for host in HOSTS:  # the roles installed their files (the list the test checks is not empty)
        assert set(installed(rack, host)) >= {"/usr/local/sbin/fabtune-revert", "/etc/nccl.conf",
                                               "/etc/fabtune/rdma_cm.conf", "/usr/local/sbin/fabtune-rdma-cm"}

    capsys.readouterr()
    assert main(["uninstall", "-i", inv, "--check"]) == ExitStatus.OK
    assert trees(rack) == changed_tree
    said = capsys.readouterr().out
    for host in HOSTS:  # check mode tells what would go
        line = next(x for x in said.splitlines() if x.startswith(f"{host}: would remove"))
        assert "/usr/local/sbin/fabtune-revert" in line and "/etc/fabtune" in line, said

    # A run armed and not confirmed stops the uninstall before anything changes.
    journal = Journal()
    armed = journal.open_run("tune", rack.name, inv, None)
    journal.close()
    apply_armed(rack, second, armed, facts(rack), deadline=600).raise_for_failure("arming")
    armed_tree = trees(rack)
    assert main(["uninstall", "-i", inv, "--restore", first]) == ExitStatus.LOCKED
    assert trees(rack) == armed_tree
    confirm(rack, armed).raise_for_failure("confirming the armed run")

    assert main(["uninstall", "-i", inv, "--restore", first]) == ExitStatus.OK
    assert facts(rack) == before
    assert trees(rack) == before_tree
    assert all(installed(rack, h) == [] for h in HOSTS)
    runs = {r.id: r for r in Journal().runs(10)}
    assert runs[first].state == "rolled_back"
    assert next(r.state for r in runs.values() if r.kind == "uninstall") == "done"

    assert main(["uninstall", "-i", inv]) == ExitStatus.OK  # nothing left: changes nothing
    assert trees(rack) == before_tree


def test_uninstall_without_restore_removes_only_the_nccl_conf_fabtune_wrote(rack: TestbedSpec) -> None:
    own = "# our own NCCL settings\nNCCL_DEBUG=WARN\n"
    written = "#\n# Ansible managed\n#\nNCCL_IB_TC=106\n"  # as the nccl_env role writes it
    on_host(rack, HOSTS[0], f"printf '{own}' > /etc/nccl.conf")
    on_host(rack, HOSTS[1], f"printf '{written}' > /etc/nccl.conf")
    try:
        assert main(["uninstall", "-i", str(inventory(rack))]) == ExitStatus.OK
        assert on_host(rack, HOSTS[0], "cat /etc/nccl.conf") == own
        assert on_host(rack, HOSTS[1], "test -e /etc/nccl.conf && echo yes || echo no").strip() == "no"
    finally:
        on_host(rack, HOSTS[0], "rm -f /etc/nccl.conf")


def test_check_names_the_missing_tool_its_host_and_package(rack: TestbedSpec, tmp_path: Path) -> None:
    """perftest is taken off one host (moved aside inside that host's own root only)."""
    host = HOSTS[1]
    on_host(rack, host, "mv /usr/bin/ib_write_bw /root/ib_write_bw.aside")
    report = tmp_path / "check.json"
    try:
        code = main(["check", "-i", str(inventory(rack)), "--no-nccl", "-o", str(report)])
    finally:
        on_host(rack, host, "mv /root/ib_write_bw.aside /usr/bin/ib_write_bw")
    assert code == ExitStatus.CHECK_FAILED
    tools = [r for r in json.loads(report.read_text())["results"] if r["check"] == "tools"]
    failed = [r for r in tools if r["verdict"] == "fail"]
    assert [(r["host"], r["summary"]) for r in failed] == [
        (host, "ib_write_bw not found: install ib_write_bw (package perftest)")]
    assert "Debian/Ubuntu" in failed[0]["evidence"]
    assert [r["verdict"] for r in tools if r["host"] == HOSTS[0]] == ["pass"]
    assert main(["check", "-i", str(inventory(rack)), "--no-nccl"]) == ExitStatus.OK
