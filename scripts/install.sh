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

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    PYTHON=/usr/bin/python3.11
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
