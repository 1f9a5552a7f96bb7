"""Thin, typed wrappers over the system commands the testbed drives (argv lists, never a shell)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from fabtune.errors import TestbedError


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise TestbedError naming it and its stderr."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as err:
        raise TestbedError(f"{argv[0]} is not installed (run scripts/install.sh)") from err
    except subprocess.TimeoutExpired as err:
        raise TestbedError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from err
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip`` (in ``netns`` when given)."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return run([*prefix, *args], check=check)


def ip_json(*args: str, netns: str | None = None) -> list[dict[str, Any]]:
    """Run ``ip -j`` and return its JSON (an empty list when the object does not exist)."""
    proc = ip("-j", *args, netns=netns, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    data: list[dict[str, Any]] = json.loads(proc.stdout)
    return data


def netns_list() -> list[str]:
    """Names of all named network namespaces."""
    return [entry["name"] for entry in ip_json("netns", "list")]


def link_names() -> list[str]:
    """Names of all links of the controller's namespace."""
    return [entry["ifname"] for entry in ip_json("link", "show")]
