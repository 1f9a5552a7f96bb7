"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML that ansible-doc can read.

ansible-doc (and the collection's docs) parse these three strings as YAML; a description item
holding ": " unquoted is a YAML mapping, and four modules once failed that way. The strings are
read from the source without importing the module, as ansible-doc reads them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

COLLECTION = Path(__file__).resolve().parents[3] / "fabtune/content/ansible_collections/fabtune/fabric"
MODULES = COLLECTION / "plugins/modules"
BLOCKS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def blocks(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in BLOCKS:
                    found[target.id] = str(node.value.value)
    return found


@pytest.mark.parametrize("path", sorted(MODULES.glob("*.py")), ids=lambda p: p.stem)
def test_the_module_documents_itself_in_yaml(path: Path) -> None:
    found = blocks(path)
    assert set(found) == set(BLOCKS), f"{path.name}: missing {set(BLOCKS) - set(found)}"
    doc = yaml.safe_load(found["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert isinstance(doc["short_description"], str)
    for item in doc["description"]:
        assert isinstance(item, str), f"{path.name}: a description item is not a string: {item!r}"
    for name, option in (doc.get("options") or {}).items():
        described = option["description"]
        items = described if isinstance(described, list) else [described]
        assert all(isinstance(i, str) for i in items), f"{path.name}: option {name}: {described!r}"
    assert isinstance(yaml.safe_load(found["EXAMPLES"]), list)
    returned = yaml.safe_load(found["RETURN"])
    assert returned is None or isinstance(returned, dict)


# Keys of a module's result that Ansible itself reads to class the whole task (TaskResult:
# is_skipped, is_failed, is_unreachable): a module that returned, say, a list of the files it left
# out as ``skipped`` had its task shown and counted as skipped although it changed the host.
RESERVED = ("skipped", "failed", "unreachable", "skip_reason")


def _result_keys(path: Path) -> set[str]:
    """String keys of every dict display and every keyword of a call in the module's source."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(node, ast.Call):
            keys |= {kw.arg for kw in node.keywords if kw.arg}
    return keys


@pytest.mark.parametrize("path", sorted(MODULES.glob("*.py")), ids=lambda p: p.stem)
def test_no_module_returns_a_key_ansible_reads_as_the_task_outcome(path: Path) -> None:
    returned = yaml.safe_load(blocks(path)["RETURN"]) or {}
    assert not set(returned) & set(RESERVED), f"{path.name} documents {set(returned) & set(RESERVED)}"
    used = _result_keys(path) & set(RESERVED) - {"failed"}  # fail_json sets failed itself
    assert not used, f"{path.name} returns {used}"
