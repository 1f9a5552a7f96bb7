"""Emulated ``mlnx_qos`` of mlnx-tools v25.07.0 (github.com/Mellanox/mlnx-tools, python/mlnx_qos;
optparse, ``--version`` says 1.2).

v25.07.0 is the first release without ``--defltprio`` and the ``default priority:`` lines
(commit 374d9b5, "mlnx_qos: remove unsupported flag 'defltprio'"); later releases change only
the interpreter line. Follows that script step by step: the same option grammar, the same order
of applying options (dcbx, cable_len, -P/-F, PFC, dscp2prio, trust, buffers, rate limit, ETS),
the same messages on stdout and exit status 1 on every error, and ``pretty_print`` at the end.
When a process named lldpad runs (``ps -e``), the script's warning line comes first.
The MLNX_OFED sysfs files exist (``is_trust_sysfs``), so trust, the DSCP map and buffers go
through ``/sys/class/net/IF/qos``: ``--dscp2prio set,D,P`` writes the map file, ``del`` and
``flush`` do nothing there (the script acts on them only through netlink); PFC, ETS and rate
limits go through DCB netlink (the node state). The dscp2prio lines list DSCPs in descending
order within a priority, as the netlink APP table returns them on a real host (fixtures).
An interface that is not an emulated mlx5 port fails the way netlink does for it: every feature
reports "not supported" and the command exits 1.

Privileges, as in mlnx-tools since "mlnx_qos: added messages for privilege based errors" (2024):
reading needs none (RTM_GETDCB and sysfs reads). A netlink change (DCBX, PFC, cable length, ETS)
without CAP_NET_ADMIN gets EPERM and prints ``Netlink error: Operation not permitted (1)``, exit 1
(the DCBX change is not caught by the script: a Python traceback, exit 1). A sysfs change (trust,
dscp2prio, buffers) by a non-root user fails to open the root-owned 0644 file (EACCES) and takes the
step's own message ("Priority trust state is not supported on your system", "dscp2prio command
failed", "Buffers commands error"), exit 1; a rate limit that cannot be set is only reported.
"""

from __future__ import annotations

import errno
import optparse
import os
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from fabtune.sim.node import (
    DCB_CAP_DCBX_HOST,
    PRIORITIES,
    Ets,
    NodeState,
)
from fabtune.sim.tools._common import err, net_admin, out, state_or_host

NETLINK_EPERM = f"Netlink error: {os.strerror(errno.EPERM)} ({errno.EPERM})"
"""How mlnx-tools' netlink.py reports the kernel's EPERM (an OSError it raises)."""

USAGE = "%prog -i <interface> [options]"


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _parser() -> optparse.OptionParser:
    p = optparse.OptionParser(prog="mlnx_qos", usage=USAGE, version="%prog 1.2")
    p.add_option("-f", "--pfc", dest="pfc", metavar="LIST",
                 help="Set priority flow control for each priority. LIST is comma separated "
                      "value for each priority starting from 0 to 7. Example: 0,0,0,0,1,1,1,1 "
                      "enable PFC on TC4-7")
    p.add_option("-F", "--specific_pfc", dest="specific_pfc", metavar="LIST",
                 help="Set priority flow control for specific priorities, x = keep.")
    p.add_option("-P", "--get_pfc", dest="get_pfc",
                 help="Get priority flow control status for specific priority.")
    p.add_option("-p", "--prio_tc", dest="prio_tc", metavar="LIST",
                 help="maps UPs to TCs. LIST is 8 comma separated TC numbers.")
    p.add_option("-s", "--tsa", dest="tsa", metavar="LIST",
                 help="Transmission algorithm for each TC: strict, ets and vendor.")
    p.add_option("-t", "--tcbw", dest="tc_bw", metavar="LIST",
                 help="Set minimal guaranteed %BW for ETS TCs. Percents must sum to 100.")
    p.add_option("-r", "--ratelimit", dest="ratelimit", metavar="LIST",
                 help="Rate limit for TCs (in Gbps).")
    p.add_option("-d", "--dcbx", dest="dcbx",
                 help="set dcbx mode to firmware controlled(fw) or OS controlled(os).")
    p.add_option("--trust", dest="trust", help="set priority trust state to pcp or dscp")
    p.add_option("--dscp2prio", dest="dscp2prio", action="append",
                 help="set/del a (dscp,prio) mapping, or 'flush' to delete all.")
    p.add_option("--cable_len", dest="cable_len",
                 help="set cable_len for buffer's xoff and xon thresholds")
    p.add_option("--prio2buffer", dest="prio2buffer", metavar="LIST",
                 help="maps priority to receive buffer.")
    p.add_option("--buffer_size", dest="buffer_size", metavar="LIST",
                 help="Set receive buffer size LIST is comma separated sizes for each buffer.")
    p.add_option("-i", "--interface", dest="intf", help="Interface name")
    p.add_option("-a", action="store_true", dest="printall", default=False,
                 help="Show all interface's TCs")
    return p


class _Run:
    """One invocation: the parsed options and the interface's state."""

    def __init__(self, parser: optparse.OptionParser, opts: optparse.Values,
                 state: NodeState) -> None:
        self.parser = parser
        self.o = opts
        self.state = state
        self.intf: str = opts.intf

    def fail(self, message: str, usage: bool = False) -> _Exit:
        out(message)
        if usage:
            self.parser.print_usage()
        return _Exit(1)

    def netlink_change(self) -> None:
        """An RTM_SETDCB request: without CAP_NET_ADMIN the script prints the EPERM and exits 1."""
        if not net_admin():
            raise self.fail(NETLINK_EPERM)

    def parse_int(self, text: str, low: int, high: int, what: str) -> int:
        try:
            value = int(text)
            if value < low or value > high:
                raise ValueError(f"{value} is not in the range {low}..{high}")
        except ValueError as e:
            raise self.fail(f"Bad value for {what}: {e}", usage=True) from None
        return value

    def parse_list(self, text: str, low: int, high: int, what: str, too_many: str) -> list[int]:
        values: list[int] = []
        for item in text.split(","):
            if len(values) >= PRIORITIES:
                raise self.fail(too_many)
            values.append(self.parse_int(item, low, high, what))
        return values

    # ------------------------------------------------------------------ steps

    def dcbx(self) -> None:
        mode = self.o.dcbx
        if mode is None:
            return
        flags = self.state.get_dcbx(self.intf)
        if mode in ("os", "fw") and not net_admin():  # set_dcbx's OSError is not caught
            err("Traceback (most recent call last):")
            err(f"OSError: {NETLINK_EPERM}")
            raise _Exit(1)
        if mode == "os":
            self.state.set_dcbx(self.intf, flags | DCB_CAP_DCBX_HOST)
        elif mode == "fw":
            self.state.set_dcbx(self.intf, flags & ~DCB_CAP_DCBX_HOST)
        elif mode != "get":
            raise self.fail("Invalid dcbx mode command. Refer to the help.")

    def cable_len(self) -> None:
        if self.o.cable_len:
            delay = self.parse_int(self.o.cable_len, 0, 0xFFFF, "cable_len")
            self.netlink_change()
            self.state.set_pfc(self.intf, delay=delay)

    def get_pfc(self) -> int | None:
        if not self.o.get_pfc:
            return None
        try:
            index = int(self.o.get_pfc)
        except ValueError:
            index = -1
        if index not in range(PRIORITIES):
            raise self.fail("pfc index must be in range of 0-7")
        out(str(self.state.get_pfc(self.intf).enabled[index]))
        return 0

    def specific_pfc(self) -> int | None:
        if not self.o.specific_pfc:
            return None
        items = self.o.specific_pfc.split(",")
        if len(items) != PRIORITIES:
            raise self.fail("pfc list must have 8 items")
        enabled = list(self.state.get_pfc(self.intf).enabled)
        for prio, item in enumerate(items):
            if item == "x":
                continue
            if item not in ("0", "1"):
                raise self.fail(f"Bad value for 'PFC': {item}")
            enabled[prio] = int(item)
        self.netlink_change()
        self.state.set_pfc(self.intf, enabled=enabled)
        return 0

    def pfc(self) -> None:
        if not self.o.pfc:
            return
        values = self.parse_list(self.o.pfc, 0, 1, "PFC", "Too many items for PFC")
        if len(values) != PRIORITIES:
            raise self.fail("pfc list must have 8 items")
        self.netlink_change()
        self.state.set_pfc(self.intf, enabled=values)

    def dscp2prio(self) -> None:
        cmds = self.o.dscp2prio or []
        if cmds and self.o.trust:
            raise self.fail("trust and dscp2prio commands cannot be used at the same time.")
        parsed: list[tuple[str, int, int]] = []
        for cmd in cmds:
            if cmd == "flush":
                parsed.append(("flush", 0, 0))
                continue
            try:
                action, dscp_s, prio_s = cmd.split(",")
                dscp, prio = int(dscp_s), int(prio_s)
            except ValueError:
                raise self.fail("Invalid dscp2prio command. Refer to the help.") from None
            if action not in ("set", "del") or dscp > 63 or prio > 7:
                raise _Exit(1)  # the script's sys.exit(1) escapes its except Exception: no message
            if dscp < 0 or prio < 0:  # unchecked there; the driver refuses the sysfs write
                raise self.fail("dscp2prio command failed")
            parsed.append((action, dscp, prio))
        try:
            for action, dscp, prio in parsed:
                if action == "set":  # is_trust_sysfs: written to qos/dscp2prio, trust unchanged
                    self.state.set_dscp2prio(self.intf, {dscp: prio})
        except OSError as e:  # the sysfs dscp2prio file cannot be written (EACCES for non-root)
            raise self.fail(NETLINK_EPERM if e.errno == errno.EPERM else "dscp2prio command failed") \
                from None

    def trust(self) -> str:
        wanted = self.o.trust
        if wanted and wanted not in ("dscp", "pcp"):
            raise self.fail("Invalid trust state command. Refer to the help.")
        if wanted and wanted != self.state.get_trust(self.intf):
            try:
                self.state.set_trust(self.intf, wanted)
            except OSError:  # the sysfs trust file cannot be written (EACCES for non-root)
                raise self.fail("Priority trust state is not supported on your system") from None
        return self.state.get_trust(self.intf)

    def buffers(self) -> None:
        if not (self.o.prio2buffer or self.o.buffer_size):
            return
        cur = self.state.get_buffers(self.intf)
        p2b, sizes = list(cur.prio2buffer), list(cur.sizes)
        if self.o.prio2buffer:
            for i, v in enumerate(self.parse_list(self.o.prio2buffer, 0, 7, "prio buffer",
                                                  "Too many items for prio2buffer")):
                p2b[i] = v
        if self.o.buffer_size:
            items = self.o.buffer_size.split(",")
            if len(items) > PRIORITIES:
                raise self.fail("Too many items for buffer_size")
            try:
                for i, item in enumerate(items):
                    sizes[i] = int(item)
                self.state.set_buffers(self.intf, p2b, sizes)
            except (ValueError, OSError):
                raise self.fail("Buffers commands error") from None
        else:
            try:
                self.state.set_buffers(self.intf, prio2buffer=p2b)
            except OSError:
                raise self.fail("Buffers commands error") from None

    def ratelimit(self) -> None:
        if not self.o.ratelimit:
            return
        values = self.parse_list(self.o.ratelimit, 0, 1000000, "ratelimit",
                                 "Too many items for ratelimit")
        if len(values) != PRIORITIES:
            raise self.fail("ratelimit must have 8 items")
        try:
            if not net_admin():
                raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
            self.state.set_maxrate(self.intf, [v * 1000 * 1000 for v in values])
        except OSError:  # caught and reported by the script, which carries on
            out("Rate limit is not supported on your system!")

    def ets(self) -> Ets:
        ets = self.state.get_ets(self.intf)
        tsa, bw, prio_tc = list(ets.tc_tsa), list(ets.tc_bw), list(ets.prio_tc)
        if self.o.tsa:
            tsa = self._parse_tsa(self.o.tsa)
        if self.o.tc_bw:
            bw = self._parse_bw(self.o.tc_bw, tsa)
        if self.o.prio_tc:
            prio_tc = self.parse_list(self.o.prio_tc, 0, 7, "UP => TC mapping",
                                      "Too many items in UP => TC mapping")
            if len(prio_tc) != PRIORITIES:
                raise self.fail("prio_tc list must have 8 items")
        if self.o.tsa or self.o.tc_bw or self.o.prio_tc:
            self.netlink_change()  # the kernel checks the capability before the request's values
            if "ets" in tsa and sum(b for b, t in zip(bw, tsa, strict=True) if t == "ets") != 100:
                raise self.fail("Netlink error: Bad value. see dmesg.")
            ets = replace(ets, tc_tsa=tuple(tsa), tc_bw=tuple(bw), prio_tc=tuple(prio_tc))
            self.state.set_ets(self.intf, ets)
        return ets

    def _parse_tsa(self, text: str) -> list[str]:
        tsa: list[str] = []
        for item in text.split(","):
            if len(tsa) >= PRIORITIES:
                raise self.fail("Too many items for TSA")
            if item not in ("strict", "ets", "vendor"):
                raise self.fail(str(("Bad TSA value: ", item)), usage=True)
            tsa.append(item)
        if len(tsa) != PRIORITIES:
            raise self.fail("tsa list must have 8 items")
        return tsa

    def _parse_bw(self, text: str, tsa: list[str]) -> list[int]:
        bw: list[int] = []
        for item in text.split(","):
            if len(bw) >= PRIORITIES:
                raise self.fail("Too many items for ETS BW")
            value = self.parse_int(item, 0, 100, "ETS BW")
            if tsa[len(bw)] != "ets" and value != 0:
                raise self.fail("ETS BW for a strict/vendor TC must be 0", usage=True)
            bw.append(value)
        if len(bw) != PRIORITIES:
            raise self.fail("tcbw list must have 8 items")
        return bw


def pretty_print(state: NodeState, intf: str, trust: str, ets: Ets, printall: bool) -> None:
    """Print the full QoS state of an interface as mlnx_qos's ``pretty_print`` does.

    Args:
        state: The node state.
        intf: The interface.
        trust: The trust state to report.
        ets: The ETS configuration to report.
        printall: Print all 8 TCs, also those without priorities (``-a``).
    """
    host = state.get_dcbx(intf) & DCB_CAP_DCBX_HOST
    out("DCBX mode: OS controlled" if host else "DCBX mode: Firmware controlled")
    out("Priority trust state: " + trust)
    if trust == "dscp":
        out("dscp2prio mapping:")
        _print_dscp2prio(state.get_dscp2prio(intf))
    buffers = state.get_buffers(intf)
    sizes = "".join(f"{s:d}," for s in buffers.sizes)
    out(f"Receive buffer size (bytes): {sizes}max_buffer_size={buffers.total}")
    pfc = state.get_pfc(intf)
    out(f"Cable len: {pfc.delay}")
    out("PFC configuration:")
    out("\tpriority    0   1   2   3   4   5   6   7")
    out("\tenabled     " + "".join(f"{v:d}   " for v in pfc.enabled))
    out("\tbuffer      " + "".join(f"{b:d}   " for b in buffers.prio2buffer))
    _print_tcs(ets, state.get_maxrate(intf), printall)


def _print_dscp2prio(mapping: list[int]) -> None:
    per_prio = [""] * PRIORITIES
    for dscp in range(len(mapping) - 1, -1, -1):
        per_prio[mapping[dscp]] += f"{dscp:02d},"
    for prio, text in enumerate(per_prio):
        pad = f"\tprio:{prio} dscp:"
        lines = []
        while len(text) > 24:
            lines.append(pad + text[:24])
            text = text[24:]
        if text:
            lines.append(pad + text)
        if lines:
            out("\n".join(lines))


def _print_tcs(ets: Ets, ratelimit: list[int], printall: bool) -> None:
    tc2up: dict[int, list[int]] = defaultdict(list)
    if printall:
        for tc in range(PRIORITIES):
            tc2up.setdefault(tc, [])
    for up, tc in enumerate(ets.prio_tc):
        tc2up[tc].append(up)
    for tc in sorted(tc2up):
        rate = "unlimited"
        if ratelimit[tc] > 0:
            rate = f"{ratelimit[tc] / 1000 / 1000:.1f} Gbps"
        msg = f"tc: {tc} ratelimit: {rate}, tsa: "
        tsa = ets.tc_tsa[tc]
        msg += f"ets, bw: {ets.tc_bw[tc]}%" if tsa == "ets" else (
            tsa if tsa in ("strict", "vendor") else "unknown")
        out(msg)
        for up in tc2up[tc]:
            out(f"\t priority:  {up}")


def _unsupported() -> int:
    out("Priority trust state is not supported on your system")
    out("Buffers commands are not supported on your system")
    out("Rate limit is not supported on your system!")
    out("ETS features are not supported on your system")
    return 1


def _apply(run: _Run) -> int:
    run.dcbx()
    run.cable_len()
    for early in (run.get_pfc, run.specific_pfc):
        code = early()
        if code is not None:
            return code
    run.pfc()
    run.dscp2prio()
    trust = run.trust()
    run.buffers()
    run.ratelimit()
    ets = run.ets()
    pretty_print(run.state, run.intf, trust, ets, bool(run.o.printall))
    return 0


PROC = Path("/proc")


def lldpad_running() -> bool:
    """Whether ``ps -e`` lists a process named lldpad (the script checks ``b'lldpad' in output``
    before it opens the interface, so the warning comes first whatever the command)."""
    for comm in PROC.glob("[0-9]*/comm"):
        try:
            if "lldpad" in comm.read_text():
                return True
        except OSError:
            continue  # the process ended
    return False


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``mlnx_qos`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    parser = _parser()
    try:
        opts, args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args:
        out("Bad arguments")
        parser.print_usage()
        return 1
    if opts.intf is None:
        out("Interface name is required")
        parser.print_usage()
        return 1
    if lldpad_running():
        out("****** WARNING: lldpad service is running and may overwrite your settings ******\n")
    node = state_or_host(state)
    if opts.intf not in node.netdevs():
        return _unsupported()
    try:
        return _apply(_Run(parser, opts, node))
    except _Exit as e:
        return e.code
