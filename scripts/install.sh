#!/usr/bin/env bash
# Install everything fabtune needs on a Debian 12 machine: system packages, then a virtualenv
# (.venv) with fabtune and its development tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

mapfile -t packages < <(grep -vE '^\s*(#|$)' packages/debian.txt)
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${packages[@]}"

# The venv's Python: $PYTHON where set, else Debian 12's own Python 3.11 (the python3 package
# above), else the first python3 on PATH that is 3.11. Debian builds its interpreter with PGO and
# LTO, libpython linked into the executable; a self-built one (pyenv's default: no PGO, a shared
# libpython), first on PATH on many developer machines, runs the controller's work, Ansible's
# included, slower by about a fifth (docs/benchmarks.md).
is_311() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; }
if [ -z "${PYTHON:-}" ]; then
    for candidate in /usr/bin/python3.11 python3; do
        if is_311 "$candidate"; then PYTHON=$candidate; break; fi
    done
fi
if [ -z "${PYTHON:-}" ] || ! is_311 "$PYTHON"; then
    echo "install.sh: no Python 3.11 found (PYTHON=${PYTHON:-unset}); set PYTHON to one" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# Bytecode for the checkout's own modules, as pip writes it for an installed wheel: every CLI command
# and every emulated tool on the testbed's hosts imports fabtune anew, and where the environment
# sets PYTHONDONTWRITEBYTECODE nothing else writes it. Python ignores a .pyc older than its source.
# Not the collection (fabtune/content): its files are shipped as they are.
.venv/bin/python -m compileall -q -x '/content/' fabtune
echo "fabtune installed: $(.venv/bin/fabtune --version)"
