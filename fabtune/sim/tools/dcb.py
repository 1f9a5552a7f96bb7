"""Emulated iproute2 ``dcb``, as the iproute2 release the host has (``node.json`` ``tools``).

Grammar, prefix matching of keywords (``matches()``), messages and exit codes follow iproute2's
``dcb/*.c``: ``What is "X"?`` plus the object's help and exit 1 for unknown words, ``Command line
is not complete. Try option "help"`` and exit 255 when an argument is missing, ``Attribute read:
No such device`` for an interface that is not an emulated mlx5 port, ``Attribute write: ERRNO``
(``perror`` in ``__dcb_set_attribute``) when the driver refuses a change, and
``Attribute write: Operation not permitted`` for a caller without CAP_NET_ADMIN (not root).
Text lines end with a space (every item is printed as ``"%s "``); ``-j`` prints one JSON
object, ``-p`` indents it.
Options may stand anywhere on the line: ``main()`` parses them with glibc ``getopt_long``, which
permutes argv (optstring ``"b:fhijn:psvNV"`` has no leading ``+``).

What each release has (``git show vX:dcb/dcb.c``, ``dcb_cmd()``'s object table):

* 5.12 .. 6.1: ``app`` (show, flush, add, del, replace; no ``pcp-prio``), ``buffer``, ``dcbx``,
  ``ets``, ``maxrate``, ``pfc``. Any other object is ``Object "X" is unknown`` and exit 1 (6.1
  has no ``apptrust``: Debian 12 ships 6.1.0).
* 6.2: ``apptrust`` (``dcb/dcb_apptrust.c``, matched by ``strcmp``) and ``app ... pcp-prio``.
* 6.5: ``rewr``.

The mlx5 driver's behaviour is applied (``drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c``):
APP entries other than DSCP are refused with EINVAL; the DSCP entries carry the trust state (see
``fabtune.sim.node``); ``mlx5e_dcbnl_ops`` has no ``dcbnl_getapptrust``/``dcbnl_setapptrust``,
so on a release that knows ``apptrust`` its show finds no attribute (``Attribute not found``)
and its set gets EOPNOTSUPP from ``dcbnl_ieee_set``.
"""

from __future__ import annotations

import errno
import getopt
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
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

DEFAULT_VERSION = (6, 1, 0)
"""Debian 12's iproute2, for a host whose description names none."""
OBJECT_SINCE: dict[str, tuple[int, int]] = {
    "app": (5, 12), "buffer": (5, 11), "dcbx": (5, 12), "ets": (5, 11), "maxrate": (5, 11),
    "pfc": (5, 11), "apptrust": (6, 2), "rewr": (6, 5),
}
"""The iproute2 release that added each ``dcb`` object (``git log -- dcb/dcb_OBJECT.c``)."""
EXACT_OBJECTS = ("apptrust", "rewr")
"""Objects ``dcb_cmd()`` matches with ``strcmp``, not ``matches()``."""


def help_text(objects: Sequence[str]) -> str:
    """``dcb_help()`` of a release with ``objects``."""
    return (
        "Usage: dcb [ OPTIONS ] OBJECT { COMMAND | help }\n"
        "       dcb [ -f | --force ] { -b | --batch } filename [ -n | --netns ] netnsname\n"
        f"where  OBJECT := {{ {' | '.join(objects)} }}\n"
        "       OPTIONS := [ -V | --Version | -i | --iec | -j | --json\n"
        "                  | -N | --Numeric | -p | --pretty\n"
        "                  | -s | --statistics | -v | --verbose]"
    )


def parse_version(text: str) -> tuple[int, int, int]:
    """``6.1.0`` -> ``(6, 1, 0)`` (a missing part is 0)."""
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return (major, minor, patch)


def objects_of(version: tuple[int, int, int]) -> tuple[str, ...]:
    """The objects release ``version`` knows, in ``dcb_cmd()``'s order."""
    order = ("app", "apptrust", "buffer", "dcbx", "ets", "maxrate", "pfc", "rewr")
    return tuple(o for o in order if version[:2] >= OBJECT_SINCE[o])


HELP = help_text(objects_of(DEFAULT_VERSION))
# Each object's help, as Debian 12's dcb (iproute2 6.1.0) prints it (tests/fidelity compares them
# byte for byte with the real tool): ``dcb OBJ`` and ``dcb OBJ help`` print the whole help
# (dcb_OBJ_help()), a command without its ``dev`` that command's part (dcb_OBJ_help_show(),
# dcb_OBJ_help_set()). Later releases are taken to print the same, except dcb app's pcp-prio (6.2).
SHOW_HELPS = {
    "pfc": "Usage: dcb [ -s ] pfc show dev STRING\n"
           "           [ pfc-cap ] [ prio-pfc ] [ macsec-bypass ]\n"
           "           [ delay ] [ requests ] [ indications ]\n",
    "ets": "Usage: dcb ets show dev STRING\n"
           "           [ willing ] [ ets-cap ] [ cbs ] [ tc-tsa ]\n"
           "           [ reco-tc-tsa ] [ pg-bw ] [ tc-bw ] [ reco-tc-bw ]\n"
           "           [ prio-tc ] [ reco-prio-tc ]\n",
    "app": "Usage: dcb app { show | flush } dev STRING\n"
           "           [ default-prio ]\n"
           "           [ ethtype-prio ]\n"
           "           [ stream-port-prio ]\n"
           "           [ dgram-port-prio ]\n"
           "           [ port-prio ]\n"
           "           [ dscp-prio ]\n",
    "apptrust": "Usage: dcb apptrust show dev STRING\n"
                "       [ order ]\n",
    "buffer": "Usage: dcb buffer show dev STRING\n"
              "           [ prio-buffer ] [ buffer-size ] [ total-size ]\n",
    "maxrate": "Usage: dcb [ -i ] maxrate show dev STRING\n"
               "           [ tc-maxrate ]\n",
    "dcbx": "Usage: dcb dcbx show dev STRING\n",
}
HELPS = {
    "pfc": "Usage: dcb pfc set dev STRING\n"
           "           [ prio-pfc PFC-MAP ]\n"
           "           [ macsec-bypass { on | off } ]\n"
           "           [ delay INTEGER ]\n"
           "\n"
           " where PFC-MAP := [ PFC-MAP ] PFC-MAPPING\n"
           "       PFC-MAPPING := { all | TC }:PFC\n"
           "       TC := { 0 .. 7 }\n"
           "       PFC := { on | off }\n",
    "ets": "Usage: dcb ets set dev STRING\n"
           "           [ willing { on | off } ]\n"
           "           [ { tc-tsa | reco-tc-tsa } TSA-MAP ]\n"
           "           [ { pg-bw | tc-bw | reco-tc-bw } BW-MAP ]\n"
           "           [ { prio-tc | reco-prio-tc } PRIO-MAP ]\n"
           "\n"
           " where TSA-MAP := [ TSA-MAP ] TSA-MAPPING\n"
           "       TSA-MAPPING := { all | TC }:{ strict | cbs | ets | vendor }\n"
           "       BW-MAP := [ BW-MAP ] BW-MAPPING\n"
           "       BW-MAPPING := { all | TC }:INTEGER\n"
           "       PRIO-MAP := [ PRIO-MAP ] PRIO-MAPPING\n"
           "       PRIO-MAPPING := { all | PRIO }:TC\n"
           "       TC := { 0 .. 7 }\n"
           "       PRIO := { 0 .. 7 }\n",
    "app": "Usage: dcb app { add | del | replace } dev STRING\n"
           "           [ default-prio PRIO ]\n"
           "           [ ethtype-prio ET:PRIO ]\n"
           "           [ stream-port-prio PORT:PRIO ]\n"
           "           [ dgram-port-prio PORT:PRIO ]\n"
           "           [ port-prio PORT:PRIO ]\n"
           "           [ dscp-prio INTEGER:PRIO ]\n"
           "           [ pcp-prio PCP:PRIO ]\n"
           "\n"
           " where PRIO := { 0 .. 7 }\n"
           "       ET := { 0x600 .. 0xffff }\n"
           "       PORT := { 1 .. 65535 }\n"
           "       DSCP := { 0 .. 63 }\n"
           "       PCP := { 0(nd/de) .. 7(nd/de) }\n",
    "apptrust": "Usage: dcb apptrust set dev STRING\n"
                "       [ order [ ethtype | stream-port | dgram-port | port | dscp | pcp ] ]\n",
    "buffer": "Usage: dcb buffer set dev STRING\n"
              "           [ prio-buffer PRIO-MAP ]\n"
              "           [ buffer-size SIZE-MAP ]\n"
              "\n"
              " where PRIO-MAP := [ PRIO-MAP ] PRIO-MAPPING\n"
              "       PRIO-MAPPING := { all | PRIO }:BUFFER\n"
              "       SIZE-MAP := [ SIZE-MAP ] SIZE-MAPPING\n"
              "       SIZE-MAPPING := { all | BUFFER }:INTEGER\n"
              "       PRIO := { 0 .. 7 }\n"
              "       BUFFER := { 0 .. 7 }\n",
    "maxrate": "Usage: dcb maxrate set dev STRING\n"
               "           [ tc-maxrate RATE-MAP ]\n"
               "\n"
               " where RATE-MAP := [ RATE-MAP ] RATE-MAPPING\n"
               "       RATE-MAPPING := { all | TC }:RATE\n"
               "       TC := { 0 .. 7 }\n",
    "dcbx": "Usage: dcb dcbx set dev STRING\n"
            "           [ host | lld-managed ]\n"
            "           [ cee | ieee ] [ static ]\n",
}
APP_SHOW_HELP_6_2 = SHOW_HELPS["app"] + "           [ pcp-prio ]\n"
"""6.2's dcb_app_help_show_flush() (iproute2 commit "dcb: add new pcp-prio parameter")."""


def object_help(obj: str, show: str, set_: str) -> str:
    """``dcb_OBJ_help()``: its own line, then the show and set parts, each after a blank line."""
    return f"Usage: dcb {obj} help\n\n{show}\n{set_}"


APP_KEYS = ("ethtype-prio", "default-prio", "dscp-prio", "stream-port-prio", "dgram-port-prio",
            "port-prio", "pcp-prio")
APP_KEYS_6_1 = APP_KEYS[:-1]
"""``pcp-prio`` arrived in 6.2 (iproute2 commit 3e2a96c9, "dcb: add new pcp-prio parameter")."""
APP_HELP_6_1 = (
    "Usage: dcb app { add | del | replace } dev STRING\n"
    "           [ default-prio PRIO ]\n"
    "           [ ethtype-prio ET:PRIO ]\n"
    "           [ stream-port-prio PORT:PRIO ]\n"
    "           [ dgram-port-prio PORT:PRIO ]\n"
    "           [ port-prio PORT:PRIO ]\n"
    "           [ dscp-prio INTEGER:PRIO ]\n"
    "\n"
    " where PRIO := { 0 .. 7 }\n"
    "       ET := { 0x600 .. 0xffff }\n"
    "       PORT := { 1 .. 65535 }\n"
    "       DSCP := { 0 .. 63 }\n"
)
"""``dcb_app_help_add()`` of 6.1.0."""
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


def _what(word: str, obj: str, help_: str | None = None) -> DcbError:
    """``What is "WORD"?`` and the help of where it was met (default: the object's set help)."""
    err(f'What is "{word}"?')
    err(help_ if help_ is not None else HELPS.get(obj, HELP))
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
                 stats: bool, iec: bool, version: tuple[int, int, int] = DEFAULT_VERSION) -> None:
        self.state = state
        self.printed = False
        self.version = version
        self.app_keys = APP_KEYS if version[:2] >= (6, 2) else APP_KEYS_6_1
        self.app_help = HELPS["app"] if version[:2] >= (6, 2) else APP_HELP_6_1
        self.as_json = as_json
        self.pretty = pretty
        self.numeric = numeric
        self.stats = stats
        self.iec = iec

    def _flush(self, emit: Emit) -> None:
        emit.flush(self.as_json, self.pretty)
        self.printed = True

    def _what_app(self, word: str) -> DcbError:
        err(f'What is "{word}"?')
        err(self.app_help)
        return DcbError(1)

    def show_help(self, obj: str) -> str:
        if obj == "app" and self.version[:2] >= (6, 2):
            return APP_SHOW_HELP_6_2
        return SHOW_HELPS.get(obj, HELP)

    def set_help(self, obj: str) -> str:
        return self.app_help if obj == "app" else HELPS.get(obj, HELP)

    def full_help(self, obj: str) -> str:
        """``dcb OBJ help``: the object's own line, its show part and its set part."""
        if obj not in SHOW_HELPS:
            return HELP
        return object_help(obj, self.show_help(obj), self.set_help(obj))

    def device(self, args: Args, obj: str, cmd: str = "set") -> str:
        """``dev DEV`` (``dcb_cmd_parse_dev``), checked against the emulated NICs; without it, the
        command's own help (its show or its set part)."""
        part = self.show_help(obj) if cmd in ("show", "flush") else self.set_help(obj)
        if not args or matches(args.peek(), "help"):
            err(part)
            raise DcbError(0)
        word = args.pop()
        if not matches(word, "dev"):
            err(f"Expected `dev DEV', not `{word}'")
            err(part)
            raise DcbError(1)
        dev = args.value()
        if dev not in self.state.netdevs():
            raise _fail("Attribute read: No such device")
        return dev

    def run(self, obj: str, args: Args) -> None:
        """Dispatch ``OBJECT COMMAND dev DEV ...``."""
        if not args or matches(args.peek(), "help"):
            err(self.full_help(obj))
            return
        cmd = args.pop()
        commands = ["show", "set"] if obj != "app" else ["show", "flush", "add", "del", "replace"]
        if obj in EXACT_OBJECTS:  # dcb_cmd_apptrust() compares with strcmp
            chosen = cmd if cmd in commands else None
        else:
            chosen = next((c for c in commands if matches(cmd, c)), None)
        if chosen is None:
            raise _what(cmd, obj, self.full_help(obj))
        dev = self.device(args, obj, chosen)
        if obj == "rewr":
            raise _fail("Attribute read: Operation not supported")
        if chosen != "show":  # every change is an RTM_SETDCB request: CAP_NET_ADMIN or EPERM
            self.state = cast(NodeState, NetlinkClient(self.state))
        handler: Callable[[str, str, Args], None] = getattr(self, f"_{obj}")
        try:
            handler(chosen, dev, args)
        except PermissionError as e:  # __dcb_set_attribute: perror("Attribute write")
            raise _fail(f"Attribute write: {os.strerror(e.errno or errno.EPERM)}") from None

    def _show(self, emit_all: Callable[[Emit], None], items: dict[str, Callable[[Emit], None]],
              args: Args, obj: str) -> None:
        emit = Emit()
        if not args:
            emit_all(emit)
        while args:
            word = args.pop()
            if matches(word, "help"):
                err(self.show_help(obj))
                return
            key = next((k for k in items if matches(word, k)), None)
            if key is None:
                raise _what(word, obj, self.show_help(obj))
            items[key](emit)
            emit.nl()
        self._flush(emit)

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
            wanted = self._app_filters(args) or list(self.app_keys)
            for key in ("ethtype-prio", "default-prio", "dscp-prio", "stream-port-prio",
                        "dgram-port-prio", "port-prio", "pcp-prio"):
                if key in wanted:
                    self._app_print(emit, key, table)
            self._flush(emit)
            return
        if cmd == "flush":  # dcb_cmd_app_flush: DEL of every listed entry of the selectors
            wanted = self._app_filters(args) or list(self.app_keys)
            selectors = {k.removesuffix("-prio") for k in wanted}
            self._write(self.state.del_app, dev, [e for e in table if e.selector in selectors])
            return
        entries = self._app_entries(args)
        self._app_change(cmd, dev, entries, table)

    def _app_filters(self, args: Args) -> list[str]:
        wanted = []
        while args:
            word = args.pop()
            key = next((k for k in self.app_keys if matches(word, k)), None)
            if key is None:
                raise self._what_app(word)
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
            err(self.app_help)
            raise DcbError(0)
        entries: list[AppEntry] = []
        while args:
            word = args.pop()
            key = next((k for k in self.app_keys if matches(word, k)), None)
            if key is None:
                raise self._what_app(word)
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

    @staticmethod
    def _write(change: Callable[[str, Sequence[AppEntry]], None], dev: str,
               entries: Sequence[AppEntry]) -> None:
        """One DCB_CMD_IEEE_SET/DEL; the driver's refusal is ``perror("Attribute write")``."""
        if not entries:
            return
        if any(e.selector != "dscp" for e in entries):  # mlx5e_dcbnl_ieee_setapp/delapp
            raise _fail("Attribute write: Invalid argument")
        try:
            change(dev, entries)
        except OSError as e:
            raise _fail(f"Attribute write: {os.strerror(e.errno or 0)}") from None

    def _app_change(self, cmd: str, dev: str, entries: list[AppEntry],
                    table: list[AppEntry]) -> None:
        if cmd == "add":
            self._write(self.state.add_app, dev, entries)
        elif cmd == "del":
            self._write(self.state.del_app, dev, entries)
        else:
            self._app_replace(dev, entries, table)

    def _app_replace(self, dev: str, entries: list[AppEntry], table: list[AppEntry]) -> None:
        """``dcb_cmd_app_replace``: add the entries not in the table, then delete the table's
        entries of the same selector and protocol with another priority.

        On mlx5 the add already replaced the DSCP entry (``mlx5e_dcbnl_ieee_setapp`` deletes the
        old one), so deleting the replaced entry gets ENOENT: the change is made, dcb exits 1.
        """
        new = [e for e in entries if e not in table]
        try:
            self._write(self.state.add_app, dev, new)
        except DcbError:
            err("Could not add new APP entries")
            raise
        replaced = [t for t in table
                    if any(e.selector == t.selector and e.protocol == t.protocol for e in entries)
                    and not any(e == t for e in entries)]
        try:
            self._write(self.state.del_app, dev, replaced)
        except DcbError:
            err("Could not remove replaced APP entries")
            raise

    # ---------------------------------------------------------------- apptrust

    def _apptrust(self, cmd: str, dev: str, args: Args) -> None:
        """``dcb/dcb_apptrust.c`` (6.2+) against mlx5, which has no APP trust ops."""
        if cmd == "show":
            # dcb_apptrust_get: the reply has no DCB_ATTR_DCB_APP_TRUST_TABLE (dcbnl_ieee_fill adds
            # it only with ops->dcbnl_getapptrust), so __dcb_get_attribute does
            # perror("Attribute not found") with errno untouched since the successful read.
            raise _fail("Attribute not found: Success")
        if not args:
            err(HELPS["apptrust"])
            return
        order: list[str] = []
        while args:
            word = args.pop()
            if word == "help":
                err(HELPS["apptrust"])
                return
            if word != "order":
                raise _what(word, "apptrust")
            while args and args.peek() in TRUST_SELECTORS:
                sel = args.pop()
                if sel in order:
                    err(f"Duplicate selector: {sel}")
                    raise _fail("Invalid list of selectors")
                order.append(sel)
        # dcbnl_ieee_set: DCB_ATTR_DCB_APP_TRUST_TABLE without ops->dcbnl_setapptrust
        raise _fail("Attribute write: Operation not supported")

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
            raise _fail("Attribute write: Invalid argument") from None

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
            self._flush(emit)
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
            raise _fail("Attribute write: Invalid argument")
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


LONG_OPTS = ["Version", "force", "batch=", "iec", "json", "Numeric", "pretty", "statistics",
             "netns=", "help"]
"""``main()``'s ``long_options`` (no ``--verbose``: ``-v`` is in the optstring but has no case)."""


def _getopt_error(e: getopt.GetoptError, help_text_: str) -> int:
    """glibc ``getopt_long``'s message (prefixed with ``argv[0]`` as invoked), then dcb's
    ``default:`` case."""
    prog = sys.argv[0] if Path(sys.argv[0]).name == "dcb" else "dcb"
    opt = e.opt
    if "requires argument" in e.msg:
        err(f"{prog}: option '--{opt}' requires an argument" if len(opt) > 1
            else f"{prog}: option requires an argument -- '{opt}'")
    elif len(opt) > 1:
        err(f"{prog}: unrecognized option '--{opt}'")
    else:
        err(f"{prog}: invalid option -- '{opt}'")
    err("Unknown option.")
    err(help_text_)
    return 1


def _global_options(argv: list[str], version: tuple[int, int, int],
                    help_: str) -> tuple[set[str], list[str]] | int:
    """Parse dcb's options anywhere on the line (glibc permutes argv): letters and the rest,
    or an exit status."""
    try:
        opts, rest = getopt.gnu_getopt(argv, "b:fhijn:psvNV", LONG_OPTS)
    except getopt.GetoptError as e:
        return _getopt_error(e, help_)
    for opt, _value in opts:  # the switch in main(), in order
        letter = opt.lstrip("-")[:1] if opt.startswith("--") else opt[1]
        if letter == "V":
            out("dcb utility, iproute2-" + ".".join(map(str, version)))
            return 0
        if letter == "h":
            err(help_)
            return 0
        if letter == "v":
            err("Unknown option.")
            err(help_)
            return 1
        if letter == "b":
            err("dcb: batch mode is not emulated")
            return 1
    flags = {o.lstrip("-")[:1] if o.startswith("--") else o[1] for o, _ in opts}
    return flags, rest


def host_version(state: NodeState) -> tuple[int, int, int]:
    """The host's iproute2 release (``node.json`` ``tools.iproute2``; Debian 12's by default)."""
    return parse_version(state.node.tools.get("iproute2", "6.1.0"))


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``dcb`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    node = state_or_host(state)
    version = host_version(node)
    objects = objects_of(version)
    help_ = help_text(objects)
    parsed = _global_options(argv, version, help_)
    if isinstance(parsed, int):
        return parsed
    flags, rest = parsed
    tool = Dcb(node, as_json="j" in flags, pretty="p" in flags, numeric="N" in flags,
               stats="s" in flags, iec="i" in flags, version=version)
    args = Args(rest)
    if not args or matches(args.peek(), "help"):
        err(help_)
        if tool.as_json:
            out("")
        return 0
    word = args.pop()
    obj = next((o for o in objects  # dcb_cmd(): matches() in order, strcmp for the newer ones
                if (word == o if o in EXACT_OBJECTS else matches(word, o))), None)
    code = 0
    try:
        if obj is None:
            raise _fail(f'Object "{word}" is unknown')
        tool.run(obj, args)
    except DcbError as e:
        code = e.code
    if tool.as_json and not tool.printed and code != 255:
        out("")  # dcb_fini -> delete_json_obj_plain() ends the (empty) JSON output with a newline
    return code
