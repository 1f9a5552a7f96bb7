"""The RDMA port counters of congestion control, read from sysfs around a benchmark.

mlx5 keeps them per port in ``/sys/class/infiniband/<dev>/ports/<port>/hw_counters/`` (kernel
``drivers/infiniband/hw/mlx5/counters.c``; one decimal value per file): CNPs sent as notification
point (``np_cnp_sent``) and handled as reaction point (``rp_cnp_handled``), ECN-marked RoCE packets
received (``np_ecn_marked_roce_packets``), packets received out of sequence (``out_of_sequence``).
``ethtool -S`` does not show them. A playbook reads them with ``grep -s -H . FILE...`` (one
``FILE:VALUE`` line per counter the driver has; a counter it lacks is left out, not an error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

# the tasks that read the counters around a benchmark in bench_measure.yml (bench_ib_write_bw.yml:
# fabtune.perf.pairs.BEFORE_TASK, which also starts its servers, and AFTER_TASK, which first runs
# its clients and waits for its servers; its reads are its ``runs`` all the same)
READ_BEFORE, READ_AFTER = "Read counters before", "Read counters after"

HW_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence")
_LINE_RE = re.compile(r"^(?P<path>/\S+/hw_counters/(?P<name>[a-z0-9_]+)):(?P<value>\d+)\s*$")


def read_argv(device: str, port: int) -> list[str]:
    """The command line that prints one port's counters (no shell; ``-s``: a missing file is silent)."""
    base = PurePosixPath("/sys/class/infiniband") / device / "ports" / str(int(port)) / "hw_counters"
    return ["grep", "-s", "-H", ".", *(str(base / name) for name in HW_COUNTERS)]


def read_item(netdev: str, device: str, port: int) -> dict[str, Any]:
    """One loop item of the playbooks' hw counter reads: the netdev it is reported under, its argv."""
    return {"netdev": netdev, "argv": read_argv(device, port)}


def parse(text: str) -> dict[str, int]:
    """Counter name to value from the ``FILE:VALUE`` lines; other lines are ignored."""
    found = {}
    for line in text.splitlines():
        match = _LINE_RE.match(line.strip())
        if match and match["name"] in HW_COUNTERS:
            found[match["name"]] = int(match["value"])
    return found


def by_netdev(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """A looped read task's results as netdev to counters."""
    out: dict[str, dict[str, int]] = {}
    for item in results:
        loop_item = item.get("item")
        if isinstance(loop_item, Mapping) and loop_item.get("netdev"):
            out[str(loop_item["netdev"])] = parse(str(item.get("stdout", "")))
    return out


def deltas(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> dict[tuple[str, str], dict[str, int]]:
    """Per (host, netdev), the counters that moved, from the before and after task results per host."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for host, res in after.items():
        old = by_netdev(before.get(host, {}).get("results", []))
        for netdev, values in by_netdev(res.get("results", [])).items():
            changed = moved(old.get(netdev, {}), values)
            if changed:
                out[(host, netdev)] = changed
    return out


ETHTOOL, HW = "ethtool", "hw"  # the kinds of counter read, the first word of a read's id


def read_commands(netdevs: Sequence[str], hw_reads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One host's counter reads as one ``fabtune.fabric.fabric_run`` call's commands: ``ethtool -S``
    per netdev (the per-priority pause counters) and the hw_counters read per port (``read_item``);
    each id names the kind and the netdev (``ethtool eth2``, ``hw eth2``)."""
    found = [{"id": f"{ETHTOOL} {n}", "argv": ["ethtool", "-S", str(n)]} for n in dict.fromkeys(netdevs)]
    seen = set()
    for read in hw_reads:
        if read["netdev"] not in seen:
            seen.add(read["netdev"])
            found.append({"id": f"{HW} {read['netdev']}", "argv": [str(a) for a in read["argv"]]})
    return found


Loops = dict[str, dict[str, list[dict[str, Any]]]]
# Per host, each counter read's output by its id ("ethtool eth2", "hw eth2"): one fabric_run read.
Reads = dict[str, dict[str, str]]


def reads_of(results: Mapping[str, Mapping[str, Any]]) -> Reads:
    """A counter-read task's ``fabric_run`` results per host as each read's output by its id (a
    host whose reads did not run is left out; a read that printed nothing parses as no counter)."""
    found: Reads = {}
    for host, res in results.items():
        mine = {str(run["id"]): str(run.get("stdout", "")) for run in res.get("runs") or []
                if isinstance(run, Mapping) and "id" in run}
        if mine:
            found[host] = mine
    return found


def will_read(commands: Mapping[str, Sequence[Mapping[str, Any]]]) -> Reads:
    """What a run of ``commands`` (per host, fabric_run's ``{id, argv}``) will have read, with no
    output yet: planning the next run of the same Ansible run against it (``covers``)."""
    return {host: {str(cmd["id"]): "" for cmd in cmds} for host, cmds in commands.items()}


def covers(reads: Reads | None, wanted: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool:
    """Whether ``reads`` hold every read of ``wanted`` (per host, fabric_run commands ``{id, argv}``)."""
    if reads is None:
        return False
    return all(str(cmd["id"]) in reads.get(host, {}) for host, cmds in wanted.items() for cmd in cmds)


def as_loops(reads: Reads) -> tuple[Loops, Loops]:
    """Counter reads per host (``reads_of``), as the per-netdev loop results the parsers read:
    ethtool items ``{item: NETDEV, stdout}``, hw items ``{item: {netdev}, stdout}``."""
    ethtool: Loops = {}
    hw: Loops = {}
    for host, outputs in reads.items():
        ethtool[host], hw[host] = {"results": []}, {"results": []}
        for read_id, stdout in outputs.items():
            kind, _, netdev = read_id.partition(" ")
            if kind == ETHTOOL:
                ethtool[host]["results"].append({"item": netdev, "stdout": stdout})
            elif kind == HW:
                hw[host]["results"].append({"item": {"netdev": netdev}, "stdout": stdout})
    return ethtool, hw


def moved(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The counters of ``after`` that moved since ``before`` (those ``before`` has). A counter lower
    than before was reset in between (a driver reload, a reboot): it moved by its value since the
    reset, all that can be known of it."""
    found = {}
    for name, value in after.items():
        if name in before:
            delta = value - before[name] if value >= before[name] else value
            if delta:
                found[name] = delta
    return found
