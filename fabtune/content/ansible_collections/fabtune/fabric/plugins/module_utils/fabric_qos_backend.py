# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""Read and change a port's QoS (trust, DSCP map, PFC, ETS) through ``mlnx_qos`` or iproute2 ``dcb``.

Pure helpers: parsers of the tools' output and builders of argv lists. The caller runs the
commands (``module.run_command``), so everything here is testable without a host.
QoS state in the desired-state shape: ``{trust, dscp2prio (only under dscp trust), pfc (list of
priorities with PFC on), prio_tc, tsa, tcbw}``.

Trust with ``dcb``, on every iproute2 release that has ``dcb app`` (5.12 and later): the DSCP APP
entries carry it. The mlx5 driver switches the port to DSCP trust when the first DSCP APP entry
is added and back to PCP when the last is deleted (``mlx5e_dcbnl_ieee_setapp``/``_delapp`` in
drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c), so trust ``dscp`` is written as the DSCP
map's entries (``dcb app add``), trust ``pcp`` by deleting them (``dcb app flush ... dscp-prio``)
and trust is read from their presence. ``dcb apptrust`` (iproute2 6.2 and later; Debian 12 ships
6.1, which answers ``Object "apptrust" is unknown``) is not used: ``mlx5e_dcbnl_ops`` has no
``dcbnl_getapptrust``/``dcbnl_setapptrust``, so the kernel answers EOPNOTSUPP on mlx5 whatever
the iproute2 release. DSCP entries are changed with ``add``, not ``replace``: on mlx5 the add
already replaces the DSCP's old entry, and ``replace``'s second step (deleting the old entry)
gets ENOENT. A ``dcb`` older than 5.12 has no ``app`` object: :func:`dcb_problem` names it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

try:
    from ansible_collections.fabtune.fabric.plugins.module_utils import fabric_formats
except ImportError:  # /usr/local/lib/fabtune beside fabtune-revert (fabric_apply's fallback)
    import fabric_formats  # type: ignore[import-not-found,no-redef]

PRIORITIES = 8
BACKENDS = ("mlnx_qos", "dcb")
DSCP_COUNT = 64
DCB_APP_SINCE = (5, 12)
"""The iproute2 release that added ``dcb app`` (its ``dcb/dcb_app.c``)."""
DCB_VERSION_ARGV = ["dcb", "-V"]
_DCB_VERSION_RE = re.compile(r"iproute2-(\d+)\.(\d+)(?:\.(\d+))?")



class QosError(Exception):
    """Tool output that does not say what the port's QoS state is."""


def parse_mlnx_qos(text: str) -> dict[str, Any]:
    """The QoS state from ``mlnx_qos -i IF -a`` output (parsed by ``fabric_formats``).

    Priorities no printed TC lists are in TC 0; a TC without an ETS share (strict) has 0.

    Raises:
        QosError: when the output is not mlnx_qos's or lacks the trust state or the PFC table.
    """
    try:
        qos = fabric_formats.parse_mlnx_qos(text)
    except fabric_formats.FormatError as err:
        raise QosError(str(err)) from err
    if qos.trust is None or not qos.pfc_enabled:
        raise QosError("mlnx_qos output has no trust state or PFC table")
    prio_tc, tsa, bw = [0] * PRIORITIES, ["strict"] * PRIORITIES, [0] * PRIORITIES
    for tc in qos.tcs:
        tsa[tc.tc], bw[tc.tc] = tc.tsa, tc.bw_percent or 0
        for prio in tc.priorities:
            prio_tc[prio] = tc.tc
    state: dict[str, Any] = {"trust": qos.trust, "pfc": list(qos.pfc_priorities)}
    if qos.trust == "dscp":
        state["dscp2prio"] = {d: p for p, dscps in qos.dscp2prio.items() for d in dscps}
    state.update(prio_tc=prio_tc, tsa=tsa, tcbw=bw)
    return state


def parse_dcb(pfc_json: str, ets_json: str, app_json: str) -> dict[str, Any]:
    """The QoS state from ``dcb -j {pfc,ets} show dev IF`` and ``dcb -j app show dev IF dscp-prio``.

    Trust is ``dscp`` while the port has DSCP APP entries (the mlx5 driver's rule), and the DSCP
    map is those entries.
    """
    pfc, ets = json.loads(pfc_json), json.loads(ets_json)
    pairs = json.loads(app_json).get("dscp_prio", []) if app_json.strip() else []
    trust = "dscp" if pairs else "pcp"
    state: dict[str, Any] = {
        "trust": trust,
        "pfc": [p for p, on in enumerate(pfc.get("prio_pfc", [])) if on],
        "prio_tc": list(ets.get("prio_tc", [0] * PRIORITIES)),
        "tsa": list(ets.get("tc_tsa", ["strict"] * PRIORITIES)),
        "tcbw": list(ets.get("tc_bw", [0] * PRIORITIES)),
    }
    if trust == "dscp":
        state["dscp2prio"] = {int(d): int(p) for d, p in pairs}
    return state


def parse_dcb_version(text: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from ``dcb -V`` (``dcb utility, iproute2-6.1.0``), or None."""
    match = _DCB_VERSION_RE.search(text or "")
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def dcb_problem(version_text: str | None) -> str | None:
    """Why this ``dcb`` cannot manage QoS (None when it can), from its ``dcb -V`` output."""
    version = parse_dcb_version(version_text)
    if version is not None and version[:2] >= DCB_APP_SINCE:
        return None
    if version:
        shown = f"iproute2 {version[0]}.{version[1]}.{version[2]}"
    else:
        shown = "version {!r}".format((version_text or "").strip()[:60])
    return (f"dcb ({shown}) cannot set the RoCE QoS: the dcb backend needs iproute2 "
            f"{DCB_APP_SINCE[0]}.{DCB_APP_SINCE[1]} or later "
            "(the 'dcb app' object), or install mlnx_qos (mlnx-tools)")


def read_argvs(backend: str, interface: str) -> list[list[str]]:
    """The commands that read a port's QoS state, in the order the parser takes them."""
    if backend == "mlnx_qos":
        return [["mlnx_qos", "-i", interface, "-a"]]
    return [["dcb", "-j", "pfc", "show", "dev", interface],
            ["dcb", "-j", "ets", "show", "dev", interface],
            ["dcb", "-j", "app", "show", "dev", interface, "dscp-prio"]]


def parse(backend: str, outputs: Sequence[str]) -> dict[str, Any]:
    """Parse the outputs of :func:`read_argvs` commands."""
    if backend == "mlnx_qos":
        return parse_mlnx_qos(outputs[0])
    return parse_dcb(*outputs)


def diff_state(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Per knob, ``(before, after)`` for each managed knob whose value differs.

    ``dscp2prio`` compares only the DSCPs the desired map names; under PCP trust the current map
    is not visible, so every desired entry counts as a change.
    """
    changes: dict[str, tuple[Any, Any]] = {}
    for key in ("trust", "pfc", "prio_tc", "tsa", "tcbw"):
        if key in desired and desired[key] != current.get(key):
            changes[key] = (current.get(key), desired[key])
    if "dscp2prio" in desired:
        have = current.get("dscp2prio") or {}
        wrong = {d: p for d, p in desired["dscp2prio"].items() if have.get(d) != p}
        if wrong:
            before = {d: have.get(d) for d in sorted(wrong)}
            changes["dscp2prio"] = (before, dict(sorted(wrong.items())))
    return changes


def _csv(values: Sequence[object]) -> str:
    return ",".join(str(v) for v in values)


def _pfc_flags(prios: Sequence[int]) -> list[int]:
    return [1 if p in prios else 0 for p in range(PRIORITIES)]


def write_argvs(backend: str, interface: str, changes: Mapping[str, tuple[Any, Any]],
                desired: Mapping[str, Any]) -> list[list[str]]:
    """The commands that make the changes (``diff_state`` output), in a safe order.

    The DSCP map is set before trust moves to ``dscp`` so that no packet is classified by a
    half-written map; ETS is always given whole (prio_tc, tsa, tcbw together), as the tools want.
    """
    ets_keys = [k for k in ("prio_tc", "tsa", "tcbw") if k in changes]
    ets = {k: desired.get(k) for k in ("prio_tc", "tsa", "tcbw")}
    if backend == "mlnx_qos":
        return _mlnx_argvs(interface, changes, ets if ets_keys else None)
    return _dcb_argvs(interface, changes, ets if ets_keys else None)


def _mlnx_argvs(interface: str, changes: Mapping[str, tuple[Any, Any]],
                ets: Mapping[str, Any] | None) -> list[list[str]]:
    argvs: list[list[str]] = []
    if "dscp2prio" in changes:
        argv = ["mlnx_qos", "-i", interface]
        for dscp, prio in sorted(changes["dscp2prio"][1].items()):
            argv += ["--dscp2prio", f"set,{dscp:d},{prio:d}"]
        argvs.append(argv)
    argv = ["mlnx_qos", "-i", interface]
    if "trust" in changes:
        argv += ["--trust", changes["trust"][1]]
    if "pfc" in changes:
        argv += ["--pfc", _csv(_pfc_flags(changes["pfc"][1]))]
    if ets:
        if ets["prio_tc"] is not None:
            argv += ["--prio_tc", _csv(ets["prio_tc"])]
        if ets["tsa"] is not None:
            argv += ["--tsa", _csv(ets["tsa"])]
        if ets["tcbw"] is not None:
            argv += ["--tcbw", _csv(ets["tcbw"])]
    if len(argv) > 3:
        argvs.append(argv)
    return argvs


def _dcb_argvs(interface: str, changes: Mapping[str, tuple[Any, Any]],
               ets: Mapping[str, Any] | None) -> list[list[str]]:
    argvs: list[list[str]] = []
    trust = changes.get("trust", (None, None))[1]
    entries: dict[int, int] = dict(changes["dscp2prio"][1]) if "dscp2prio" in changes else {}
    if trust == "dscp" and not entries:  # trust needs entries: the default map, as mlnx_qos does
        entries = {d: d >> 3 for d in range(DSCP_COUNT)}
    if entries and trust != "pcp":
        pairs = [f"{d:d}:{p:d}" for d, p in sorted(entries.items())]
        argvs.append(["dcb", "app", "add", "dev", interface, "dscp-prio", *pairs])
    if trust == "pcp":
        argvs.append(["dcb", "app", "flush", "dev", interface, "dscp-prio"])
    if "pfc" in changes:
        flags = [f"{p:d}:{'on' if on else 'off'}" for p, on in enumerate(_pfc_flags(changes["pfc"][1]))]
        argvs.append(["dcb", "pfc", "set", "dev", interface, "prio-pfc", *flags])
    if ets:
        argv = ["dcb", "ets", "set", "dev", interface]
        if ets["tsa"] is not None:
            argv += ["tc-tsa"] + [f"{tc:d}:{t}" for tc, t in enumerate(ets["tsa"])]
        if ets["tcbw"] is not None:
            argv += ["tc-bw"] + [f"{tc:d}:{b:d}" for tc, b in enumerate(ets["tcbw"])]
        if ets["prio_tc"] is not None:
            argv += ["prio-tc"] + [f"{p:d}:{tc:d}" for p, tc in enumerate(ets["prio_tc"])]
        argvs.append(argv)
    return argvs
