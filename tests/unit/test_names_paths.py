"""Every name that becomes a path is checked by one rule; `testbed down` removes only its own testbed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune import desired, paths, report
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus, TestbedError
from fabtune.inventory import InventoryInfo
from fabtune.lock import fabric_lock
from fabtune.state import HostState
from fabtune.testbed import build, layout
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import build_spec, spec_to_doc
from fabtune.tune.run import runs_dir

BAD_NAMES = ["..", ".", "../x", "../../../../../tmp/x", "a/b", "/etc", "", "-x", ".hidden", "a b",
             "x\n", "a;b", "x" * 64]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A FABTUNE_HOME with a journal, a lock, a desired state and another testbed's key in it."""
    folder = tmp_path / "home"
    for rel in ("journal.sqlite", "locks/rack.lock", "desired/rack.yml", "testbeds/other/ssh/id_ed25519"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("keep me\n")
    monkeypatch.setenv("FABTUNE_HOME", str(folder))
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("value", BAD_NAMES)
def test_check_name_refuses_naming_field_and_value(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        paths.check_name("fabtune_fabric_name", value)
    assert caught.value.problems[0].startswith(f"fabtune_fabric_name: {value!r} ")


@pytest.mark.parametrize("value", ["rack", "rack-1", "r.a_c-k", "H100.pod2", "x" * 63])
def test_check_name_accepts_plain_names(value: str) -> None:
    assert paths.check_name("fabric name", value) == value


def test_under_home_refuses_a_symlink_out_of_the_home(home: Path, tmp_path: Path) -> None:
    (home / "testbeds" / "evil").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="leads outside"):
        paths.under_home("testbeds", "evil")


# Finding 1: `testbed down --name ..` deleted the whole $FABTUNE_HOME.


@pytest.mark.parametrize("name", ["..", "../..", "../home", ".", "other/..", "x/../.."])
def test_down_refuses_a_path_as_name_and_deletes_nothing(home: Path, name: str) -> None:
    before = _files(home)
    with pytest.raises(ConfigError, match="testbed name"):
        build.down(name)
    assert _files(home) == before


def test_cli_down_dotdot_exits_config_and_keeps_the_home(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(home)
    assert main(["testbed", "down", "--name", ".."]) == ExitStatus.CONFIG
    err = capsys.readouterr().err
    assert "--name: '..'" in err
    assert "removed" not in err
    assert _files(home) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["testbed", "status", "--name", "../x"],
        ["testbed", "inventory", "--name", "../x"],
        ["testbed", "ssh", "--name", "../x", "h01", "true"],
        ["testbed", "up", "--name", "../x", "--hosts", "2"],
    ],
)
def test_every_testbed_verb_checks_the_name(
    home: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitStatus.CONFIG
    assert "'../x'" in capsys.readouterr().err


def test_down_of_an_unknown_testbed_says_nothing_was_removed(home: Path) -> None:
    before = _files(home)
    with pytest.raises(TestbedError, match=r"no testbed named 'ta9'.*nothing removed"):
        build.down("ta9")
    assert _files(home) == before


@pytest.fixture
def fake_testbed(home: Path) -> Iterator[Path]:
    """A testbed directory of 'ta1' whose state records no namespace, link or process that exists."""
    spec = build_spec({"name": "ta1", "hosts": 2, "subnet_base": "10.231"})
    tb_dir = layout.testbed_dir("ta1")
    tb_dir.mkdir(parents=True)
    (tb_dir / "inventory.yml").write_text("all: {}\n")
    (tb_dir / "state.json").write_text(json.dumps({"version": 1, "spec": spec_to_doc(spec), "pids": {}}))
    yield tb_dir


def test_down_kills_no_process_that_merely_names_its_directory(home: Path, fake_testbed: Path) -> None:
    code = "import sys, time; time.sleep(60)"
    bystander = subprocess.Popen([sys.executable, "-c", code, str(fake_testbed / "inventory.yml")])
    try:
        build.down("ta1")
        assert bystander.poll() is None  # the old down SIGKILLed every process naming the path
        assert not fake_testbed.exists()
        assert (home / "testbeds" / "other" / "ssh" / "id_ed25519").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_down_kills_a_recorded_pid_only_while_it_is_the_recorded_process(
    home: Path, fake_testbed: Path
) -> None:
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = json.loads((fake_testbed / "state.json").read_text())
        state.update({"version": 2, "pids": {"h01": reused.pid}, "started": {"h01": 1}})  # another start
        (fake_testbed / "state.json").write_text(json.dumps(state))
        build.down("ta1")
        assert reused.poll() is None
    finally:
        reused.kill()
        reused.wait()


# Finding 2: the fabric name from the inventory became locks/<name>.lock and desired/<name>.yml.


def test_fabric_lock_refuses_a_path_as_fabric_name(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fabric name"), fabric_lock("../../x", "tune"):
        pass
    assert not (tmp_path / "x.lock").exists()


@pytest.mark.parametrize("value", ["../x", "..", "a/b"])
def test_every_name_that_becomes_a_path_is_checked(home: Path, value: str) -> None:
    before = _files(home)
    for make in (desired.tuned_path, runs_dir, report.report_dir, layout.testbed_dir):
        with pytest.raises(ConfigError):
            make(value)
    with pytest.raises(ConfigError):
        desired.save_tuned(value, HostState(), "r1")
    assert _files(home) == before
    assert not (home.parent / "x.yml").exists()


# Privacy: the home, locks and desired states are the owner's only.


def test_lock_and_desired_state_are_private_whatever_the_umask(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "fresh"
    monkeypatch.setenv("FABTUNE_HOME", str(home))
    old = os.umask(0o022)
    try:
        with fabric_lock("rack", "tune"):
            pass
        written = desired.save_tuned("rack", HostState(nccl={}), "r1")
    finally:
        os.umask(old)
    assert _mode(home) == 0o700
    assert _mode(home / "locks") == 0o700
    assert _mode(home / "locks" / "rack.lock") == 0o600
    assert _mode(home / "desired") == 0o700
    assert _mode(written) == 0o600


def test_an_open_home_is_tightened(home: Path) -> None:
    home.chmod(0o755)
    (home / "locks").chmod(0o755)
    paths.private_dir(paths.under_home("locks"))
    assert _mode(home) == 0o700
    assert _mode(home / "locks") == 0o700


def test_the_cli_makes_everything_it_writes_private(home: Path) -> None:
    old = os.umask(0o022)
    try:
        main(["--version"])
        assert os.umask(0o022) == 0o077
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_fabric_named_unlike_a_testbed_is_no_testbed(home: Path) -> None:
    info = InventoryInfo(home / "inv.yml", "H100.pod-2", "roce", ("h01",), (), "mpirun", None)
    assert testbed_model.testbed_oracle(info) is None


def test_down_removes_only_objects_named_as_its_own(
    home: Path, fake_testbed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state file that lists the host's eth0 or another testbed's objects removes none of them."""
    state = json.loads((fake_testbed / "state.json").read_text())
    listed = {
        "netns": ["ft-ta1-h01", "ft-ta12-h01", "other"],
        "links": ["eth0", "ftta1m", "ftta12m", "ftta101r0"],
    }
    state.update({"version": 2, **listed})
    (fake_testbed / "state.json").write_text(json.dumps(state))
    existing = {kind: list(names) for kind, names in listed.items()}
    calls: list[tuple[str, ...]] = []

    def fake_ip(*args: str, **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if args[:2] == ("netns", "del"):
            existing["netns"].remove(args[2])
        if args[:2] == ("link", "del"):
            existing["links"].remove(args[2])
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(build.system, "ip", fake_ip)
    monkeypatch.setattr(build.system, "netns_list", lambda: list(existing["netns"]))
    monkeypatch.setattr(build.system, "link_names", lambda: list(existing["links"]))
    build.down("ta1")
    removed = sorted(a[2] for a in calls if a[1] == "del")
    assert removed == ["ft-ta1-h01", "ftta101r0", "ftta1m"]
