"""fabtune as an operator installs it, used from a directory that is not the checkout.

The wheel built from the project (``pip wheel``) goes into a fresh virtualenv; the collection built
by ``ansible-galaxy collection build`` is installed with ``ansible-galaxy collection install``. Both
then run against testbeds from an unrelated working directory, with nothing of the checkout on any
path: what works here works for ``pip install``/``pipx install`` and for an AWX project.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, testbed_unavailable

# This module's racks: own names and subnets (test modules run on parallel workers).
DEMO = ("pkd", "10.239")
RACK = ("pka", "10.238")
# The checkout's own files that a build must not carry along (caches, the dev virtualenv).
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", "artifacts",
)


def _run(argv: list[str], cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd`` with the caller's environment less anything that points at the checkout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}
    clean["PATH"] = os.pathsep.join(p for p in clean["PATH"].split(os.pathsep) if str(REPO) not in p)
    return subprocess.run(
        argv, cwd=cwd, env=clean | env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{proc.args}: rc {proc.returncode}\n{tail}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unrelated working directory: no ansible.cfg, no checkout above it."""
    reason = testbed_unavailable()
    if reason:
        pytest.skip(reason)
    return tmp_path_factory.mktemp("operator")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project's sources, so the build writes nothing into the checkout."""
    tree = tmp_path_factory.mktemp("src") / "fabtune"
    shutil.copytree(REPO, tree, ignore=NOT_SOURCE)
    return tree


@pytest.fixture(scope="module")
def venv(source: Path, elsewhere: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding only the built wheel and what it depends on."""
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip"]
    _ok(_run([*pip, "wheel", "-q", "--no-deps", str(source), "-w", str(dist)], elsewhere))
    (wheel,) = dist.glob("fabtune-*.whl")
    env = tmp_path_factory.mktemp("venv") / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(env)], elsewhere))
    _ok(_run([str(env / "bin/pip"), "install", "-q", str(wheel)], elsewhere, timeout=900))
    return env


def _spec(venv: Path, where: Path, name: str, subnet: str, base: str = "demo.yml") -> Path:
    """One of the installed package's example specs, renamed onto this module's name and subnet."""
    code = "from fabtune.testbed.demo import DEMO_SPEC; print(DEMO_SPEC.parent)"
    shipped = _ok(_run([str(venv / "bin/python"), "-c", code], where)).strip()
    doc = yaml.safe_load((Path(shipped) / base).read_text())
    doc.update(name=name, subnet_base=subnet)
    path = where / f"{name}.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_wheel_carries_the_collection_profiles_and_specs(venv: Path, elsewhere: Path) -> None:
    home = elsewhere / "home-bare"  # no ~/.ansible.cfg
    home.mkdir(exist_ok=True)
    out = _ok(_run([str(venv / "bin/python"), "-c", (
        "import fabtune, fabtune.ansible as a; from fabtune.testbed.demo import DEMO_SPEC;"
        "print(fabtune.__file__); print(a.COLLECTION); print(DEMO_SPEC);"
        "print(a.config_env().get('ANSIBLE_CONFIG', '-'))"
    )], elsewhere, HOME=str(home))).split()
    package, collection, demo_spec, config = (Path(p) for p in out)
    assert package.is_relative_to(venv), package
    # run from a directory with no ansible.cfg: fabtune's own, carried by the wheel
    assert config == package.parent / "content/ansible.cfg" and config.is_file(), config
    for sub in ("galaxy.yml", "playbooks/apply.yml", "roles/roce_qos/tasks/main.yml",
                "plugins/modules/fabric_qos.py", "profiles/roce.yml"):
        assert (collection / sub).is_file(), sub
    for template in ("report.html.j2", "sections.html.j2", "macros.html.j2", "report.css"):
        assert (package.parent / "report/templates" / template).is_file(), template
    assert demo_spec.is_file()
    assert str(demo_spec) in _ok(_run([str(venv / "bin/fabtune"), "demo", "--help"], elsewhere)).replace(
        "\n", "").replace(" ", "")


# What the installed wheel must carry is proven by one move as well as by all of them (the whole
# loop is tests/integration/test_tune.py's): the demo's run tries the lossless class only.
SHORT_RUN = {"fabtune_tune": {"skip_groups": ["routing", "mtu", "qps", "gdr"], "baseline_runs": 2,
                              "min_runs": 2, "max_runs": 4}}


# The demo is a tune (minutes, more on a loaded machine): its own deadline, not the suite's.
@pytest.mark.timeout(1800)
def test_demo_runs_to_its_report_from_the_installed_wheel(venv: Path, elsewhere: Path) -> None:
    spec = _spec(venv, elsewhere, *DEMO)
    home = elsewhere / "home-demo"
    fabtune = str(venv / "bin/fabtune")
    options = elsewhere / "short-run.yml"
    options.write_text(yaml.safe_dump(SHORT_RUN))
    try:
        proc = _run([fabtune, "demo", "--spec", str(spec), "--down", "--profile", str(options)],
                    elsewhere, timeout=1700, FABTUNE_HOME=str(home))
    finally:  # a demo stopped half-way leaves its rack up
        _run([fabtune, "testbed", "down", "--name", DEMO[0]], elsewhere, FABTUNE_HOME=str(home))
    out = _ok(proc)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("report: ")]
    report = Path(line.removeprefix("report: "))
    assert report.is_relative_to(home / "runs") and report.is_file(), line
    assert (report.parent / "report.html").is_file()
    decided = json.loads((report.parent / "report.json").read_text())["tune"]["decisions"]
    assert len(decided) == 1 and decided[0]["outcome"] in ("kept", "rolled_back"), decided


@pytest.fixture(scope="module")
def rack(venv: Path, elsewhere: Path) -> Iterator[Path]:
    """A 2-host RoCE testbed built by the installed fabtune; its inventory."""
    spec = _spec(venv, elsewhere, *RACK)
    fabtune = str(venv / "bin/fabtune")
    _ok(_run([fabtune, "testbed", "up", "--spec", str(spec)], elsewhere))
    try:
        yield Path(os.environ["FABTUNE_HOME"]) / "testbeds" / RACK[0] / "inventory.yml"
    finally:
        _ok(_run([fabtune, "testbed", "down", "--name", RACK[0]], elsewhere))


def test_apply_check_from_the_installed_wheel(venv: Path, elsewhere: Path, rack: Path) -> None:
    proc = _run([str(venv / "bin/fabtune"), "apply", "-i", str(rack), "--profile", "roce", "--check"],
                elsewhere)
    out = _ok(proc)
    # The demo's NICs are at factory defaults: the roce profile would change knobs on both hosts.
    assert "h01: " in out and "h02: " in out and "knob(s) would change" in out, out[-2000:]
    again = _ok(_run([str(venv / "bin/fabtune"), "apply", "-i", str(rack), "--profile", "roce", "--check"],
                     elsewhere))
    assert again == out, "check mode changed something"


def test_the_built_collection_installs_and_runs_with_plain_ansible_playbook(
    venv: Path, source: Path, elsewhere: Path, rack: Path, tmp_path: Path
) -> None:
    """As AWX or any Ansible user would: ANSIBLE_COLLECTIONS_PATH set by the caller, no fabtune."""
    collection = source / "fabtune/content/ansible_collections/fabtune/fabric"
    built = _ok(_run([str(venv / "bin/ansible-galaxy"), "collection", "build", str(collection),
                      "--output-path", str(tmp_path)], elsewhere))
    (tarball,) = tmp_path.glob("fabtune-fabric-*.tar.gz")
    assert str(tarball) in built
    installed = tmp_path / "collections"
    _ok(_run([str(venv / "bin/ansible-galaxy"), "collection", "install", str(tarball), "-p", str(installed)],
             elsewhere, ANSIBLE_COLLECTIONS_PATH=str(installed)))
    fabric = installed / "ansible_collections/fabtune/fabric"
    assert (fabric / "roles/roce_qos").is_dir() and (fabric / "playbooks/apply.yml").is_file()
    playbook = [str(venv / "bin/ansible-playbook"), "-i", str(rack), "-e", f"@{fabric}/profiles/roce.yml"]
    proc = _run([*playbook, "--check", "--diff", "fabtune.fabric.apply"], elsewhere,
                ANSIBLE_COLLECTIONS_PATH=str(installed))
    out = _ok(proc)
    assert "PLAY RECAP" in out and "failed=0" in out and "unreachable=0" in out, out[-3000:]
