"""Where the plan's lossless class comes from: the inventory, else the switch over LLDP, else a guess.

1. The inventory's ``fabtune_lossless`` (``fabtune.inventory``): what the operator declares. Where a
   host's LLDP peer advertises another class, that is a warning naming the host and both classes.
2. Else the class the switch advertises over LLDP/DCBX to every host (the facts' ``hardware.lldp``,
   read by ``fabric_facts`` through lldptool where lldpad runs): the PFC TLV's enabled priority and
   a DSCP the APP TLV maps to it. Every RoCE port of every host must see one and the same class;
   hosts whose switches disagree are a finding naming the hosts, and the plan falls back to:
3. A guess in the usual order (``knobs.LOSSLESS_ORDER``), saying why nothing better was known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fabtune.knobs import DECLARED, GUESSED, LOSSLESS_ORDER, LosslessClass

Source = Literal["inventory", "lldp", "guess"]
ADVERTISED = "advertised by the switch over LLDP on every host"


@dataclass(frozen=True)
class LosslessChoice:
    """The class the plan starts from (None: guess), where it came from, and what was found."""

    lossless: LosslessClass | None
    source: Source
    says: str  # where the class came from, as the plan, journal, console and report say it
    findings: tuple[str, ...] = ()  # LLDP that disagrees between hosts
    warnings: tuple[str, ...] = ()  # the inventory's class contradicted by what LLDP shows

    def to_json(self) -> dict[str, Any]:
        cls = self.lossless
        return {
            "source": self.source, "says": self.says, "findings": list(self.findings),
            "warnings": list(self.warnings),
            "class": None if cls is None else {"priority": cls.priority, "dscp": cls.dscp,
                                               "cnp_priority": cls.cnp_priority, "cnp_dscp": cls.cnp_dscp},
        }


def peer_class(peer: Mapping[str, Any]) -> LosslessClass | None:
    """The class one port's peer advertises: its PFC priority (with several, the first in the usual
    order), and the DSCP its APP TLV maps there (AFx2 of that priority when listed, else the lowest;
    with none listed, AFx2: the default map's); None when it enables PFC on no priority."""
    enabled = {int(p) for p in peer.get("pfc") or ()}
    prio = next((p for p in LOSSLESS_ORDER if p in enabled), None)
    if prio is None:
        return None
    dscps = sorted(int(d) for d, p in dict(peer.get("dscp2prio") or {}).items() if int(p) == prio)
    usual = prio * 8 + 2
    dscp = usual if usual in dscps or not dscps else dscps[0]
    cnp = 6 if prio != 6 else 7
    return LosslessClass(prio, dscp, cnp, 48 if dscp != 48 else 46)


def _label(cls: LosslessClass | None) -> str:
    return "no PFC priority" if cls is None else f"priority {cls.priority}, DSCP {cls.dscp}"


def _host_classes(facts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, LosslessClass | None]]:
    """Per host, each RoCE port's peer class, for the hosts whose facts carry LLDP."""
    seen: dict[str, dict[str, LosslessClass | None]] = {}
    for host, own in sorted(facts.items()):
        lldp = (own.get("hardware") or {}).get("lldp")
        if isinstance(lldp, Mapping):
            seen[host] = {dev: peer_class(peer) for dev, peer in sorted(lldp.items())
                          if isinstance(peer, Mapping)}
    return seen


def _same(a: LosslessClass | None, b: LosslessClass | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.priority, a.dscp) == (b.priority, b.dscp)


Seen = Mapping[str, Mapping[str, LosslessClass | None]]  # host -> RoCE port -> its peer's class


def _contradictions(declared: LosslessClass, seen: Seen) -> list[str]:
    found = []
    for host, ports in seen.items():
        for dev, cls in ports.items():
            if not _same(cls, declared):
                found.append(
                    f"{host} {dev}: the inventory's fabtune_lossless is {_label(declared)}, but the switch "
                    f"advertises {_label(cls)} over LLDP"
                )
    return found


def _guess(why: str, findings: list[str]) -> LosslessChoice:
    return LosslessChoice(None, "guess", f"guessed: {why}", tuple(findings))


def choose(facts: Mapping[str, Mapping[str, Any]], declared: LosslessClass | None,
           fabric: str = "roce") -> LosslessChoice:
    """The class the plan starts from, in the order of the module's docstring."""
    seen = _host_classes(facts) if fabric == "roce" else {}
    if declared is not None:
        warnings = tuple(_contradictions(declared, seen))
        return LosslessChoice(declared, "inventory", DECLARED, warnings=warnings)
    none = GUESSED.removeprefix("guessed: ")
    if fabric != "roce":
        return _guess(none, [])
    missing = sorted(h for h in facts if not seen.get(h))
    if missing:
        where = "any host" if len(missing) == len(facts) else ", ".join(missing)
        return _guess(f"{none}, and no LLDP from the switch on {where} "
                      "(lldpad not running, lldptool missing, or no DCBX peer)", [])
    by_class: dict[str, list[str]] = {}
    for host, ports in seen.items():
        for dev, cls in ports.items():
            by_class.setdefault(_label(cls), []).append(f"{host} {dev}" if len(ports) > 1 else host)
    first = next(iter(next(iter(seen.values())).values()))
    if len(by_class) > 1:
        finding = "the switches advertise different lossless classes over LLDP: " + "; ".join(
            f"{label} on {', '.join(where)}" for label, where in sorted(by_class.items()))
        return _guess(f"{none}, and {finding}", [finding])
    if first is None:
        return _guess(f"{none}, and the switch enables PFC on no priority over LLDP", [])
    return LosslessChoice(first, "lldp", ADVERTISED)
