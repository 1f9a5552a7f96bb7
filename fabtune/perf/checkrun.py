"""``fabtune check``: run every fabric check over an inventory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fabtune.errors import ParseError
from fabtune.hostpackages import check_tools
from fabtune.inventory import read_inventory
from fabtune.perf import checks, diagnose, nccl
from fabtune.perf.argv import NcclOptions
from fabtune.perf.checks import CheckResult
from fabtune.perf.deadline import timed_out
from fabtune.perf.fabric import HostView, read_hosts


def affinity_results(views: Mapping[str, HostView]) -> list[CheckResult]:
    """GPU i is served by NIC i (rail-optimised): each such pair must share a PCIe switch."""
    results: list[CheckResult] = []
    for host, view in sorted(views.items()):
        if view.topo is None:
            results.append(
                CheckResult(
                    "affinity",
                    host,
                    "fail",
                    "nvidia-smi topo -m gave no matrix",
                    view.raw.get("topo", "")[:200],
                )
            )
            continue
        gpus = [c for c in view.topo.columns if c.startswith("GPU")]
        pairs = [(g, view.rails[g % len(view.rails)].device) for g in range(len(gpus))] if view.rails else []
        try:
            results += checks.affinity(host, view.topo, pairs, view.raw.get("topo", ""))
        except (KeyError, ParseError) as err:
            results.append(CheckResult("affinity", host, "fail", f"cannot read GPU-NIC distance: {err}"))
    return results


def static_checks(views: Mapping[str, HostView]) -> list[CheckResult]:
    """Everything that needs no traffic: affinity, GID index, links, subnet manager."""
    results = affinity_results(views)
    ethernet = [h for h, v in views.items() if v.rails and v.rails[0].link_layer == "Ethernet"]
    if ethernet:
        devices = [r.device for r in views[ethernet[0]].rails]
        tables = {h: g for h in ethernet if (g := views[h].gids) is not None}
        results += checks.gid_index(tables, devices)
    stats = {h: p for h, v in views.items() if (p := v.ports) is not None}
    mtus = {h: {r.netdev: r.mtu for r in v.rails} for h, v in views.items()}
    results += checks.links(stats, mtus)
    for host, view in sorted(views.items()):
        if view.sminfo_rc is not None:
            results.append(checks.subnet_manager(host, view.raw.get("sminfo", ""), view.sminfo_rc))
    return results


def transport_checks(
    inventory: Path,
    hosts: Sequence[str],
    gpus: int,
    oob_interface: str | None,
    deadline_s: int | None = None,
    *,
    views: Mapping[str, HostView] | None = None,
) -> list[CheckResult]:
    """A short all_reduce with NCCL_DEBUG=INFO, judged by host (``fabtune.perf.diagnose``).

    The same judgement as the tuning run's preflight: a failed job fails the hosts at fault, named
    with the evidence (the NCCL log line, the ``show_gids`` row).
    """
    run = nccl.run(
        inventory,
        hosts,
        NcclOptions(min_bytes="64M", max_bytes="64M", gpus_per_process=gpus, iters=5, warmup_iters=1),
        {},
        oob_interface=oob_interface,
        deadline_s=deadline_s,
    )
    failed = run.rc != 0 or run.result is None
    why = str(run.error) if timed_out(run.rc) else diagnose.failure_line(run.rc, run.output)
    return diagnose.transport_results(
        hosts, run.output, failed=failed, why=why, gids=diagnose.gid_tables(views or {})
    )


def run_checks(
    inventory: Path, *, with_nccl: bool = True, oob_interface: str | None = None
) -> list[CheckResult]:
    """Every check over the inventory's hosts: first that each host has the tools they run (a missing
    one fails naming the host, the tool and its package); the others only when every tool is there."""
    info = read_inventory(inventory)
    tools = check_tools(inventory, info, with_nccl=with_nccl)
    if any(r.verdict == "fail" for r in tools):
        skipped = CheckResult("fabric", "*", "warn", "other checks not run: install the missing tools first")
        return [*tools, skipped]
    views = read_hosts(inventory)
    results = static_checks(views)
    if with_nccl and views:
        first = next(iter(views.values()))
        gpus = len([c for c in first.topo.columns if c.startswith("GPU")]) if first.topo else 1
        results += transport_checks(
            inventory, sorted(views), gpus, oob_interface, info.bench_timeout_s, views=views
        )
    return [*tools, *results]
