"""The modules' AnsiballZ payloads kept from one Ansible run to the next (callback module_cache)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
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
