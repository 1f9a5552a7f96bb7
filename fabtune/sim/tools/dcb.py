"""Emulated iproute2 ``dcb`` (objects app, apptrust, buffer, dcbx, ets, maxrate, pfc).

Grammar, prefix matching of keywords (``matches()``), messages and exit codes follow iproute2's
``dcb/*.c``: ``What is "X"?`` plus the object's help and exit 1 for unknown words, ``Command line
is not complete. Try option "help"`` and exit 255 when an argument is missing, ``Attribute read:
No such device`` for an interface that is not an emulated mlx5 port; a change without
CAP_NET_ADMIN (a non-root caller) is refused by the kernel: ``Error when attempting to set
attribute: Operation not permitted``, exit 1. Text lines end with a space
(every item is printed as ``"%s "``); ``-j`` prints one JSON object, ``-p`` indents it. The mlx5
driver's limits are applied: APP entries other than DSCP are refused with EINVAL, and apptrust
accepts only ``pcp`` or ``dscp pcp``.
"""

from __future__ import annotations

import errno
import getopt
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from fabtune.sim.node import (
    DCB_CAP_DCBX_HOST,
    DCB_CAP_DCBX_LLD_MANAGED,
    DCB_CAP_DCBX_STATIC,
    DCB_CAP_DCBX_VER_CEE,
    DCB_CAP_DCBX_VER_IEEE,
    TSA_NAMES,
    AppEntry,
    NodeState,
)
from fabtune.sim.tools._common import NetlinkClient, err, out, state_or_host

DSFIELD_NAMES = {
    0x20: "CS1", 0x40: "CS2", 0x60: "CS3", 0x80: "CS4", 0xA0: "CS5", 0xC0: "CS6", 0xE0: "CS7",
    0x28: "AF11", 0x30: "AF12", 0x38: "AF13", 0x48: "AF21", 0x50: "AF22", 0x58: "AF23",
    0x68: "AF31", 0x70: "AF32", 0x78: "AF33", 0x88: "AF41", 0x90: "AF42", 0x98: "AF43",
    0xB8: "EF",
}
"""``/etc/iproute2/rt_dsfield`` as shipped (dsfield value -> name)."""

PCP_NAMES = [f"{p}nd" for p in range(8)] + [f"{p}de" for p in range(8)]
DCBX_FLAGS = (("host", DCB_CAP_DCBX_HOST), ("lld-managed", DCB_CAP_DCBX_LLD_MANAGED),
              ("cee", DCB_CAP_DCBX_VER_CEE), ("ieee", DCB_CAP_DCBX_VER_IEEE),
              ("static", DCB_CAP_DCBX_STATIC))

HELP = (
    "Usage: dcb [ OPTIONS ] OBJECT { COMMAND | help }\n"
    "       dcb [ -f | --force ] { -b | --batch } filename [ -n | --netns ] netnsname\n"
    "where  OBJECT := { app | apptrust | buffer | dcbx | ets | maxrate | pfc | rewr }\n"
    "       OPTIONS := [ -V | --Version | -i | --iec | -j | --json\n"
    "                  | -N | --Numeric | -p | --pretty\n"
    "                  | -s | --statistics | -v | --verbose]"
)
HELPS = {
    "pfc": "Usage: dcb pfc set dev STRING\n"
           "           [ prio-pfc PFC-MAP ]\n"
           "           [ macsec-bypass { on | off } ]\n"
           "           [ delay INTEGER ]\n"
           "\n"
           " where PFC-MAP := [ PFC-MAP ] PFC-MAPPING\n"
           "       PFC-MAPPING := { all | PRIO }:{ on | off }\n"
           "       PRIO := { 0 .. 7 }\n",
    "ets": "Usage: dcb ets set dev STRING\n"
           "           [ willing { on | off } ]\n"
           "           [ { tc-tsa | reco-tc-tsa } TSA-MAP ]\n"
           "           [ { pg-bw | tc-bw | reco-tc-bw } BW-MAP ]\n"
           "           [ { prio-tc | reco-prio-tc } PRIO-MAP ]\n",
    "app": "Usage: dcb app { add | del | replace } dev STRING\n"
           "           [ default-prio PRIO ]\n"
           "           [ ethtype-prio ET:PRIO ]\n"
           "           [ stream-port-prio PORT:PRIO ]\n"
           "           [ dgram-port-prio PORT:PRIO ]\n"
           "           [ port-prio PORT:PRIO ]\n"
           "           [ dscp-prio INTEGER:PRIO ]\n"
           "           [ pcp-prio PCP:PRIO ]\n",
    "apptrust": "Usage: dcb apptrust set dev STRING\n"
                "           [ order [ ethtype | stream-port | dgram-port | port | dscp | pcp ] ]\n",
    "buffer": "Usage: dcb buffer set dev STRING\n"
              "           [ prio-buffer PRIO-MAP ]\n"
              "           [ buffer-size SIZE-MAP ]\n",
    "maxrate": "Usage: dcb maxrate set dev STRING\n"
               "           [ tc-maxrate RATE-MAP ]\n",
    "dcbx": "Usage: dcb dcbx set dev STRING\n"
            "           [ host ] [ lld-managed ] [ cee ] [ ieee ] [ static ]\n",
}
APP_KEYS = ("ethtype-prio", "default-prio", "dscp-prio", "stream-port-prio", "dgram-port-prio",
            "port-prio", "pcp-prio")
TRUST_SELECTORS = ("ethtype", "stream-port", "dgram-port", "port", "dscp", "pcp")


class DcbError(Exception):
    """A dcb failure: message already printed; ``code`` is the exit status."""

    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


def matches(word: str, keyword: str) -> bool:
    """iproute2 ``matches()``: ``word`` is a non-empty prefix of ``keyword``."""
    return bool(word) and keyword.startswith(word)


def _fail(message: str, code: int = 1) -> DcbError:
    err(message)
    return DcbError(code)


def _incomplete() -> DcbError:
    return _fail('Command line is not complete. Try option "help"', 255)


def _what(word: str, obj: str) -> DcbError:
    err(f'What is "{word}"?')
    err(HELPS.get(obj, HELP))
    return DcbError(1)


class Emit:
    """Collects one show's output as text lines and as a JSON object."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {}
        self.lines: list[str] = []
        self._parts: list[str] = []

    def item(self, key: str, value: Any, text: str) -> None:
        """Add one printed item (text form) under JSON ``key``."""
        self.obj[key] = value
        self._parts.append(text)

    def nl(self) -> None:
        """End the current text line."""
        if self._parts:
            self.lines.append("".join(self._parts))
            self._parts = []

    def flush(self, as_json: bool, pretty: bool) -> None:
        """Print the collected output."""
        self.nl()
        if as_json:
            out(json.dumps(self.obj, indent=4 if pretty else None,
                           separators=(",", ": ") if pretty else (",", ":")))
        else:
            for line in self.lines:
                out(line)


def _onoff(value: int | bool) -> str:
    return "on" if value else "off"


def _array(name: str, values: Sequence[Any], fmt: Callable[[Any], str] = str) -> str:
    return f"{name} " + "".join(f"{i}:{fmt(v)} " for i, v in enumerate(values))


def size_text(size: int) -> str:
    """iproute2 ``sprint_size``: ``10Kb``, ``1Mb``, ``100b``."""
    mb, kb = 1024 * 1024, 1024
    if size >= mb and abs(mb * round(size / mb) - size) < kb:
        return f"{round(size / mb):g}Mb"
    if size >= kb and abs(kb * round(size / kb) - size) < 16:
        return f"{round(size / kb):g}Kb"
    return f"{size}b"


def rate_text(bits: int) -> str:
    """iproute2 ``sprint_rate`` (SI units): ``25Gbit``, ``0bit``."""
    units = ["", "K", "M", "G", "T"]
    i = 0
    while i < len(units) - 1:
        if bits < 1000 or (bits % 1000 != 0 and bits < 1000 * 1000):
            break
        bits //= 1000
        i += 1
    return f"{bits}{units[i]}bit"


_SIZE_RE = re.compile(r"^(\d+)([kmg]?)(b?)$", re.IGNORECASE)
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """A buffer size with optional K/M/G suffix, in bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(text)
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
    return int(m.group(1)) * mult


def parse_rate(text: str) -> int:
    """A tc(8) rate (``25Gbit``, ``100mbit``, ``1Gbps``) in bits per second."""
    m = _RATE_RE.match(text)
    if not m:
        raise ValueError(text)
    mult = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}[m.group(2).lower()]
    bits = float(m.group(1)) * mult
    if (m.group(3) or "").lower() == "bps":
        bits *= 8
    return int(bits)


class Args:
    """The remaining words of a command line, consumed left to right."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)

    def __bool__(self) -> bool:
        return bool(self.words)

    def peek(self) -> str:
        """The next word."""
        return self.words[0]

    def pop(self) -> str:
        """Take the next word."""
        return self.words.pop(0)

    def value(self) -> str:
        """Take the word after the keyword just popped (``NEXT_ARG``)."""
        if not self.words:
            raise _incomplete()
        return self.pop()

    def mapping(self, what: str) -> list[tuple[str, str]]:
        """Take ``KEY:VALUE`` words while they contain a colon."""
        if not self.words:
            raise _incomplete()
        pairs = []
        while self.words and ":" in self.words[0]:
            key, value = self.pop().split(":", 1)
            pairs.append((key, value))
        if not pairs:
            raise _fail(f"Invalid {what} mapping {self.words[0] if self.words else ''}")
        return pairs


def _keys(key: str, high: int, what_key: str, what_value: str, what: str) -> list[int]:
    if matches(key, "all"):
        return list(range(high + 1))
    try:
        index = int(key, 0)
    except ValueError:
        raise _fail(f"Invalid {what} mapping {key}") from None
    if not 0 <= index <= high:
        err(f"In {what_key}:{what_value} mapping, {what_key} is expected to be 0..{high}")
        raise _fail(f"Invalid {what} mapping {key}")
    return [index]


def _u8(value: str, high: int, key: str, labels: tuple[str, str, str]) -> int:
    what_key, what_value, what = labels
    try:
        number = int(value, 0)
    except ValueError:
        raise _fail(f"Invalid {what} mapping {key}") from None
    if not 0 <= number <= high:
        err(f"In {what_key}:{what_value} mapping, {what_value} is expected to be 0..{high}")
        raise _fail(f"Invalid {what} mapping {key}")
    return number


def _on_off_value(what: str, value: str) -> int:
    if value in ("on", "off"):
        return int(value == "on")
    err(f'Error: argument of "{what}" must be "on" or "off", not "{value}"')
    raise DcbError(1)


# --------------------------------------------------------------------------- objects


class Dcb:
    """One dcb invocation against a node state."""

    def __init__(self, state: NodeState, *, as_json: bool, pretty: bool, numeric: bool,
                 stats: bool, iec: bool) -> None:
        self.state = state
        self.as_json = as_json
        self.pretty = pretty
        self.numeric = numeric
        self.stats = stats
        self.iec = iec

    def device(self, args: Args, obj: str) -> str:
        """``dev DEV`` (``dcb_cmd_parse_dev``), checked against the emulated NICs."""
        if not args or matches(args.peek(), "help"):
            err(HELPS.get(obj, HELP))
            raise DcbError(0)
        word = args.pop()
        if not matches(word, "dev"):
            err(f"Expected `dev DEV', not `{word}'")
            err(HELPS.get(obj, HELP))
            raise DcbError(1)
        dev = args.value()
        if dev not in self.state.netdevs():
            raise _fail("Attribute read: No such device")
        return dev

    def run(self, obj: str, args: Args) -> None:
        """Dispatch ``OBJECT COMMAND dev DEV ...``."""
        if not args or matches(args.peek(), "help"):
            err(HELPS.get(obj, HELP))
            return
        cmd = args.pop()
        commands = ["show", "set"] if obj != "app" else ["show", "flush", "add", "del", "replace"]
        chosen = next((c for c in commands if matches(cmd, c)), None)
        if chosen is None:
            raise _what(cmd, obj)
        dev = self.device(args, obj)
        if obj == "rewr":
            raise _fail("Attribute read: Operation not supported")
        if chosen != "show":  # every change is an RTM_SETDCB request: CAP_NET_ADMIN or EPERM
            self.state = cast(NodeState, NetlinkClient(self.state))
        handler: Callable[[str, str, Args], None] = getattr(self, f"_{obj}")
        try:
            handler(chosen, dev, args)
        except PermissionError as e:  # dcb.c: "Error when attempting to set attribute: %s", strerror
            raise _fail(f"Error when attempting to set attribute: {os.strerror(e.errno or errno.EPERM)}") \
                from None

    def _show(self, emit_all: Callable[[Emit], None], items: dict[str, Callable[[Emit], None]],
              args: Args, obj: str) -> None:
        emit = Emit()
        if not args:
            emit_all(emit)
        while args:
            word = args.pop()
            if matches(word, "help"):
                err(HELPS.get(obj, HELP))
                return
            key = next((k for k in items if matches(word, k)), None)
            if key is None:
                raise _what(word, obj)
            items[key](emit)
            emit.nl()
        emit.flush(self.as_json, self.pretty)

    # ---------------------------------------------------------------- pfc

    def _pfc(self, cmd: str, dev: str, args: Args) -> None:
        pfc = self.state.get_pfc(dev)
        enabled = [bool(v) for v in pfc.enabled]
        items: dict[str, Callable[[Emit], None]] = {
            "pfc-cap": lambda e: e.item("pfc_cap", pfc.cap, f"pfc-cap {pfc.cap} "),
            "prio-pfc": lambda e: e.item("prio_pfc", enabled,
                                         _array("prio-pfc", enabled, _onoff)),
            "macsec-bypass": lambda e: e.item("macsec_bypass", pfc.mbc,
                                              f"macsec-bypass {_onoff(pfc.mbc)} "),
            "delay": lambda e: e.item("delay", pfc.delay, f"delay {pfc.delay} "),
            "requests": lambda e: e.item("requests", [0] * 8, _array("requests", [0] * 8)),
            "indications": lambda e: e.item("indications", [0] * 8,
                                            _array("indications", [0] * 8)),
        }
        if cmd == "show":
            def everything(e: Emit) -> None:
                for key in ("pfc-cap", "macsec-bypass", "delay"):
                    items[key](e)
                e.nl()
                items["prio-pfc"](e)
                e.nl()
                if self.stats:
                    items["requests"](e)
                    e.nl()
                    items["indications"](e)
            self._show(everything, items, args, "pfc")
            return
        self._pfc_set(dev, args, [int(v) for v in enabled], pfc.delay, pfc.mbc)

    def _pfc_set(self, dev: str, args: Args, enabled: list[int], delay: int, mbc: bool) -> None:
        if not args:
            err(HELPS["pfc"])
            raise DcbError(1)
        while args:
            word = args.pop()
            if matches(word, "help"):
                err(HELPS["pfc"])
                return
            if matches(word, "prio-pfc"):
                for key, value in args.mapping("prio-pfc"):
                    on = _on_off_value("PFC", value)
                    for prio in _keys(key, 7, "PRIO", "PFC", "prio-pfc"):
                        enabled[prio] = on
            elif matches(word, "macsec-bypass"):
                mbc = bool(_on_off_value("macsec-bypass", args.value()))
            elif matches(word, "delay"):
                delay = self._u16(args.value(), "delay")
            else:
                raise _what(word, "pfc")
        self.state.set_pfc(dev, enabled=enabled, delay=delay, mbc=mbc)

    @staticmethod
    def _u16(text: str, what: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            value = -1
        if not 0 <= value <= 0xFFFF:
            raise _fail(f"Invalid {what} {text}")
        return value

    # ---------------------------------------------------------------- ets

    def _ets(self, cmd: str, dev: str, args: Args) -> None:
        ets = self.state.get_ets(dev)
        arrays: dict[str, tuple[str, Sequence[Any]]] = {
            "tc-bw": ("tc_bw", ets.tc_bw), "pg-bw": ("pg_bw", ets.pg_bw),
            "tc-tsa": ("tc_tsa", ets.tc_tsa), "prio-tc": ("prio_tc", ets.prio_tc),
            "reco-tc-bw": ("reco_tc_bw", ets.reco_tc_bw),
            "reco-tc-tsa": ("reco_tc_tsa", ets.reco_tc_tsa),
            "reco-prio-tc": ("reco_prio_tc", ets.reco_prio_tc),
        }
        items: dict[str, Callable[[Emit], None]] = {
            "willing": lambda e: e.item("willing", ets.willing,
                                        f"willing {_onoff(ets.willing)} "),
            "ets-cap": lambda e: e.item("ets_cap", ets.ets_cap, f"ets-cap {ets.ets_cap} "),
            "cbs": lambda e: e.item("cbs", ets.cbs, f"cbs {_onoff(ets.cbs)} "),
        }
        for name, (key, values) in arrays.items():
            items[name] = _array_item(name, key, values)
        if cmd == "show":
            def everything(e: Emit) -> None:
                for key in ("willing", "ets-cap", "cbs"):
                    items[key](e)
                e.nl()
                for name in ("tc-bw", "pg-bw", "tc-tsa", "prio-tc", "reco-tc-bw",
                             "reco-tc-tsa", "reco-prio-tc"):
                    items[name](e)
                    e.nl()
            self._show(everything, items, args, "ets")
            return
        self._ets_set(dev, args)

    def _ets_set(self, dev: str, args: Args) -> None:
        if not args:
            err(HELPS["ets"])
            raise DcbError(1)
        ets = self.state.get_ets(dev)
        fields: dict[str, list[Any]] = {
            "tc_tsa": list(ets.tc_tsa), "reco_tc_tsa": list(ets.reco_tc_tsa),
            "tc_bw": list(ets.tc_bw), "pg_bw": list(ets.pg_bw), "reco_tc_bw": list(ets.reco_tc_bw),
            "prio_tc": list(ets.prio_tc), "reco_prio_tc": list(ets.reco_prio_tc),
        }
        willing = ets.willing
        names = ("tc-tsa", "reco-tc-tsa", "tc-bw", "pg-bw", "reco-tc-bw", "prio-tc",
                 "reco-prio-tc")
        while args:
            word = args.pop()
            if matches(word, "help"):
                err(HELPS["ets"])
                return
            if matches(word, "willing"):
                willing = bool(_on_off_value("willing", args.value()))
                continue
            name = next((n for n in names if word == n), None) or next(
                (n for n in names if matches(word, n)), None)
            if name is None:
                raise _what(word, "ets")
            self._ets_mapping(name, args, fields[name.replace("-", "_")])
        for tsa_key, bw_key in (("tc_tsa", "tc_bw"), ("reco_tc_tsa", "reco_tc_bw")):
            _validate_bw(fields[bw_key], fields[tsa_key], bw_key.replace("_", "-"))
        new = replace(ets, willing=willing, tc_tsa=tuple(fields["tc_tsa"]),
                      reco_tc_tsa=tuple(fields["reco_tc_tsa"]), tc_bw=tuple(fields["tc_bw"]),
                      pg_bw=tuple(fields["pg_bw"]), reco_tc_bw=tuple(fields["reco_tc_bw"]),
                      prio_tc=tuple(fields["prio_tc"]),
                      reco_prio_tc=tuple(fields["reco_prio_tc"]))
        self.state.set_ets(dev, new)

    def _ets_mapping(self, name: str, args: Args, target: list[Any]) -> None:
        for key, value in args.mapping(name):
            if name.endswith("tsa"):
                if value not in TSA_NAMES:
                    err(f'Error: argument "{value}" of "TSA" is not one of: '
                        + ", ".join(TSA_NAMES))
                    raise _fail(f"Invalid {name} mapping {key}")
                tcs = _keys(key, 7, "TC", "TSA", name)
                parsed: Any = value
            elif name.endswith("bw"):
                parsed = _u8(value, 100, key, ("TC", "BW", name))
                tcs = _keys(key, 7, "TC", "BW", name)
            else:
                parsed = _u8(value, 7, key, ("PRIO", "TC", name))
                tcs = _keys(key, 7, "PRIO", "TC", name)
            for tc in tcs:
                target[tc] = parsed

    # ---------------------------------------------------------------- app

    def _app(self, cmd: str, dev: str, args: Args) -> None:
        table = self.state.get_app_table(dev)
        if cmd == "show":
            emit = Emit()
            wanted = self._app_filters(args) or list(APP_KEYS)
            for key in ("ethtype-prio", "default-prio", "dscp-prio", "stream-port-prio",
                        "dgram-port-prio", "port-prio", "pcp-prio"):
                if key in wanted:
                    self._app_print(emit, key, table)
            emit.flush(self.as_json, self.pretty)
            return
        if cmd == "flush":
            wanted = self._app_filters(args) or list(APP_KEYS)
            if "dscp-prio" in wanted:
                self.state.flush_dscp(dev)
            return
        entries = self._app_entries(args)
        self._app_change(cmd, dev, entries, table)

    def _app_filters(self, args: Args) -> list[str]:
        wanted = []
        while args:
            word = args.pop()
            key = next((k for k in APP_KEYS if matches(word, k)), None)
            if key is None:
                raise _what(word, "app")
            wanted.append(key)
        return wanted

    def _app_print(self, emit: Emit, key: str, table: list[AppEntry]) -> None:
        selector = {"ethtype-prio": "ethtype", "default-prio": "default", "dscp-prio": "dscp",
                    "stream-port-prio": "stream-port", "dgram-port-prio": "dgram-port",
                    "port-prio": "port", "pcp-prio": "pcp"}[key]
        rows = [e for e in table if e.selector == selector]
        if not rows:
            return
        json_key = key.replace("-", "_")
        if selector == "default":
            emit.item(json_key, [e.prio for e in rows],
                      "default-prio " + "".join(f"{e.prio} " for e in rows))
        else:
            emit.item(json_key, [[self._app_key(e, json_form=True), e.prio] for e in rows],
                      f"{key} " + "".join(f"{self._app_key(e)}:{e.prio} " for e in rows))
        emit.nl()

    def _app_key(self, entry: AppEntry, json_form: bool = False) -> Any:
        if entry.selector == "ethtype":
            return f"{entry.protocol:x}" if not json_form else entry.protocol
        if entry.selector == "dscp" and not self.numeric and not json_form:
            return DSFIELD_NAMES.get(entry.protocol << 2, str(entry.protocol))
        if entry.selector == "pcp" and not self.numeric and entry.protocol < len(PCP_NAMES):
            return PCP_NAMES[entry.protocol]
        return entry.protocol if json_form else str(entry.protocol)

    def _app_entries(self, args: Args) -> list[AppEntry]:
        if not args:
            err(HELPS["app"])
            raise DcbError(0)
        entries: list[AppEntry] = []
        while args:
            word = args.pop()
            key = next((k for k in APP_KEYS if matches(word, k)), None)
            if key is None:
                raise _what(word, "app")
            if key == "default-prio":
                entries.append(AppEntry("default", 0, _u8(args.value(), 7, "",
                                                          ("PRIO", "PRIO", "default priority"))))
                continue
            for name, value in args.mapping(key):
                entries += self._app_mapping(key, name, value)
        return entries

    def _app_mapping(self, key: str, name: str, value: str) -> list[AppEntry]:
        selector = key.removesuffix("-prio")
        if key == "dscp-prio":
            protos = self._dscp_keys(name)
        elif key == "pcp-prio":
            if name not in PCP_NAMES:
                raise _fail(f"Invalid pcp-prio mapping {name}")
            protos = [PCP_NAMES.index(name)]
        else:
            high = 0xFFFF
            protos = _keys(name, high, key.split("-", maxsplit=1)[0].upper(), "PRIO", key)
        prio = _u8(value, 7, name, ("DSCP" if key == "dscp-prio" else "KEY", "PRIO", key))
        return [AppEntry(selector, p, prio) for p in protos]

    @staticmethod
    def _dscp_keys(name: str) -> list[int]:
        if matches(name, "all"):
            return list(range(64))
        if name.isdigit():
            return _keys(name, 63, "DSCP", "PRIO", "dscp-prio")
        by_name = {v: k for k, v in DSFIELD_NAMES.items()}
        if name not in by_name:
            raise _fail(f"Invalid dscp-prio mapping {name}")
        return [by_name[name] >> 2]

    def _app_change(self, cmd: str, dev: str, entries: list[AppEntry],
                    table: list[AppEntry]) -> None:
        if any(e.selector != "dscp" for e in entries):
            raise _fail("Error when attempting to set attribute: Invalid argument")
        if cmd == "del":
            self.state.del_app(dev, entries)
            return
        if cmd == "replace":
            stale = [t for t in table if t.selector == "dscp"
                     and any(e.protocol == t.protocol and e.prio != t.prio for e in entries)]
            self.state.del_app(dev, stale)
        self.state.add_app(dev, entries)

    # ---------------------------------------------------------------- apptrust

    def _apptrust(self, cmd: str, dev: str, args: Args) -> None:
        if cmd == "show":
            order = self.state.get_apptrust(dev)
            emit = Emit()
            emit.item("order", order, "order: " + "".join(f"{s} " for s in order))
            for word in args.words:
                if not matches(word, "order"):
                    raise _what(word, "apptrust")
            emit.flush(self.as_json, self.pretty)
            return
        if not args:
            err(HELPS["apptrust"])
            raise DcbError(1)
        word = args.pop()
        if not matches(word, "order"):
            raise _what(word, "apptrust")
        order = []
        while args:
            sel = args.pop()
            if sel not in TRUST_SELECTORS:
                raise _fail(f'Invalid apptrust selector "{sel}"')
            if sel in order:
                raise _fail(f'Error: selector "{sel}" is duplicated')
            order.append(sel)
        try:
            self.state.set_apptrust(dev, order)
        except PermissionError:
            raise
        except OSError:
            raise _fail("Error when attempting to set attribute: Operation not supported") \
                from None

    # ---------------------------------------------------------------- buffer

    def _buffer(self, cmd: str, dev: str, args: Args) -> None:
        buf = self.state.get_buffers(dev)
        items: dict[str, Callable[[Emit], None]] = {
            "prio-buffer": lambda e: e.item("prio_buffer", list(buf.prio2buffer),
                                            _array("prio-buffer", buf.prio2buffer)),
            "buffer-size": lambda e: e.item("buffer_size", list(buf.sizes),
                                            _array("buffer-size", buf.sizes, size_text)),
            "total-size": lambda e: e.item("total_size", buf.total,
                                           f"total-size {size_text(buf.total)} "),
        }
        if cmd == "show":
            def everything(e: Emit) -> None:
                for show_one in items.values():
                    show_one(e)
                    e.nl()
            self._show(everything, items, args, "buffer")
            return
        if not args:
            err(HELPS["buffer"])
            raise DcbError(1)
        p2b, sizes = list(buf.prio2buffer), list(buf.sizes)
        while args:
            word = args.pop()
            if matches(word, "prio-buffer"):
                for key, value in args.mapping("prio-buffer"):
                    for prio in _keys(key, 7, "PRIO", "BUFFER", "prio-buffer"):
                        p2b[prio] = _u8(value, 7, key, ("PRIO", "BUFFER", "prio-buffer"))
            elif matches(word, "buffer-size"):
                for key, value in args.mapping("buffer-size"):
                    try:
                        size = parse_size(value)
                    except ValueError:
                        raise _fail(f"Invalid buffer-size mapping {key}") from None
                    for index in _keys(key, 7, "BUFFER", "SIZE", "buffer-size"):
                        sizes[index] = size
            else:
                raise _what(word, "buffer")
        try:
            self.state.set_buffers(dev, p2b, sizes)
        except ValueError:
            raise _fail("Error when attempting to set attribute: Invalid argument") from None

    # ---------------------------------------------------------------- maxrate

    def _maxrate(self, cmd: str, dev: str, args: Args) -> None:
        bits = [k * 1000 for k in self.state.get_maxrate(dev)]
        if cmd == "show":
            items: dict[str, Callable[[Emit], None]] = {
                "tc-maxrate": lambda e: e.item("tc_maxrate", [b // 8 for b in bits],
                                               _array("tc-maxrate", bits, rate_text)),
            }
            self._show(items["tc-maxrate"], items, args, "maxrate")
            return
        if not args:
            err(HELPS["maxrate"])
            raise DcbError(1)
        while args:
            word = args.pop()
            if not matches(word, "tc-maxrate"):
                raise _what(word, "maxrate")
            for key, value in args.mapping("tc-maxrate"):
                try:
                    rate = parse_rate(value)
                except ValueError:
                    raise _fail(f"Invalid tc-maxrate mapping {key}") from None
                for tc in _keys(key, 7, "TC", "RATE", "tc-maxrate"):
                    bits[tc] = rate
        self.state.set_maxrate(dev, [b // 1000 for b in bits])

    # ---------------------------------------------------------------- dcbx

    def _dcbx(self, cmd: str, dev: str, args: Args) -> None:
        if cmd == "show":
            flags = self.state.get_dcbx(dev)
            emit = Emit()
            for name, bit in DCBX_FLAGS:
                if flags & bit:
                    emit.item(name.replace("-", "_"), True, f"{name} ")
            emit.flush(self.as_json, self.pretty)
            return
        flags = 0
        while args:
            word = args.pop()
            found = next((b for n, b in DCBX_FLAGS if matches(word, n)), None)
            if found is None:
                raise _what(word, "dcbx")
            flags |= found
        if flags & DCB_CAP_DCBX_LLD_MANAGED or (
                flags & DCB_CAP_DCBX_VER_CEE and flags & DCB_CAP_DCBX_VER_IEEE):
            raise _fail("Error when attempting to set attribute: Invalid argument")
        self.state.set_dcbx(dev, flags)


def _array_item(name: str, key: str, values: Sequence[Any]) -> Callable[[Emit], None]:
    def show(emit: Emit) -> None:
        emit.item(key, list(values), _array(name, values))
    return show


def _validate_bw(bw: list[int], tsa: list[str], what: str) -> None:
    has_ets = "ets" in tsa
    total = sum(bw)
    if total == 100 or (not has_ets and total == 0):
        return
    raise _fail(f"Bandwidth percentages in {what} sum to {total}%, "
                f"expected {100 if has_ets else 0}%")


OBJECTS = ("app", "apptrust", "buffer", "dcbx", "ets", "maxrate", "pfc", "rewr")
LONG_OPTS = ["Version", "force", "batch=", "iec", "json", "Numeric", "pretty", "statistics",
             "netns=", "help", "verbose"]


def _global_options(argv: list[str]) -> tuple[set[str], list[str]] | int:
    """Parse dcb's getopt options: the set of short letters and the rest, or an exit status."""
    try:
        opts, rest = getopt.getopt(argv, "b:fhijn:psvNV", LONG_OPTS)
    except getopt.GetoptError as e:
        err(f"dcb: {e.msg}")
        err("Unknown option.")
        err(HELP)
        return 1
    flags = {o.lstrip("-")[:1] if o.startswith("--") else o[1] for o, _ in opts}
    if "V" in flags:
        out("dcb utility, iproute2-6.1.0")
        return 0
    if "h" in flags:
        err(HELP)
        return 0
    if "b" in flags:
        err("dcb: batch mode is not emulated")
        return 1
    return flags, rest


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``dcb`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    parsed = _global_options(argv)
    if isinstance(parsed, int):
        return parsed
    flags, rest = parsed
    tool = Dcb(state_or_host(state), as_json="j" in flags, pretty="p" in flags,
               numeric="N" in flags, stats="s" in flags, iec="i" in flags)
    args = Args(rest)
    if not args or matches(args.peek(), "help"):
        err(HELP)
        return 0
    word = args.pop()
    obj = next((o for o in OBJECTS if word == o), None) or next(
        (o for o in OBJECTS if matches(word, o)), None)
    try:
        if obj is None:
            raise _fail(f'Object "{word}" is unknown')
        tool.run(obj, args)
    except DcbError as e:
        return e.code
    return 0
