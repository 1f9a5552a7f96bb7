#!/usr/bin/env bash
# The whole test suite: lint, types, unit and testbed integration tests. Needs root (the testbed
# builds network namespaces) and scripts/install.sh run first.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check fabtune tests
.venv/bin/mypy
.venv/bin/lint-imports  # the import contract in pyproject.toml: the product does not import the emulator
COLLECTION=fabtune/content/ansible_collections/fabtune/fabric
.venv/bin/ansible-lint --profile production "$COLLECTION/roles" "$COLLECTION/playbooks"
# Three workers (integration and fault tests mostly wait on SSH, Ansible and timers; a fourth made
# applies outlast 60 s revert deadlines), one test file each.
.venv/bin/pytest -q -n 3 --dist loadfile --durations=40 "$@"
