# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""What an mlx5 host exposes in sysfs and configfs: its RDMA ports and their knob files.

Functions take ``root`` (``/`` on a host) so tests point them at a temporary tree. Paths are the
MLNX_OFED/DOCA driver's (formats.md section 6): ``/sys/class/net/IF/ecn/roce_{np,rp}/enable/P``,
``.../ecn/roce_np/cnp_dscp``, ``.../cnp_802p_prio``, and rdma_cm's configfs
``/sys/kernel/config/rdma_cm/DEV/ports/P/default_roce_{tos,mode}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

PRIORITIES = 8
ROCE_MODE_TEXT = {1: "IB/RoCE v1", 2: "RoCE v2"}
ROCE_MODE_NUMBER = {"IB/RoCE v1": 1, "RoCE v1": 1, "RoCE v2": 2, "1": 1, "2": 2}


def path(root: str, *parts: str) -> str:
    """``root`` joined with absolute ``parts`` (``path('/tmp/x', '/sys/class')``)."""
    return str(Path(root).joinpath(*[p.lstrip("/") for p in parts]))


def read(root: str, name: str, default: str | None = None) -> str | None:
    """The stripped text of a sysfs/configfs file, or ``default`` when it cannot be read."""
    try:
        return Path(path(root, name)).read_text().strip()
    except OSError:
        return default


def _listdir(root: str, name: str) -> list[str]:
    try:
        return sorted(entry.name for entry in Path(path(root, name)).iterdir())
    except OSError:
        return []


def rdma_ports(root: str = "/") -> list[dict[str, Any]]:
    """Every RDMA port: ``[{dev, port, netdev, link_layer, state, rate, fw}]`` sorted by dev, port.

    The netdev comes from the port's GID table (``gid_attrs/ndevs/0``, RoCE) or the PCI
    function's ``device/net`` directory (IPoIB on InfiniBand).
    """
    out: list[dict[str, Any]] = []
    for dev in _listdir(root, "/sys/class/infiniband"):
        base = f"/sys/class/infiniband/{dev}"
        netdevs = _listdir(root, base + "/device/net")
        for port in _listdir(root, base + "/ports"):
            pbase = f"{base}/ports/{port}"
            netdev = read(root, pbase + "/gid_attrs/ndevs/0") or (netdevs[0] if netdevs else None)
            out.append({
                "dev": dev, "port": int(port), "netdev": netdev,
                "link_layer": read(root, pbase + "/link_layer", "unknown"),
                "state": (read(root, pbase + "/state", "") or "").split(":")[-1].strip(),
                "rate": read(root, pbase + "/rate"),
                "fw": read(root, base + "/fw_ver"),
            })
    return out


def netdev_split(root: str = "/") -> tuple[list[str], list[str]]:
    """``(roce_netdevs, other_netdevs)`` of the host."""
    roce: list[str] = sorted(
        {p["netdev"] for p in rdma_ports(root) if p["netdev"] and p["link_layer"] == "Ethernet"})
    other = sorted(set(_listdir(root, "/sys/class/net")) - set(roce))
    return roce, other


def port_of(root: str, netdev: str) -> tuple[str, int] | None:
    """The ``(dev, port)`` RDMA port of a netdev, or None."""
    for item in rdma_ports(root):
        if item["netdev"] == netdev:
            return item["dev"], item["port"]
    return None


def ecn_path(netdev: str, point: str, prio: int) -> str:
    return f"/sys/class/net/{netdev}/ecn/roce_{point}/enable/{prio:d}"


def cm_path(dev: str, port: int, name: str) -> str:
    return f"/sys/kernel/config/rdma_cm/{dev}/ports/{port:d}/default_roce_{name}"


def cc_knob_paths(netdev: str, nic: Mapping[str, Any]) -> dict[str, str]:
    """``{path: value}`` sysfs writes for the congestion-control knobs of one desired NIC entry."""
    out = {}
    ecn = nic.get("ecn") or {}
    for point in ("np", "rp"):
        if point in ecn:
            for prio in range(PRIORITIES):
                out[ecn_path(netdev, point, prio)] = "1" if prio in ecn[point] else "0"
    if nic.get("cnp_dscp") is not None:
        out[f"/sys/class/net/{netdev}/ecn/roce_np/cnp_dscp"] = str(nic["cnp_dscp"])
    if nic.get("cnp_prio") is not None:
        out[f"/sys/class/net/{netdev}/ecn/roce_np/cnp_802p_prio"] = str(nic["cnp_prio"])
    return out


def tos_knob_paths(dev: str, port: int, nic: Mapping[str, Any]) -> dict[str, str]:
    """``{path: value}`` configfs writes for rdma_cm's default ToS and RoCE mode."""
    out = {}
    if nic.get("roce_tos") is not None:
        out[cm_path(dev, port, "tos")] = str(nic["roce_tos"])
    if nic.get("roce_mode") is not None:
        out[cm_path(dev, port, "mode")] = ROCE_MODE_TEXT[int(nic["roce_mode"])]
    return out


def read_nic_sysfs(root: str, netdev: str) -> dict[str, Any]:
    """The sysfs/configfs NIC knobs of one netdev in desired-state shape (absent ones left out)."""
    nic: dict[str, Any] = {}
    mtu = read(root, f"/sys/class/net/{netdev}/mtu")
    if mtu is not None:
        nic["mtu"] = int(mtu)
    ecn = {}
    for point in ("np", "rp"):
        values = [read(root, ecn_path(netdev, point, p)) for p in range(PRIORITIES)]
        if all(v is not None for v in values):
            ecn[point] = [p for p, v in enumerate(values) if v == "1"]
    if ecn:
        nic["ecn"] = ecn
    for key, name in (("cnp_dscp", "cnp_dscp"), ("cnp_prio", "cnp_802p_prio")):
        value = read(root, f"/sys/class/net/{netdev}/ecn/roce_np/{name}")
        if value is not None and value.isdigit():
            nic[key] = int(value)
    where = port_of(root, netdev)
    if where:
        tos = read(root, cm_path(where[0], where[1], "tos"))
        mode = read(root, cm_path(where[0], where[1], "mode"))
        if tos is not None and tos.isdigit():
            nic["roce_tos"] = int(tos)
        if mode in ROCE_MODE_NUMBER:
            nic["roce_mode"] = ROCE_MODE_NUMBER[mode]
    return nic


def gids(root: str, dev: str, port: int) -> tuple[list[dict[str, Any]], int | None]:
    """The non-empty GIDs of a port: ``[{index, gid, type, netdev}]``, and the RoCEv2 IPv4 index."""
    base = f"/sys/class/infiniband/{dev}/ports/{port:d}"
    out: list[dict[str, Any]] = []
    for name in _listdir(root, base + "/gids"):
        gid = read(root, f"{base}/gids/{name}")
        if not gid or gid.replace(":", "").strip("0") == "":
            continue
        out.append({"index": int(name), "gid": gid,
                    "type": read(root, f"{base}/gid_attrs/types/{name}"),
                    "netdev": read(root, f"{base}/gid_attrs/ndevs/{name}")})
    out.sort(key=lambda g: g["index"])
    v2_ipv4 = [g["index"] for g in out
               if g["type"] == "RoCE v2" and g["gid"].startswith("0000:0000:0000:0000:0000:ffff:")]
    return out, (v2_ipv4[0] if v2_ipv4 else None)


def parse_sminfo(text: str) -> dict[str, Any] | None:
    """``sminfo`` output: ``{lid, guid, priority, state}`` or None."""
    words = text.split()
    try:
        return {"lid": int(words[words.index("lid") + 1]),
                "guid": words[words.index("guid") + 1].rstrip(","),
                "priority": int(words[words.index("priority") + 1]),
                "state": words[words.index("state") + 2]}
    except (ValueError, IndexError):
        return None
