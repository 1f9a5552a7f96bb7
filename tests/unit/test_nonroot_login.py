"""Non-root login: the spec field, the testbed's sudoers drop-in and inventory, and the emulated
tools refusing an ordinary user's changes as the real ones do (the caller's privilege is
simulated: the tests themselves run as root)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.sim import nicd
from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import _common, _counters, dcb, mlnx_qos, systemd
from fabtune.testbed import build, files
from fabtune.testbed.spec import LOGIN_USER_RULE, build_spec, spec_to_doc
from tests.unit.sim_tools.conftest import roce_node

IF = "ens1np0"


@pytest.fixture
def roce(tmp_path: Path) -> NodeState:
    provision(tmp_path, roce_node(), {"mtu": 4200})
    return NodeState.under(tmp_path)


@pytest.fixture
def ordinary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller lacks CAP_NET_ADMIN and is not root (what the tools ask of the kernel)."""
    monkeypatch.setattr(_common, "net_admin", lambda *_a: False)
    monkeypatch.setattr(mlnx_qos, "net_admin", lambda *_a: False)
    monkeypatch.setattr(systemd, "_privileged", lambda: False)


# ----------------------------------------------------------------------------------- spec


def test_login_user_defaults_to_root_and_round_trips() -> None:
    assert build_spec({"hosts": 2}).login_user == "root"
    assert not build_spec({"hosts": 2}).nonroot_login
    spec = build_spec({"hosts": 2, "login_user": "ops"})
    assert spec.nonroot_login and build_spec(spec_to_doc(spec)) == spec


@pytest.mark.parametrize("bad", ["Ops", "1ops", "ops;rm", "../x", "", "a" * 33, 7, "op s"])
def test_login_user_must_be_a_safe_user_name(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        build_spec({"hosts": 2, "login_user": bad})
    assert err.value.problems == [f"login_user: {bad!r} {LOGIN_USER_RULE}"]


def test_login_user_of_this_machine_is_refused() -> None:
    with pytest.raises(ConfigError, match="login_user: 'daemon' is already an account of this machine"):
        build._check_login_user(build_spec({"hosts": 2, "login_user": "daemon"}))


# ----------------------------------------------------------------------------------- testbed files


def test_inventory_logs_in_as_the_user_and_escalates_with_sudo(tmp_path: Path) -> None:
    spec = build_spec({"hosts": 2, "login_user": "ops"})
    inv = files.inventory(spec, tmp_path)["all"]
    assert isinstance(inv, dict)
    assert inv["vars"]["ansible_user"] == "ops" and inv["vars"]["ansible_become_method"] == "sudo"
    assert "ansible_become" not in inv["vars"]
    root = files.inventory(build_spec({"hosts": 2}), tmp_path)["all"]
    assert isinstance(root, dict) and root["vars"]["ansible_user"] == "root"
    assert "ansible_become_method" not in root["vars"]


@pytest.mark.skipif(shutil.which("visudo") is None, reason="visudo (sudo) not installed")
def test_sudoers_rule_passes_visudo_and_a_broken_one_does_not() -> None:
    files.check_sudoers(files.sudoers_rule("ops"))
    with pytest.raises(Exception, match="visudo refuses"):
        files.check_sudoers("ops ALL=(ALL NOPASSWD ALL\n")


# ----------------------------------------------------------------------------------- tools


def test_mlnx_qos_reads_need_no_privilege(roce: NodeState, ordinary: None,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert mlnx_qos.main(["-i", IF, "-a"], state=roce) == 0
    assert capsys.readouterr().out.startswith("DCBX mode: OS controlled")


@pytest.mark.parametrize(("argv", "message"), [
    (["--pfc", "0,0,0,1,0,0,0,0"], "Netlink error: Operation not permitted (1)"),
    (["--prio_tc", "0,1,2,3,4,5,6,7"], "Netlink error: Operation not permitted (1)"),
    (["--cable_len", "10"], "Netlink error: Operation not permitted (1)"),
])
def test_mlnx_qos_netlink_changes_are_eperm(roce: NodeState, ordinary: None, argv: list[str],
                                            message: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = roce.get_pfc(IF), roce.get_ets(IF)
    assert mlnx_qos.main(["-i", IF, *argv], state=roce) == 1
    assert capsys.readouterr().out.splitlines() == [message]
    assert (roce.get_pfc(IF), roce.get_ets(IF)) == before


def _eacces(*_a: object, **_k: object) -> None:
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))


SYSFS_CHANGES = {
    "set_trust": (["--trust", "dscp"], "Priority trust state is not supported on your system"),
    "set_dscp2prio": (["--dscp2prio", "set,26,3"], "dscp2prio command failed"),
    "set_buffers": (["--buffer_size", "1,2,3"], "Buffers commands error"),
}


@pytest.mark.parametrize("method", sorted(SYSFS_CHANGES))
def test_mlnx_qos_sysfs_changes_take_their_step_message(
        roce: NodeState, ordinary: None, monkeypatch: pytest.MonkeyPatch, method: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv, message = SYSFS_CHANGES[method]
    monkeypatch.setattr(NodeState, method, _eacces)  # a root-owned 0644 sysfs file, opened by a user
    assert mlnx_qos.main(["-i", IF, *argv], state=roce) == 1
    assert capsys.readouterr().out.splitlines()[-1] == message


def test_dcb_changes_are_eperm_and_shows_work(roce: NodeState, ordinary: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = roce.get_pfc(IF)
    for argv in (["pfc", "set", "dev", IF, "prio-pfc", "3:on"],  # (6.1.0 has no apptrust object)
                 ["app", "add", "dev", IF, "dscp-prio", "26:3"]):
        assert dcb.main(argv, state=roce) == 1
        # __dcb_set_attribute: perror("Attribute write") (iproute2 dcb/dcb.c)
        assert capsys.readouterr().err == "Attribute write: Operation not permitted\n"
    assert roce.get_pfc(IF) == before
    assert dcb.main(["-j", "pfc", "show", "dev", IF], state=roce) == 0


def test_systemd_changes_are_access_denied(tmp_path: Path, ordinary: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert systemd.run_main(["--unit=r1", "--on-active=60", "/bin/true"], run_dir=tmp_path) == 1
    assert capsys.readouterr().err == "Failed to start transient timer unit: Access denied\n"
    assert not list(tmp_path.glob("*.timer"))
    assert systemd.systemctl_main(["stop", "r1.timer"], run_dir=tmp_path) == 4
    assert capsys.readouterr().err == "Failed to stop r1.timer: Access denied\n"
    assert systemd.systemctl_main(["is-active", "r1.timer"], run_dir=tmp_path) == 3


def test_net_admin_reads_the_effective_capabilities(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t0000000000001000\n")
    assert _common.net_admin(status)
    status.write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    assert not _common.net_admin(status)


def test_an_ordinary_users_counters_go_to_the_engine(roce: NodeState,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[tuple[str, dict[str, int]]] = []
    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    monkeypatch.setattr(nicd, "post", lambda netdev, deltas: posted.append((netdev, dict(deltas))))
    before = roce.read_counters(IF)["tx_prio3_bytes"]
    _counters.apply(roce, IF, {"tx_prio3_bytes": 4096, "no_such_counter": 1})
    assert posted == [(IF, {"tx_prio3_bytes": 4096})]
    assert roce.read_counters(IF)["tx_prio3_bytes"] == before  # the user wrote nothing itself


def test_the_engine_refuses_when_it_is_not_running(tmp_path: Path) -> None:
    with pytest.raises(nicd.NicdError, match="NIC counter engine"):
        nicd.post(IF, {"tx_prio3_bytes": 1}, path=tmp_path / "absent.sock")
