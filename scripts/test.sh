#!/usr/bin/env bash
# The whole test suite: lint, types, unit and testbed integration tests. Needs root (the testbed
# builds network namespaces) and scripts/install.sh run first.
set -euo pipefail
cd "$(dirname "$0")/.."
COLLECTION=fabtune/content/ansible_collections/fabtune/fabric
# ruff and mypy (strict) cover the collection's plugins too; ruff checks them for Python 3.8, the
# oldest the managed hosts run (pyproject.toml). Where a Python 3.8 is installed (PY38), it also
# compiles every plugin and imports fabric_apply the way fabtune-revert does (no site-packages).
.venv/bin/ruff check fabtune tests
.venv/bin/mypy
PY38=${PY38:-python3.8}
if "$PY38" -c "" 2>/dev/null; then
  PYTHONDONTWRITEBYTECODE=1 "$PY38" -I -S - "$COLLECTION/plugins" <<'PY'
import pathlib
import sys

plugins = pathlib.Path(sys.argv[1])
for path in sorted(plugins.glob("*/*.py")):
    compile(path.read_text(), str(path), "exec")
sys.path.insert(0, str(plugins / "module_utils"))
import fabric_apply  # noqa: E402,F401 (with fabric_desired, fabric_host, fabric_qos_backend)
PY
fi
.venv/bin/lint-imports  # the import contract in pyproject.toml: the product does not import the emulator
.venv/bin/ansible-lint --profile production "$COLLECTION/roles" "$COLLECTION/playbooks"
# Three workers (integration and fault tests mostly wait on SSH, Ansible and timers; a fourth made
# applies outlast 60 s revert deadlines), one test file each, handed out in the order
# tests/conftest.py sorts them (the whole tunes first), not by their number of tests.
.venv/bin/pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=40 "$@"
