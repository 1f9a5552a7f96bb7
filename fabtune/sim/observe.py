"""Build the fabric model's input from emulated state: what a benchmark on a host would "see".

Inside a testbed host (the emulated benchmarks):

* :func:`local_host` reads this host's NICs through ``NodeState.inside_host()``, ``/etc/nccl.conf``
  and the process environment (``NCCL_*`` variables override ``nccl.conf``, as in NCCL, which
  loads the file with ``setenv(..., overwrite=0)``);
* :func:`fabric_view` reads the switches and the subnet manager from the shared fabric directory
  ``/var/lib/fabtune-fabric/fabric.json`` (``sm.json`` beside it, when the SM publishes its
  state, overrides the ``"sm"`` entry).

From the controller, :func:`controller_host` reads one host's directory (``hosts/H/`` with the
overlay upper for ``/etc/nccl.conf`` and ``ip -n NETNS`` for kernel attributes);
``fabtune.testbed.oracle.controller_fabric`` reads a whole testbed with it, for the oracle.

Every config is JSON-serialisable (:func:`to_json` / :func:`host_from_json` ...): hosts exchange
them during the benchmarks' out-of-band handshake.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from fabtune.formats import parse_nccl_conf
from fabtune.sim.model.config import (
    DEFAULT_DSCP2PRIO,
    Distance,
    FabricConfig,
    FabricKind,
    GidEntry,
    GidScope,
    GidVersion,
    HostConfig,
    LinkLayer,
    NicConfig,
    SmConfig,
    SwitchConfig,
    Trust,
)
from fabtune.sim.node import FABRIC_DIR, GID_TYPE_V1, ZERO_GID, NicDescription, NodeState, pcie_distance

NCCL_CONF = Path("/etc/nccl.conf")
FRONTEND_IFNAME = "eth0"
FRONTEND_GBPS = 50.0
IB_MTU = 4096
IPV4_GID_PREFIX = "0000:0000:0000:0000:0000:ffff:"


@dataclasses.dataclass(frozen=True)
class FabricView:
    """What ``fabric.json`` (and ``sm.json``) say about the rack's shared parts."""

    kind: FabricKind
    switch: SwitchConfig
    sm: SmConfig
    seed: int
    hosts: tuple[str, ...]
    addresses: dict[str, str]
    job_nodes: int = 0  # the nodes a collective runs as (0: the hosts taking part)

    def host_index(self, name: str) -> int:
        """Index of host ``name`` in the testbed (the model's host index; -1 when unknown)."""
        return self.hosts.index(name) if name in self.hosts else -1


# --------------------------------------------------------------------------- NCCL environment


def read_nccl_conf(path: Path = NCCL_CONF) -> dict[str, str]:
    """``KEY=value`` lines of an ``nccl.conf`` (``#`` comments and blank lines skipped), read by the
    collection's parser (``fabtune.formats``): the emulated NCCL reads the file fabtune writes."""
    return parse_nccl_conf(path.read_text()) if path.is_file() else {}


def nccl_env(conf: Mapping[str, str], environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``NCCL_*`` settings NCCL sees: the environment, then ``nccl.conf`` for the rest."""
    merged = {k: v for k, v in conf.items() if k.startswith("NCCL_")}
    merged.update({k: v for k, v in environ.items() if k.startswith("NCCL_")})
    return tuple(sorted(merged.items()))


# --------------------------------------------------------------------------- NICs and hosts


def _gids(state: NodeState, nic: NicDescription) -> tuple[GidEntry, ...]:
    """The leading non-zero GID entries of a port as the model's ``GidEntry`` list (a GID whose
    netdev is the port's VLAN device carries its VLAN id)."""
    out: list[GidEntry] = []
    for gid in state.gid_table(nic.dev):
        if gid.gid == ZERO_GID:
            break
        version: GidVersion = "v1" if gid.type in ("", GID_TYPE_V1) else "v2"
        scope: GidScope = "ipv4" if gid.gid.startswith(IPV4_GID_PREFIX) else "link-local"
        tagged = nic.vlan is not None and gid.ndev == nic.roce_netdev
        out.append(GidEntry(version, scope, nic.vlan if tagged else None))
    return tuple(out)


def _gpu_distance(state: NodeState, nic: NicDescription, index: int) -> Distance:
    """PCIe distance between a NIC and the GPU that uses it (GPU ``index % gpus``)."""
    gpus = state.node.gpus
    if not gpus:
        return "SYS"
    gpu = gpus[index % len(gpus)]
    return cast(Distance, pcie_distance(gpu.numa, gpu.pcie_switch, nic.numa, nic.pcie_switch,
                                        nic.bridges))


def _roce_mode(state: NodeState, dev: str) -> int:
    return 1 if state.get_roce_mode(dev) == GID_TYPE_V1 else 2


def nic_config(state: NodeState, nic: NicDescription, index: int) -> NicConfig:
    """The model's view of one NIC port, read from its emulated driver state.

    Args:
        state: The host's node state.
        nic: The NIC (from ``node.json``).
        index: Its position in ``node.json`` (pairs it with GPU ``index % gpus``).
    """
    netdev = nic.netdev
    base = NicConfig(
        name=nic.dev, netdev=netdev, link_layer=cast(LinkLayer, nic.link_layer),
        rate_gbps=float(nic.rate_gbps), gids=_gids(state, nic),
        gpu_distance=_gpu_distance(state, nic, index),
    )
    if nic.is_ib:
        return dataclasses.replace(base, mtu=IB_MTU)
    ets = state.get_ets(netdev)
    return dataclasses.replace(
        base,
        mtu=state.mtu(netdev),
        trust=cast(Trust, state.get_trust(netdev)),
        dscp2prio=tuple(state.get_dscp2prio(netdev)),
        pfc=tuple(bool(v) for v in state.get_pfc(netdev).enabled),
        prio_tc=tuple(ets.prio_tc),
        ets=tuple(ets.tc_bw),
        ecn_np=tuple(bool(v) for v in state.get_ecn(netdev, "np")),
        ecn_rp=tuple(bool(v) for v in state.get_ecn(netdev, "rp")),
        cnp_dscp=state.get_cnp_dscp(netdev),
        cnp_prio=state.get_cnp_prio(netdev),
        roce_tos=state.get_roce_tos(nic.dev),
        roce_mode=_roce_mode(state, nic.dev),
        egress_qos_map=nic.egress_qos_map,
    )


def host_config(state: NodeState, env: tuple[tuple[str, str], ...] = ()) -> HostConfig:
    """The model's view of one host: every NIC, its GPUs and the NCCL environment."""
    node = state.node
    nics = tuple(nic_config(state, n, i) for i, n in enumerate(node.nics))
    return HostConfig(name=node.hostname, nics=nics, gpus=len(node.gpus), nccl_env=env,
                      frontend_ifname=FRONTEND_IFNAME, frontend_gbps=FRONTEND_GBPS)


def local_host(environ: Mapping[str, str] | None = None, state: NodeState | None = None,
               conf: Path = NCCL_CONF) -> HostConfig:
    """This host as a benchmark running on it sees it (state, ``nccl.conf``, environment)."""
    env = nccl_env(read_nccl_conf(conf), os.environ if environ is None else environ)
    return host_config(state or NodeState.inside_host(), env)


# --------------------------------------------------------------------------- the fabric


def _prio_flags(prios: Any) -> tuple[bool, ...]:
    on = {int(p) for p in prios or ()}
    return tuple(p in on for p in range(8))


def nic_from_knobs(port: NicConfig, knobs: Mapping[str, Any]) -> NicConfig:
    """The model's port with one NIC's knobs as a desired-state or facts tree holds them
    (``nics.<netdev>``): for model-backed stand-ins of a rack (bench/projection.py, the unit tests'
    model rack) that keep state as trees instead of as emulated hosts."""
    dmap = list(DEFAULT_DSCP2PRIO)
    for dscp, prio in (knobs.get("dscp2prio") or {}).items():
        dmap[int(dscp)] = int(prio)
    ecn = knobs.get("ecn") or {}
    return dataclasses.replace(
        port, trust=knobs.get("trust", port.trust), dscp2prio=tuple(dmap), pfc=_prio_flags(knobs.get("pfc")),
        ecn_np=_prio_flags(ecn.get("np")), ecn_rp=_prio_flags(ecn.get("rp")),
        cnp_dscp=int(knobs.get("cnp_dscp", port.cnp_dscp)),
        cnp_prio=int(knobs.get("cnp_prio", port.cnp_prio)),
        roce_tos=int(knobs.get("roce_tos", port.roce_tos)), mtu=int(knobs.get("mtu", port.mtu)),
        roce_mode=int(knobs.get("roce_mode", port.roce_mode)),
    )  # fmt: skip


def merge_knobs(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A port's knobs after an apply of ``new``: maps (dscp2prio, ecn) merged per key, the other
    knobs replaced (as the collection's ``fabric_apply.merge_persisted`` does)."""
    out = copy.deepcopy(dict(old))
    for key, value in new.items():
        if key in ("dscp2prio", "ecn") and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **copy.deepcopy(value)}
        else:
            out[key] = copy.deepcopy(value)
    return out


def applied_tree(old: Mapping[str, Any], tree: Mapping[str, Any], exact: bool = False) -> dict[str, Any]:
    """A host's state tree after an apply of ``tree``: each NIC's knobs merged (:func:`merge_knobs`),
    or, ``exact`` (a rollback to a snapshot), ``tree`` as it is."""
    if exact:
        return copy.deepcopy(dict(tree))
    nics = {dev: merge_knobs((old.get("nics") or {}).get(dev, {}), knobs)
            for dev, knobs in (tree.get("nics") or {}).items()}
    return {**copy.deepcopy(dict(tree)), "nics": nics}


def switch_config(raw: Mapping[str, Any], hosts: int) -> SwitchConfig:
    """``SwitchConfig`` from ``fabric.json``'s ``"switch"`` entry."""
    per_leaf = int(raw.get("nodes_per_leaf", 32))
    return SwitchConfig(
        pfc=_prio_flags(raw.get("pfc_priorities")),
        trust=cast(Trust, str(raw.get("trust", "dscp"))),
        ecn=_prio_flags(raw.get("ecn_priorities")),
        nodes_per_leaf=per_leaf,
        leaves=max(1, -(-hosts // max(per_leaf, 1))),
        oversubscription=float(raw.get("oversubscription", 1.0)),
        adaptive_routing=bool(raw.get("adaptive_routing", False)),
        dscp2prio=_switch_dscp_map(raw.get("dscp2prio") or {}),
        spines=int(raw.get("spines", SwitchConfig.spines)),
    )


def _switch_dscp_map(entries: Mapping[str, Any]) -> tuple[int, ...]:
    """The switches' 64-entry DSCP map: the default (``dscp >> 3``) with ``fabric.json``'s entries."""
    over = {int(d): int(p) for d, p in entries.items()}
    return tuple(over.get(d, d >> 3) for d in range(64))


def sm_config(raw: Mapping[str, Any] | None) -> SmConfig:
    """``SmConfig`` from the ``"sm"`` entry of ``fabric.json`` or from ``sm.json``."""
    if not raw:
        return SmConfig()
    return SmConfig(
        routing_engine=str(raw.get("routing_engine", "minhop")),
        adaptive_routing=bool(raw.get("adaptive_routing", False)),
        ar_sl_mask=int(raw.get("ar_sl_mask", 0xFFFF)),
        qos=bool(raw.get("qos", False)),
        lmc=int(raw.get("lmc", 0)),
        flavor=str(raw.get("flavor", "upstream")),
        sl2vl=tuple(int(v) for v in raw.get("sl2vl") or ()),
    )


def fabric_view(fabric_dir: Path = FABRIC_DIR) -> FabricView:
    """Read ``fabric.json`` (and ``sm.json`` when the SM has published one)."""
    doc: dict[str, Any] = json.loads((fabric_dir / "fabric.json").read_text())
    addresses = {str(k): str(v) for k, v in dict(doc.get("host_addresses") or {}).items()}
    sm_raw = doc.get("sm")
    sm_file = fabric_dir / "sm.json"
    if sm_file.is_file():
        sm_raw = json.loads(sm_file.read_text())
    hosts = tuple(addresses)
    job_nodes = int(doc.get("job_nodes") or 0)
    return FabricView(
        kind=cast(FabricKind, str(doc.get("fabric", "roce"))),
        switch=switch_config(doc.get("switch") or {},
                             max(len(hosts) or int(doc.get("hosts", 1)), job_nodes)),
        sm=sm_config(sm_raw), seed=int(doc.get("seed", 0)), hosts=hosts, addresses=addresses,
        job_nodes=job_nodes,
    )


def scaled_job(hosts: tuple[HostConfig, ...], nodes: int) -> tuple[HostConfig, ...]:
    """The job as ``nodes`` nodes: the real hosts, then copies of them in turn (named ``H+k``) up to
    ``nodes``, so a collective over a few real hosts runs at the scale of the rack to come."""
    if not hosts or nodes <= len(hosts):
        return hosts
    extra = tuple(dataclasses.replace(hosts[i % len(hosts)], name=f"{hosts[i % len(hosts)].name}+{i}")
                  for i in range(len(hosts), nodes))
    return hosts + extra


def fabric_config(view: FabricView, hosts: tuple[HostConfig, ...]) -> FabricConfig:
    """The model's rack from the fabric view and the hosts taking part."""
    return FabricConfig(fabric=view.kind, hosts=hosts, switch=view.switch, sm=view.sm,
                        seed=view.seed)


def controller_host(host_dir: Path, netns: str | None) -> HostConfig:
    """One testbed host read from the controller (``hosts/H``; nccl.conf from the overlay upper)."""
    state = NodeState.on_controller(host_dir, netns)
    conf = read_nccl_conf(host_dir / "upper" / "etc" / "nccl.conf")
    return host_config(state, nccl_env(conf, {}))


# --------------------------------------------------------------------------- JSON


def to_json(obj: NicConfig | HostConfig | SwitchConfig | SmConfig | FabricConfig) -> dict[str, Any]:
    """A JSON-able dict of a model config (tuples become lists)."""
    return cast(dict[str, Any], json.loads(json.dumps(dataclasses.asdict(obj))))


def nic_from_json(raw: Mapping[str, Any]) -> NicConfig:
    """Rebuild a ``NicConfig`` from :func:`to_json`'s dict."""
    kwargs = dict(raw)
    kwargs["gids"] = tuple(GidEntry(g["version"], g["scope"], g.get("vlan")) for g in raw.get("gids", ()))
    for key, value in raw.items():
        if isinstance(value, list) and key != "gids":
            kwargs[key] = tuple(value)
    return NicConfig(**kwargs)


def host_from_json(raw: Mapping[str, Any]) -> HostConfig:
    """Rebuild a ``HostConfig`` from :func:`to_json`'s dict."""
    return HostConfig(
        name=str(raw["name"]), nics=tuple(nic_from_json(n) for n in raw["nics"]),
        gpus=int(raw["gpus"]), nccl_env=tuple((str(k), str(v)) for k, v in raw["nccl_env"]),
        frontend_ifname=str(raw["frontend_ifname"]), frontend_gbps=float(raw["frontend_gbps"]),
    )


def fabric_from_json(raw: Mapping[str, Any]) -> FabricConfig:
    """Rebuild a ``FabricConfig`` from :func:`to_json`'s dict."""
    sw: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw["switch"].items()}
    return FabricConfig(
        fabric=raw["fabric"], hosts=tuple(host_from_json(h) for h in raw["hosts"]),
        switch=SwitchConfig(**sw), sm=sm_config(raw["sm"]), seed=int(raw["seed"]),
    )
