"""The modules' AnsiballZ payloads kept from one Ansible run to the next (callback module_cache)."""

from __future__ import annotations

import datetime
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from fabtune import ansible
from fabtune.ansible import MODULE_CACHE_CALLBACK, MODULE_CACHE_ENV, module_cache_env, module_cache_key

PLUGIN = ansible.COLLECTIONS / "ansible_collections/fabtune/fabric/plugins/callback/module_cache.py"


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fabtune_module_cache_callback", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_callbacks_documentation_is_what_ansible_reads() -> None:
    """A DOCUMENTATION Ansible cannot parse fails every run that enables the callback."""
    text = PLUGIN.read_text()
    found = re.search(r'DOCUMENTATION = r"""(.*?)"""', text, re.S)
    assert found is not None
    doc = yaml.safe_load(found.group(1))
    assert doc["name"] == "module_cache" and doc["type"] == "aggregate"
    assert doc["options"]["directory"]["env"] == [{"name": MODULE_CACHE_ENV}]
    assert _plugin().CallbackModule.CALLBACK_NAME == MODULE_CACHE_CALLBACK


def test_the_cache_is_named_by_the_modules_content_and_ansible_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "content"
    shutil.copytree(ansible.COLLECTIONS / "ansible_collections/fabtune/fabric/plugins",
                    copy / "ansible_collections/fabtune/fabric/plugins")
    monkeypatch.setattr(ansible, "COLLECTIONS", copy)
    first = module_cache_key.__wrapped__()
    assert first == module_cache_key.__wrapped__() and re.fullmatch(r"[0-9a-f]{20}", first)
    util = copy / "ansible_collections/fabtune/fabric/plugins/module_utils/fabric_formats.py"
    util.write_text(util.read_text() + "\n# changed\n")
    changed = module_cache_key.__wrapped__()
    assert changed != first
    (copy / "ansible_collections/fabtune/fabric/plugins/modules/fabric_run.py").unlink()
    assert module_cache_key.__wrapped__() not in (first, changed)


def test_the_runs_keep_the_callers_callbacks_and_a_private_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CALLBACKS_ENABLED", raising=False)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    (tmp_path / "ansible.cfg").write_text("[defaults]\ncallbacks_enabled = profile_tasks, timer\n")
    os.chmod(tmp_path, 0o755)  # Ansible ignores ./ansible.cfg in a world-writable directory
    env = module_cache_env()
    cache = Path(env[MODULE_CACHE_ENV])
    assert cache.is_dir() and cache.name == module_cache_key() and cache.stat().st_mode & 0o077 == 0
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == f"profile_tasks,timer,{MODULE_CACHE_CALLBACK}"
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", f"{MODULE_CACHE_CALLBACK},junit")
    assert module_cache_env()["ANSIBLE_CALLBACKS_ENABLED"] == f"{MODULE_CACHE_CALLBACK},junit"
    assert ansible._envvars()[MODULE_CACHE_ENV] == str(cache)


def test_the_callback_links_the_runs_build_directory_only_to_a_private_directory(tmp_path: Path) -> None:
    link_cache = _plugin().link_cache
    cache, run = tmp_path / "cache", tmp_path / "run"
    cache.mkdir(mode=0o700)
    run.mkdir()
    assert link_cache(str(cache), str(run)) and (run / "ansiballz_cache").resolve() == cache
    assert link_cache(str(cache), str(run))  # linked already (the same target)
    other = tmp_path / "other"
    other.mkdir()
    assert not link_cache(str(cache), str(other / "missing"))  # no run directory: nothing
    (other / "ansiballz_cache").mkdir()  # a payload built before the link: the run keeps its own
    assert not link_cache(str(cache), str(other))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert not link_cache(str(shared), str(fresh)) and not (fresh / "ansiballz_cache").exists()
    assert not link_cache(str(tmp_path / "nowhere"), str(fresh))
    (tmp_path / "file").write_text("")
    assert not link_cache(str(tmp_path / "file"), str(fresh))


def test_the_payloads_of_versions_used_long_ago_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    base = tmp_path / "home" / "ansible" / "modules"
    for at, key in enumerate(["a" * 20, "b" * 20, "c" * 20, "d" * 20]):
        (base / key).mkdir(parents=True)
        (base / key / "payload").write_text("")
        os.utime(base / key, (1000 + at, 1000 + at))  # d used last, a first
    cache = Path(module_cache_env()[MODULE_CACHE_ENV])
    kept = sorted(p.name for p in base.iterdir())
    assert kept == sorted([cache.name, "c" * 20, "d" * 20]) and (cache.parent == base)


def _payload(path: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        _plugin().add_bytecode(zf)


def _rewrite(path: Path, changes: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members.update(changes)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _imported(path: Path) -> str:
    """What a fresh interpreter of this Python imports from the payload at ``path``."""
    code = f"import sys; sys.path.insert(0, {str(path)!r}); import pkg.mod; print(pkg.mod.VALUE)"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.strip()


def test_a_payload_carries_bytecode_a_host_of_the_same_python_imports(tmp_path: Path) -> None:
    """zipimport takes ``mod.pyc`` before ``mod.py``: the source is changed after the bytecode was
    added, and the bytecode's value is what is imported."""
    payload = tmp_path / "payload.zip"
    _payload(payload, {"pkg/__init__.py": "", "pkg/mod.py": "VALUE = 'compiled'\n"})
    with zipfile.ZipFile(payload) as zf:
        assert sorted(zf.namelist()) == ["pkg/__init__.py", "pkg/__init__.pyc", "pkg/mod.py", "pkg/mod.pyc"]
        header = zf.read("pkg/mod.pyc")[:8]
    assert header == importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little")  # PEP 552: unchecked hash
    _rewrite(payload, {"pkg/mod.py": b"VALUE = 'source'\n"})
    assert _imported(payload) == "compiled"


def test_a_host_of_another_python_imports_the_payloads_source(tmp_path: Path) -> None:
    """Bytecode with another magic number (another Python version) is passed over for the source."""
    payload = tmp_path / "payload.zip"
    _payload(payload, {"pkg/__init__.py": "", "pkg/mod.py": "VALUE = 'source'\n"})
    with zipfile.ZipFile(payload) as zf:
        pyc = zf.read("pkg/mod.pyc")
    other = (int.from_bytes(pyc[:2], "little") - 1).to_bytes(2, "little") + pyc[2:]
    _rewrite(payload, {"pkg/mod.pyc": other})
    assert _imported(payload) == "source"


def test_bytecode_is_added_once_and_not_for_a_file_that_does_not_compile(tmp_path: Path) -> None:
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(payload, "w") as zf:
        zf.writestr("ok.py", "A = 1\n")
        zf.writestr("broken.py", "def (:\n")
        zf.writestr("data.txt", "x")
        assert _plugin().add_bytecode(zf) == 1
        assert _plugin().add_bytecode(zf) == 0
    with zipfile.ZipFile(payload) as zf:
        assert sorted(zf.namelist()) == ["broken.py", "data.txt", "ok.py", "ok.pyc"]


def test_the_payload_build_adds_bytecode_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback wraps ansible-core's last step of a payload build, once however many runs
    start in the process; without that step (another ansible-core) builds are left as they are."""
    from ansible.executor import module_common

    plugin = _plugin()
    original = module_common._add_module_to_zip
    monkeypatch.setattr(module_common, "_add_module_to_zip", original)
    assert plugin.build_with_bytecode() and plugin.build_with_bytecode()
    wrapped = module_common._add_module_to_zip
    assert wrapped is not original and wrapped.__wrapped__ is original
    monkeypatch.delattr(module_common, "_add_module_to_zip")
    assert not plugin.build_with_bytecode()


def test_a_built_payload_carries_the_bytecode_of_each_of_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.executor import module_common

    monkeypatch.setattr(module_common, "_add_module_to_zip", module_common._add_module_to_zip)
    _plugin().build_with_bytecode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ansible/module_utils/basic.py", "import os\n")
        module_common._add_module_to_zip(zf, datetime.datetime(2026, 1, 1), FABRIC_RUN, b"print(1)\n",
                                         "/x/fabric_run.py", _Manager())
    with zipfile.ZipFile(buffer) as zf:
        names = set(zf.namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert "ansible_collections/fabtune/fabric/plugins/modules/fabric_run.py" in sources
    assert {f"{n}c" for n in sources} == names - sources


FABRIC_RUN = "ansible_collections.fabtune.fabric.plugins.modules.fabric_run"


class _Manager:
    debugger_enabled = False
    source_mapping: dict[str, str] = {}


WARM_PROBE = """
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from module_cache import warm_templating
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def plugins():
    kinds = ('ansible.plugins.filter.', 'ansible.plugins.test.')
    return {m.rsplit('_', 1)[0] for m in sys.modules if m.startswith(kinds)}

def lexers():
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment
    return len(AnsibleEnvironment._lexer_cache)

warm = sys.argv[2] == 'warm'
done = warm_templating() if warm else None
before = (plugins(), lexers())
pid = os.fork()
if pid == 0:  # as a worker Ansible forks: one task's conditional with tests and filters
    templar = Templar(loader=DataLoader(), variables={'runs': [{'client': 'h01'}]})
    ok = templar.evaluate_conditional(trust_as_template(
        "runs is defined and (runs | selectattr('client', 'equalto', 'h01') | list | length) == 1"))
    print(json.dumps({'ok': ok, 'done': done, 'before': [sorted(before[0]), before[1]],
                      'worker_loaded': sorted(plugins() - before[0]), 'lexers': lexers()}))
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("warm", [True, False])
def test_the_warm_up_loads_before_the_fork_what_each_worker_loaded_for_itself(warm: bool) -> None:
    """In a fresh ansible-playbook-like process: without the warm-up, a forked worker's first
    conditional loads the builtin test and filter plugins and builds the lexer itself; after it,
    the worker finds them all loaded."""
    done = subprocess.run([sys.executable, "-c", WARM_PROBE, str(PLUGIN), "warm" if warm else "cold"],
                          capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(done.stdout)
    assert found["ok"] is True
    builtin = {"ansible.plugins.filter.core", "ansible.plugins.test.core"}
    if warm:
        assert found["done"] is True and builtin <= set(found["before"][0]) and found["before"][1] == 1
        assert found["worker_loaded"] == [] and found["lexers"] == 1
    else:
        assert found["before"] == [[], 0]
        assert builtin <= set(found["worker_loaded"]) and found["lexers"] == 1
