"""The host side of the revert: fabtune-revert imports fabric_apply by its plain name, without Ansible.

The fabric_revert role copies the collection's module_utils files named in its vars to
``fabric_revert_lib_dir`` and installs ``fabtune-revert`` from its template; on the host
``fabric_apply`` takes the ``except ImportError`` branch of its imports (plain ``fabric_desired``
...). Here the same files go to a temporary lib dir and run under ``python -I -S`` (no
site-packages: no ``ansible``, no ``ansible_collections``), as on a host with a bare Python.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jinja2
import pytest
import yaml

from fabtune.ansible import ROLES
from fabtune.tune import backend
from tests.unit.modules.conftest import COLLECTIONS, load_util

ROLE = ROLES / "fabric_revert"
MODULE_UTILS = COLLECTIONS / "ansible_collections" / "fabtune" / "fabric" / "plugins" / "module_utils"


def _role_files() -> list[str]:
    return list(yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_fabric_revert_module_utils"])


def _role_source_dir() -> Path:
    """The role's default ``fabric_revert_module_utils_dir``, with ``role_path`` filled in."""
    default = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["fabric_revert_module_utils_dir"]
    return Path(jinja2.Template(default).render(role_path=str(ROLE))).resolve()


def _plain_fabric_imports(path: Path) -> set[str]:
    """The ``fabric_*`` modules a file imports by plain name (the host-side fallback)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("fabric_"):
            names.add(str(node.module))
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("fabric_"))
    return names


def test_the_role_copies_the_collections_module_utils_fabric_apply_needs() -> None:
    assert _role_source_dir() == MODULE_UTILS.resolve()
    files = _role_files()
    assert "fabric_apply.py" in files
    for name in files:
        assert (MODULE_UTILS / name).is_file(), name
        assert {f"{m}.py" for m in _plain_fabric_imports(MODULE_UTILS / name)} <= set(files), name
    assert _plain_fabric_imports(MODULE_UTILS / "fabric_apply.py") == {
        "fabric_desired", "fabric_formats", "fabric_host", "fabric_qos_backend"}
    assert _plain_fabric_imports(MODULE_UTILS / "fabric_qos_backend.py") == {"fabric_formats"}


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    """The role's install step: its files, from its source dir, in a lib dir."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in _role_files():
        shutil.copy(_role_source_dir() / name, lib / name)
    return lib


def _bare_python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", *args], capture_output=True, text=True, check=False,
                          timeout=60)


def test_fabric_apply_falls_back_to_plain_imports_and_reverts(lib_dir: Path, tmp_path: Path) -> None:
    state_dir, root = tmp_path / "state", tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/nccl.conf").write_text("NCCL_IB_TC=106\n")
    code = f"""
import json, sys
sys.path.insert(0, {str(lib_dir)!r})
import fabric_apply
assert "ansible" not in sys.modules and "ansible_collections" not in sys.modules, sorted(sys.modules)
fabric_apply.write_record({str(state_dir)!r}, "r1", {{"snapshot": {{"nccl": {{"NCCL_IB_TC": 0}}}}}})
lines = []
rc = fabric_apply.revert("r1", state_dir={str(state_dir)!r}, root={str(root)!r}, run=None,
                         which=lambda name: None, log=lines.append)
print(json.dumps({{"rc": rc, "validate": fabric_apply.validate.__module__,
                  "diff_state": fabric_apply.diff_state.__module__, "lines": lines}}))
"""
    proc = _bare_python("-c", code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["validate"] == "fabric_desired" and out["diff_state"] == "fabric_qos_backend"
    assert out["rc"] == 0, out["lines"]
    assert (root / "etc/nccl.conf").read_text() == "#\n# Ansible managed\n#\nNCCL_IB_TC=0\n"
    assert (state_dir / "r1.reverted.json").exists()


def test_the_installed_fabtune_revert_runs_without_ansible(lib_dir: Path, tmp_path: Path) -> None:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: f"#\n# {text}\n#"
    template = env.from_string((ROLE / "templates" / "fabtune-revert.j2").read_text())
    script = tmp_path / "fabtune-revert"
    log, state_dir = tmp_path / "revert.log", tmp_path / "state"
    script.write_text(template.render(
        fabric_revert_python=sys.executable, ansible_managed="Ansible managed",
        fabric_revert_lib_dir=str(lib_dir), fabric_revert_state_dir=str(state_dir),
        fabric_revert_log=str(log)))
    # only the paths that stop before applying anything: the script's root is the real /
    bad = _bare_python(str(script), "../etc")
    assert bad.returncode == 2 and "usage: fabtune-revert RUN_ID" in bad.stderr
    none = _bare_python(str(script), "r9")
    assert none.returncode == 0, none.stderr
    assert "run r9: nothing armed" in log.read_text()


def _fake_systemd(bin_dir: Path, calls: Path) -> None:
    """systemctl and systemd-run that log their argv (one JSON line each) and succeed."""
    bin_dir.mkdir()
    for name in ("systemctl", "systemd-run"):
        tool = bin_dir / name
        tool.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
        tool.chmod(0o755)


Revert = Callable[..., subprocess.CompletedProcess[str]]


def _fabtune_revert(lib_dir: Path, tmp_path: Path) -> Revert:
    """``fabtune-revert ARGS`` as the installed script runs it (the modules' code, no site-packages),
    with a fake systemd logging to ``tmp_path/calls``; ``arm`` writes run r1's record instead."""
    state_dir = tmp_path / "state"
    _fake_systemd(tmp_path / "bin", tmp_path / "calls")
    code = f"""
import sys
sys.path.insert(0, {str(lib_dir)!r})
import fabric_apply
if sys.argv[1] == "arm":
    fabric_apply.write_record({str(state_dir)!r}, "r1", {{"deadline": 1.0, "script": "/x/fabtune-revert",
                                                       "snapshot": {{"nccl": None}}}})
    sys.exit(0)
sys.exit(fabric_apply.revert_main(sys.argv[1:], state_dir={str(state_dir)!r},
                                  log_file={str(tmp_path / "log")!r}))
"""
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}

    def fabtune_revert(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-I", "-S", "-c", code, *args], capture_output=True, text=True,
                              check=False, timeout=60, env=env)

    return fabtune_revert


def test_fabtune_revert_extend_moves_the_deadline_with_the_modules_code(lib_dir: Path,
                                                                       tmp_path: Path) -> None:
    state_dir, calls = tmp_path / "state", tmp_path / "calls"
    fabtune_revert = _fabtune_revert(lib_dir, tmp_path)
    assert fabtune_revert("--extend", "r1", "5").returncode == 2  # under the 10 s minimum
    missing = fabtune_revert("--extend", "r1", "40")
    assert missing.returncode == 1 and "not armed on this host" in json.loads(missing.stdout)["msg"]
    assert fabtune_revert("arm").returncode == 0
    done = fabtune_revert("--extend", "r1", "40")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["armed"] is True and out["reverted"] is False and out["deadline"] > 1.0
    record = json.loads((state_dir / "r1.json").read_text())
    assert record["deadline"] == out["deadline"] and record["snapshot"] == {"nccl": None}
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert argvs[0] == ["stop", "fabtune-revert-r1.timer"]
    assert argvs[-1] == ["--unit=fabtune-revert-r1", "--on-active=40s", "--timer-property=AccuracySec=1s",
                         "/x/fabtune-revert", "r1"]
    (state_dir / "r1.json").rename(state_dir / "r1.reverted.json")  # the timer fired
    gone = fabtune_revert("--extend", "r1", "40")
    assert gone.returncode == 3 and json.loads(gone.stdout)["reverted"] is True
    assert "already reverted" in json.loads(gone.stdout)["msg"]


def test_fabtune_revert_confirm_keeps_the_run_with_the_modules_code(lib_dir: Path, tmp_path: Path) -> None:
    state_dir, calls = tmp_path / "state", tmp_path / "calls"
    fabtune_revert = _fabtune_revert(lib_dir, tmp_path)
    assert fabtune_revert("--confirm", "../r1").returncode == 2
    assert fabtune_revert("--confirm").returncode == 2
    assert fabtune_revert("arm").returncode == 0
    kept = fabtune_revert("--confirm", "r1")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == {"run_id": "r1", "changed": True, "reverted": False}
    assert not (state_dir / "r1.json").exists()
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert argvs[:2] == [["is-active", "fabtune-revert-r1.timer"], ["stop", "fabtune-revert-r1.timer"]]
    assert "r1: confirmed" in (tmp_path / "log").read_text()
    again = fabtune_revert("--confirm", "r1")  # idempotent: nothing left to cancel
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    assert fabtune_revert("arm").returncode == 0
    (state_dir / "r1.json").rename(state_dir / "r1.reverted.json")  # the timer fired first
    gone = fabtune_revert("--confirm", "r1")
    assert gone.returncode == 3 and json.loads(gone.stdout)["reverted"] is True
    assert "already reverted" in json.loads(gone.stdout)["msg"]


def test_the_controller_calls_fabtune_revert_with_the_hosts_flags_and_reads_its_exit_status() -> None:
    """The loop's direct channel (fabtune.tune.backend) and the host's program agree on the verbs
    and on the exit status that means "already reverted"; an unknown verb is usage (exit 2), which
    the controller takes as a program older than the verb."""
    fabric_apply = load_util("fabric_apply")
    assert backend.EXTEND_FLAG == fabric_apply.EXTEND_FLAG
    assert backend.CONFIRM_FLAG == fabric_apply.CONFIRM_FLAG
    assert backend.EXIT_REVERTED == fabric_apply.EXIT_REVERTED
    assert fabric_apply.revert_main(["--not-a-verb", "r1"], log_file="/dev/null") == 2
