"""Every role has a README for operators: what it changes on a host, how to undo it, and every
variable its meta/argument_specs.yml declares (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabtune.ansible import ROLES

SECTIONS = ("## What it changes on a host", "## Undo", "## Variables")


def _roles() -> list[Path]:
    return sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def test_every_role_is_covered() -> None:
    assert {p.name for p in _roles()} == {p.name for p in ROLES.iterdir() if p.is_dir()}


@pytest.mark.parametrize("role", _roles(), ids=lambda p: p.name)
def test_role_readme_names_every_variable(role: Path) -> None:
    readme = role / "README.md"
    assert readme.is_file(), f"{role.name} has no README.md"
    text = readme.read_text()
    missing = [s for s in SECTIONS if s not in text]
    assert not missing, f"{role.name}/README.md lacks {missing}"
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {name for entry in specs.values() for name in (entry.get("options") or {})}
    undocumented = sorted(o for o in options if f"`{o}`" not in text)
    assert not undocumented, f"{role.name}/README.md does not describe {undocumented}"
