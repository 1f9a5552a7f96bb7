"""perftest's command line (``getopt_long`` with GNU permutation), as ``ib_*_bw`` parse it.

Errors print exactly what Debian's perftest 6.06 prints (getopt's message, then
`` Invalid Command or flag.`` ... on stderr, the usage on stdout) and exit 1; ``-h`` and ``-V``
also exit 1 (formats.md §1.4).
"""

from __future__ import annotations

import dataclasses
import sys

from fabtune.sim.tools._common import err, out
from fabtune.sim.tools._perftest_help import HELP

VERSION = "6.06"
DEF_PORT = 18515
DEF_SIZE = 65536
MAX_SIZE = 2147483647

# short option letter -> (long name, takes an argument)
SHORT: dict[str, tuple[str, bool]] = {
    "a": ("all", False), "b": ("bidirectional", False), "c": ("connection", True),
    "d": ("ib-dev", True), "D": ("duration", True), "f": ("margin", True), "F": ("CPU-freq", False),
    "h": ("help", False), "i": ("ib-port", True), "I": ("inline_size", True),
    "l": ("post_list", True), "L": ("hop_limit", True), "m": ("mtu", True), "n": ("iters", True),
    "N": ("noPeak", False), "O": ("dualport", False), "p": ("port", True), "q": ("qp", True),
    "Q": ("cq-mod", True), "R": ("rdma_cm", False), "s": ("size", True), "S": ("sl", True),
    "t": ("tx-depth", True), "T": ("tos", True), "u": ("qp-timeout", True), "V": ("version", False),
    "w": ("limit_bw", True), "W": ("report-counters", True), "x": ("gid-index", True),
    "y": ("limit_msgrate", True), "z": ("com_rdma_cm", False),
}
LONG_ONLY: dict[str, bool] = {
    "recv_post_list": True, "out_json": False, "out_json_file": True, "cpu_util": False,
    "dlid": True, "dont_xchg_versions": False, "force-link": True, "ipv6": False,
    "source_ip": True, "mmap": True, "mmap-offset": True, "mr_per_qp": False, "odp": False,
    "output": True, "use_old_post_send": False, "perform_warm_up": False, "pkey_index": True,
    "report-both": False, "report_gbits": False, "report-per-port": False, "reversed": False,
    "run_infinitely": False, "retry_count": True, "tclass": True, "use_hugepages": False,
    "wait_destroy": True, "disable_pcie_relaxed": False, "burst_size": True,
    "typical_pkt_size": True, "rate_limit": True, "rate_units": True, "rate_limit_type": True,
    "use_cuda": True, "log_dci_streams": True, "log_active_dci_streams": True, "aes_xts": False,
    "encrypt_on_tx": False, "sig_before": False, "aes_block_size": True,
    "data_enc_keys_number": True, "kek_path": True, "credentials_path": True,
    "data_enc_key_app_path": True,
}
LONG: dict[str, bool] = {**dict(SHORT.values()), **LONG_ONLY}
LONG_TO_SHORT = {name: letter for letter, (name, _) in SHORT.items()}
# Options perftest keeps in a uint8_t (the GID index; the GRH traffic class, as in
# struct ibv_global_route): the value wraps before any check (seen on Debian's ib_write_bw 6.06).
BYTE_FIELDS = frozenset(("gid-index", "tclass"))
# The parser's own range checks: option -> (low, high or None, the line it prints). As Debian 12's
# perftest 6.06 prints them (tests/fidelity runs the real ib_write_bw beside this parser); the port
# (-p), the GID index's type, --tclass and --mtu are not checked by the parser at all.
RANGES: dict[str, tuple[int, int | None, str]] = {
    "size": (1, MAX_SIZE, f" Message Size should be between 1 and {MAX_SIZE}"),
    "qp": (1, 16384, " num of Qps should be between 1 and 16384"),
    "iters": (5, 100000000, " Iteration num should be between 5 and 100000000"),
    "sl": (0, 15, " Only 15 Service levels"),
    "ib-port": (1, None, "IB Port can't be less than 1"),
    "tx-depth": (1, 15000, " Tx depth should be between 1 and 15000"),
    "gid-index": (0, 64, " Gid index should be between 0 and 64"),
    "tos": (0, 255, " TOS should be between 0 and 255"),
    "margin": (0, None, " Margin must be non-negative"),
}
DEF_DURATION = 5  # perftest's DEF_DURATION: the duration a run without -D still validates -f against


class ParseExit(Exception):
    """The parser already printed its message; exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclasses.dataclass(frozen=True)
class PerftestArgs:
    """What one ``ib_*_bw`` run was asked to do."""

    prog: str
    host: str | None = None
    dev: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    size: int = DEF_SIZE
    all_sizes: bool = False
    iters: int = 5000
    duration: int | None = None
    margin: int | None = None
    qps: int = 1
    bidirectional: bool = False
    mtu: int | None = None
    port: int = DEF_PORT
    rdma_cm: bool = False
    comm_rdma_cm: bool = False
    tos: int | None = None
    tclass: int | None = None
    sl: int = 0
    report_gbits: bool = False
    no_peak: bool = False
    out_json: bool = False
    out_json_file: str = "perftest_out.json"
    use_cuda: int | None = None
    tx_depth: int = 128

    @property
    def is_server(self) -> bool:
        """True without a host argument (the side that waits)."""
        return self.host is None


def usage(prog: str) -> None:
    """Print perftest's usage text on stdout."""
    sys.stdout.write(HELP[prog].replace("{prog}", prog))


def _bad_flag(prog: str, message: str) -> ParseExit:
    usage(prog)
    err(f"{prog}: {message}")
    err(" Invalid Command or flag.")
    err(" Please check command line and run again.\n")
    err(" Parser function exited with Error")
    return ParseExit(1)


def _split(prog: str, argv: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """GNU getopt_long: (option long name, value) pairs and the operands, in order."""
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            operands += argv[i:]
            break
        if arg.startswith("--"):
            i = _long(prog, arg, argv, i, opts)
        elif arg.startswith("-") and len(arg) > 1:
            i = _short(prog, arg, argv, i, opts)
        else:
            operands.append(arg)
    return opts, operands


def _long(prog: str, arg: str, argv: list[str], i: int, opts: list[tuple[str, str | None]]) -> int:
    name, eq, value = arg[2:].partition("=")
    hits = [n for n in LONG if n == name] or [n for n in LONG if n.startswith(name)]
    if len(hits) != 1:
        raise _bad_flag(prog, f"unrecognized option '{arg}'" if not hits else
                        f"option '{arg}' is ambiguous")
    full = hits[0]
    if not LONG[full]:
        if eq:
            raise _bad_flag(prog, f"option '--{full}' doesn't allow an argument")
        opts.append((full, None))
        return i
    if not eq:
        if i >= len(argv):
            raise _bad_flag(prog, f"option '--{full}' requires an argument")
        value, i = argv[i], i + 1
    opts.append((full, value))
    return i


def _short(prog: str, arg: str, argv: list[str], i: int, opts: list[tuple[str, str | None]]) -> int:
    pos = 1
    while pos < len(arg):
        letter = arg[pos]
        pos += 1
        if letter not in SHORT:
            raise _bad_flag(prog, f"invalid option -- '{letter}'")
        name, takes = SHORT[letter]
        if not takes:
            opts.append((name, None))
            continue
        if pos < len(arg):
            opts.append((name, arg[pos:]))
        elif i < len(argv):
            opts.append((name, argv[i]))
            i += 1
        else:
            raise _bad_flag(prog, f"option requires an argument -- '{letter}'")
        break
    return i


def _number(value: str) -> int:
    """C ``strtol(optarg, NULL, 0)``: leading number in any base, 0 when none."""
    text = value.strip()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    base, digits = 10, "0123456789"
    if text.lower().startswith("0x"):
        base, digits, text = 16, "0123456789abcdef", text[2:]
    elif text.startswith("0") and len(text) > 1:
        base, digits = 8, "01234567"
    run = ""
    for ch in text.lower():
        if ch not in digits:
            break
        run += ch
    return sign * int(run, base) if run else 0


def _checked(name: str, value: str) -> int:
    number = _number(value)
    if name in BYTE_FIELDS:  # stored in a uint8_t first, then checked: -x 300 is GID index 44
        number &= 0xFF
    if name in RANGES:
        low, high, message = RANGES[name]
        if number < low or (high is not None and number > high):
            err(message)
            err(" Parser function exited with Error")
            raise ParseExit(1)
    return number


def _apply(args: dict[str, object], name: str, value: str | None) -> None:
    flags = {"all": "all_sizes", "bidirectional": "bidirectional", "rdma_cm": "rdma_cm",
             "com_rdma_cm": "comm_rdma_cm", "report_gbits": "report_gbits", "noPeak": "no_peak",
             "out_json": "out_json"}
    ints = {"ib-port": "ib_port", "gid-index": "gid_index", "size": "size", "iters": "iters",
            "qp": "qps", "mtu": "mtu", "port": "port", "tos": "tos", "tclass": "tclass", "sl": "sl",
            "use_cuda": "use_cuda", "tx-depth": "tx_depth", "margin": "margin"}
    if name in flags:
        args[flags[name]] = True
    elif name in ints and value is not None:
        args[ints[name]] = _checked(name, value)
    elif name == "ib-dev":
        args["dev"] = value
    elif name == "out_json_file":
        args["out_json_file"] = value
        args["out_json"] = True
    elif name == "duration" and value is not None:
        seconds = _number(value)
        if seconds <= 0:
            err(" Duration period must be positive")
            err(" Parser function exited with Error")
            raise ParseExit(1)
        args["duration"] = seconds


def _validate(parsed: PerftestArgs) -> None:
    if parsed.tos is not None and not parsed.rdma_cm:
        out(" TOS only valid for rdma_cm based QP and RawEth QP ")
        raise ParseExit(1)
    if parsed.all_sizes and parsed.duration is not None:
        out("-" * 87)
        err("Duration mode currently doesn't support running on all sizes.")
        raise ParseExit(1)
    if not _duration_s(parsed) > 2 * margin_s(parsed):
        out("-" * 87)
        err("please check that DURATION > 2*MARGIN")
        raise ParseExit(1)


def _duration_s(parsed: PerftestArgs) -> int:
    return DEF_DURATION if parsed.duration is None else parsed.duration


def margin_s(parsed: PerftestArgs) -> int:
    """perftest's margin: ``-f``, else a quarter of ``-D`` (whole seconds), else -1 (no -D, no -f).

    A ``-D`` run samples between its two margins and stops at ``-D`` (``catch_alarm``)."""
    if parsed.margin is not None:
        return parsed.margin
    return -1 if parsed.duration is None else parsed.duration // 4


def parse(prog: str, argv: list[str]) -> PerftestArgs:
    """Parse ``argv`` like perftest's ``parser()``.

    Raises:
        ParseExit: After printing help, version or an error (the exit status to use).
    """
    opts, operands = _split(prog, argv)
    names = [n for n, _ in opts]
    if "help" in names:
        usage(prog)
        raise ParseExit(1)
    if "version" in names:
        out(f"Version: {VERSION}")
        raise ParseExit(1)
    values: dict[str, object] = {"prog": prog, "iters": 5000 if prog == "ib_write_bw" else 1000}
    for name, value in opts:
        _apply(values, name, value)
    if operands:
        values["host"] = operands[0]
    parsed = PerftestArgs(**values)  # type: ignore[arg-type]
    _validate(parsed)
    return parsed
