"""What fabtune reads from an Ansible inventory itself: the fabric's name and type, the hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.errors import ConfigError


@dataclass(frozen=True)
class InventoryInfo:
    """The facts about an inventory that fabtune needs before any play runs."""

    path: Path
    name: str
    fabric: str
    hosts: tuple[str, ...]
    sm_hosts: tuple[str, ...]
    launcher: str
    oob_interface: str | None
    bench_timeout_s: int | None = None  # fabtune_bench_timeout_s: every benchmark launch's deadline


def _ansible_inventory(path: Path) -> dict[str, Any]:
    exe = Path(sys.executable).parent / "ansible-inventory"
    proc = subprocess.run([str(exe) if exe.exists() else "ansible-inventory", "-i", str(path), "--list"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise ConfigError(str(path), [f"ansible-inventory cannot read it: {proc.stderr.strip()[:300]}"])
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _group_hosts(data: dict[str, Any], group: str) -> list[str]:
    entry = data.get(group, {})
    hosts = list(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts += _group_hosts(data, child)
    return sorted(set(hosts))


def read_inventory(path: Path) -> InventoryInfo:
    """Read an inventory through ``ansible-inventory`` (any format Ansible reads).

    The fabric's name is ``fabtune_fabric_name`` (or a testbed's ``fabtune_testbed``), else the
    file's stem; its type is ``fabtune_fabric`` (``roce``/``ib``), else the ``roce``/``ib`` group.

    Raises:
        ConfigError: when the file is missing, unreadable, empty or names no fabric type.
    """
    if not path.is_file():
        raise ConfigError("inventory", [f"{path}: no such file"])
    data = _ansible_inventory(path)
    hosts = _group_hosts(data, "all")
    if not hosts:
        raise ConfigError(str(path), ["hosts: the inventory has no hosts"])
    hostvars = data.get("_meta", {}).get("hostvars", {})
    first = hostvars.get(hosts[0], {})
    name = str(first.get("fabtune_fabric_name") or first.get("fabtune_testbed") or path.stem)
    fabric = str(first.get("fabtune_fabric") or ("ib" if _group_hosts(data, "ib") else "roce"))
    if fabric not in ("roce", "ib"):
        raise ConfigError(str(path), [f"fabtune_fabric: {fabric!r} must be roce or ib"])
    return InventoryInfo(path, name, fabric, tuple(hosts), tuple(_group_hosts(data, "subnet_managers")),
                         str(first.get("fabtune_launcher", "mpirun")), first.get("fabtune_oob_interface"),
                         bench_timeout(path, first.get("fabtune_bench_timeout_s")))


BENCH_TIMEOUT = "fabtune_bench_timeout_s"
MAX_BENCH_TIMEOUT_S = 86400


def bench_timeout(path: Path, value: Any) -> int | None:
    """``fabtune_bench_timeout_s``: seconds, a whole number from 10 to a day; None when not set.

    Raises:
        ConfigError: naming the variable and its value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise ConfigError(str(path), [f"{BENCH_TIMEOUT}: {value!r} must be a whole number of seconds"])
    seconds = int(value)
    if not 10 <= seconds <= MAX_BENCH_TIMEOUT_S:
        raise ConfigError(str(path), [f"{BENCH_TIMEOUT}: {seconds} must be from 10 to {MAX_BENCH_TIMEOUT_S}"])
    return seconds
