"""Emulated perftest bandwidth tools: ``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``.

Server (no host argument): listens on TCP ``-p`` (default 18515) on every address, prints the
``Waiting for client to connect...`` banner and serves one client. Client: connects to
``<host>:<port>`` once, as perftest's client does (names resolve through ``/etc/hosts``; a server
not listening yet gives perftest's ``Couldn't connect to <host>:<port>``). With ``-R`` (or ``-z``)
the exchange goes through rdma_cm as in perftest: the server opens no TCP socket but a listening
cm_id that ``rdma resource show cm_id`` lists (``_rdma_cm``). Both sides then swap their endpoint
(device, LID, GID, QPNs, PSNs) and their host's model config as JSON lines: the out-of-band
exchange. Both print the header block and address lines.

The client then registers its flow in the shared fabric directory for as long as the real run lasts,
from when a real client would have started it (the emulator's own Python start-up left out:
``startup_s``) and, at the end of its sampled window, runs the fabric model's ``p2p`` over every
flow that ran during that window, piece by piece (``segments``): perftest's bandwidth is the bytes
moved in the sampled window over its length, so a flow that shares a link with another for part of
the window reads the time-weighted mean of the shared and the unshared rate, and flows started
together (a pair round, an incast) share for the whole window. It then prints the table and sends
the result (and the server NIC's counter deltas) to the server, which prints the same table. With
``-D N`` the run lasts N seconds, as perftest's: ``catch_alarm`` moves from the warm-up margin
(``-f``, else N/4 whole seconds) to the sampled window and stops sampling one margin before N;
traffic flows for the whole N seconds, margins included, so other flows see it then too. Without
``-D`` (an iteration count) the real run lasts as long as its data takes; the emulator samples such
a flow for ``NO_DURATION_S``, its own choice of window, not a real tool's timing. The duration also
scales the counter deltas and the iteration count.

Model failures map to perftest's: a GID index outside the port's table fails the QP transition
(``Failed to modify QP <qpn> to RTR``, `` Unable to Connect the HCA's through the link``); a GID
that cannot be routed (RoCEv1 or link-local across L3, mixed versions) connects but every work
request times out (``Completion with error at client``, status 12). Exit status 0 on success and 1
on every error, ``-h`` and ``-V`` included (formats.md §1.4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import random
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fabtune.sim import observe, tools
from fabtune.sim.model import Flow, HostConfig, NicConfig, P2PRun, active_mtu, p2p
from fabtune.sim.model.p2p import flow_port
from fabtune.sim.model.qos import nic_prio
from fabtune.sim.model.results import Counters
from fabtune.sim.model.transport import best_gid
from fabtune.sim.node import FABRIC_DIR, NicDescription, NodeState
from fabtune.sim.tools import _counters, _fabric, _rdma_cm
from fabtune.sim.tools import _perftest_out as fmt
from fabtune.sim.tools._common import err, out, state_or_host
from fabtune.sim.tools._perftest_args import ParseExit, PerftestArgs, margin_s, parse

# A run without -D (an iteration count): sampled for this long from its start, then it ends (the
# emulator's own window; a real one lasts as long as its data takes).
NO_DURATION_S = 3.0
OOB_TIMEOUT_S = 60.0  # a silent peer ends the run with perftest's exchange error, never a traceback
STARTUP_MAX_S = 10.0  # at most this much start-up is left out of a flow's start
INTERPRETER_MAX_S = 1.0  # the interpreter's own start, fork to the launcher's first line, is shorter
ALL_SIZES = tuple(2**k for k in range(1, 24))


@dataclasses.dataclass
class Ctx:
    """One run: its arguments, this host's state and NIC, and the fabric directory."""

    args: PerftestArgs
    state: NodeState
    nic: NicDescription
    nic_index: int
    host: HostConfig
    fabric_dir: Path
    startup_s: float = 0.0  # the emulator's own start-up (``startup_s``): a flow's start leaves it out

    @property
    def nic_config(self) -> NicConfig:
        """This end's NIC as the model sees it."""
        return self.host.nics[self.nic_index]

    @property
    def hostname(self) -> str:
        """This host's name (``node.json``)."""
        return self.state.node.hostname


# --------------------------------------------------------------------------- setup


def _pick_nic(state: NodeState, args: PerftestArgs) -> tuple[NicDescription, int] | None:
    """The device of ``-d`` (default: the first one), printing perftest's error if absent."""
    devices = state.rdma_devices()
    if not devices:
        err(" Did not detect devices ")
        err(" If device exists, check if driver is up")
        err(" Unable to find the Infiniband/RoCE device")
        return None
    name = args.dev or devices[0]
    for index, nic in enumerate(state.node.nics):
        if nic.dev == name:
            if state.operstate(nic.netdev) != "up":
                err(f" Port number {args.ib_port} state is Down")
                err(" Couldn't set the link layer")
                return None
            return nic, index
    err(f"IB device {name} not found")
    err(" Unable to find the Infiniband/RoCE device")
    return None


def gid_index(ctx: Ctx) -> int | None:
    """The GID index used and printed: ``-x``, or perftest's best GID on Ethernet."""
    if ctx.args.gid_index is not None:
        return ctx.args.gid_index
    if ctx.nic.is_ib:
        return None
    return best_gid(ctx.nic_config)


def local_side(ctx: Ctx) -> fmt.Side:
    """This end's address data (random QPNs/PSNs/keys, as a fresh QP would get)."""
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))  # noqa: S311 (QPNs, not secrets)
    table = ctx.state.gid_table(ctx.nic.dev)
    index = gid_index(ctx)
    gid = table[index].gid if index is not None and 0 <= index < len(table) else table[0].gid
    mtu = active_mtu(ctx.nic_config)
    if ctx.args.mtu is not None:
        mtu = min(mtu, ctx.args.mtu)
    return fmt.Side(
        host=ctx.hostname, dev=ctx.nic.dev, nic_index=ctx.nic_index, link_layer=ctx.nic.link_layer,
        lid=ctx.nic.lid, gid=gid, qpns=tuple(rng.randrange(0x40, 0x4000) for _ in range(ctx.args.qps)),
        psns=tuple(rng.randrange(0, 0xFFFFFF) for _ in range(ctx.args.qps)),
        rkey=rng.randrange(0x1000, 0xFFFFFF), vaddr=0x7F0000000000 + rng.randrange(0, 2**28) * 4096,
        mtu=mtu,
    )


# --------------------------------------------------------------------------- OOB exchange


def send_msg(sock: socket.socket, msg: dict[str, Any]) -> None:
    """Send one JSON line."""
    sock.sendall(json.dumps(msg).encode() + b"\n")


def recv_msg(reader: Any) -> dict[str, Any] | None:
    """Read one JSON line (None when the peer closed, reset or stopped answering)."""
    try:
        line = reader.readline()
        data: dict[str, Any] | None = json.loads(line) if line else None
    except (OSError, ValueError):
        return None
    return data


def hello(ctx: Ctx, side: fmt.Side) -> dict[str, Any]:
    """This end's half of the exchange: endpoint, model config and the symmetric parameters."""
    a = ctx.args
    return {"side": side.to_dict(), "host": observe.to_json(ctx.host),
            "params": {"size": a.size, "qps": a.qps, "all": a.all_sizes, "duration": a.duration,
                       "iters": a.iters}}


def _print_setup(ctx: Ctx, local: fmt.Side, remote: fmt.Side, with_header: bool = True) -> None:
    if with_header:
        for line in fmt.header(ctx.args, local, gid_index(ctx)):
            out(line)
    for line in fmt.addresses(ctx.args, local, "local") + fmt.addresses(ctx.args, remote, "remote"):
        out(line)
    sys.stdout.flush()


# --------------------------------------------------------------------------- the model


def sampled_window(args: PerftestArgs) -> tuple[float, float, float]:
    """Seconds from a run's start to its sampled window's start and end, and to the run's end.

    ``-D N``: perftest's ``catch_alarm`` samples between a margin (``-f``, else N/4 whole seconds)
    and N minus that margin, and stops at N. Without ``-D``: the emulator's ``NO_DURATION_S``."""
    if args.duration is None:
        return 0.0, NO_DURATION_S, NO_DURATION_S
    margin = float(max(margin_s(args), 0))
    return margin, args.duration - margin, float(args.duration)


@dataclasses.dataclass(frozen=True)
class Segment:
    """A piece of a flow's sampled window: its share of the window, and the flows that run
    throughout it (the flow itself included), in the fabric directory's order."""

    share: float
    records: tuple[dict[str, Any], ...]


def segments(
    record: dict[str, Any], records: list[dict[str, Any]], window: tuple[float, float]
) -> list[Segment]:
    """``record``'s sampled ``window`` (absolute times) cut where another flow starts or stops;
    pieces with the same flows running are merged. perftest reports the bytes of the sampled window
    over its length, so each piece counts by its share of the window."""
    t0, t1 = window
    mine = str(record["key"])
    if all(str(r["key"]) != mine for r in records):
        records = [*records, record]
    cuts = {t0, t1}
    for r in records:
        cuts.update(t for t in (float(r["start"]), float(r["until"])) if t0 < t < t1)
    edges = sorted(cuts)
    pieces = list(itertools.pairwise(edges)) if t1 > t0 else [(t0, t0)]
    shares: dict[tuple[str, ...], float] = {}
    running: dict[tuple[str, ...], tuple[dict[str, Any], ...]] = {}
    for a, b in pieces:
        mid = (a + b) / 2
        during = tuple(r for r in records
                       if str(r["key"]) == mine or float(r["start"]) <= mid <= float(r["until"]))
        keys = tuple(str(r["key"]) for r in during)
        shares[keys] = shares.get(keys, 0.0) + ((b - a) / (t1 - t0) if t1 > t0 else 1.0)
        running[keys] = during
    return [Segment(share, running[keys]) for keys, share in shares.items()]


def _flow_record(ctx: Ctx, peer_hello: dict[str, Any], start: float) -> dict[str, Any]:
    """The flow as published in ``flows/`` (client and server ends, data direction)."""
    a = ctx.args
    me = {"host": ctx.hostname, "nic": ctx.nic_index, "config": observe.to_json(ctx.host)}
    peer_side = fmt.Side.from_dict(peer_hello["side"])
    peer = {"host": peer_side.host, "nic": peer_side.nic_index, "config": peer_hello["host"]}
    src, dst = (peer, me) if a.prog == "ib_read_bw" else (me, peer)
    return {
        "key": f"{ctx.hostname}-{os.getpid()}-{a.port}", "start": start,
        "until": start + sampled_window(a)[2], "prog": a.prog, "client": ctx.hostname,
        "server": peer_side.host, "src": src, "dst": dst, "size": a.size, "qps": a.qps,
        "tclass": a.tos if a.rdma_cm else a.tclass, "rdma_cm": a.rdma_cm,
        "gid_index": a.gid_index, "use_cuda": a.use_cuda is not None,
        "bidirectional": a.bidirectional, "sl": a.sl,
    }


def _flows(view: observe.FabricView, records: list[dict[str, Any]]) -> list[tuple[str, Flow]]:
    """Model flows of the records (two per bidirectional record), tagged with their key."""
    out_flows: list[tuple[str, Flow]] = []
    for r in records:
        src, dst = view.host_index(r["src"]["host"]), view.host_index(r["dst"]["host"])
        if src < 0 or dst < 0:
            continue
        flow = Flow(src, dst, int(r["src"]["nic"]), int(r["dst"]["nic"]), int(r["size"]),
                    int(r["qps"]), r["tclass"], bool(r["rdma_cm"]), r["gid_index"], bool(r["use_cuda"]),
                    int(r.get("sl") or 0))
        out_flows.append((str(r["key"]), flow))
        if r.get("bidirectional"):
            back = dataclasses.replace(flow, src_host=dst, dst_host=src, src_nic=flow.dst_nic,
                                       dst_nic=flow.src_nic)
            out_flows.append((str(r["key"]), back))
    return out_flows


def _hosts(view: observe.FabricView, records: list[dict[str, Any]]) -> tuple[HostConfig, ...]:
    """Every testbed host in order; those in a flow with their latest published config."""
    configs: dict[str, HostConfig] = {}
    for r in records:
        for end in (r["src"], r["dst"]):
            configs[str(end["host"])] = observe.host_from_json(end["config"])
    return tuple(configs.get(h, HostConfig(name=h, nics=())) for h in view.hosts)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the model says about this client's flow."""

    rows: list[fmt.Row]
    failure: str | None
    client_deltas: dict[str, int]
    server_deltas: dict[str, int]


def _sizes(args: PerftestArgs) -> tuple[int, ...]:
    return ALL_SIZES if args.all_sizes else (args.size,)


def _iters(args: PerftestArgs, size: int, gbps: float) -> int:
    if args.duration is None or gbps <= 0:
        return args.iters
    return int(gbps * 1e9 / 8 * args.duration / size)


def _seconds(rows: list[fmt.Row], duration: int | None) -> float:
    if duration is not None:
        return float(duration)
    return sum(r.iters * r.size * 8 / (r.gbps * 1e9) for r in rows if r.gbps > 0)


def _sized(tagged: list[tuple[str, Flow]], key: str, size: int) -> tuple[list[Flow], list[int]]:
    """The model flows with this run's at ``size``, and the indices of this run's (two when
    bidirectional)."""
    mine = [i for i, (k, _) in enumerate(tagged) if k == key]
    sized = [dataclasses.replace(f, msg_size=size) if i in mine else f for i, (_, f) in enumerate(tagged)]
    return sized, mine


def run_model(ctx: Ctx, record: dict[str, Any], records: list[dict[str, Any]], run_index: int,
              window: tuple[float, float]) -> Outcome:
    """Run ``p2p`` at each size of this run over each piece of its sampled ``window`` (``segments``:
    the flows running then); the time-weighted rows and this run's counter deltas."""
    view = observe.fabric_view(ctx.fabric_dir)
    pieces = segments(record, records, window)
    fabric = observe.fabric_config(view, _hosts(view, [r for p in pieces for r in p.records]))
    tagged = [(p.share, _flows(view, list(p.records))) for p in pieces]
    key = str(record["key"])
    rows: list[fmt.Row] = []
    for size in _sizes(ctx.args):
        gbps = 0.0
        for share, flows_of in tagged:
            flows, mine = _sized(flows_of, key, size)
            run = p2p(fabric, flows, run_index)
            failure = next((run.results[i].failure for i in mine if run.results[i].failure), None)
            if failure is not None:
                return Outcome([], failure, {}, {})
            gbps += share * sum(run.results[i].goodput_gbps for i in mine)
        rows.append(fmt.Row(size, _iters(ctx.args, size, gbps), gbps))
    secs = _seconds(rows, ctx.args.duration)
    parts = []
    for share, flows_of in tagged:
        flows, mine = _sized(flows_of, key, rows[-1].size)
        parts.append((p2p(fabric, flows, run_index, duration_s=secs * share), flows, mine[0]))
    return _with_deltas(ctx, fabric.hosts, parts, rows=rows)


def _share(run: P2PRun, flows: list[Flow], ref: tuple[int, int]) -> Counters:
    users = [f for f, r in zip(flows, run.results, strict=True)
             if r.failure is None and ref in ((f.src_host, f.src_nic), (f.dst_host, f.dst_nic))]
    return _counters.scale(run.counters.get(ref, Counters()), 1 / max(len(users), 1))


def _with_deltas(ctx: Ctx, hosts: tuple[HostConfig, ...], parts: list[tuple[P2PRun, list[Flow], int]], *,
                 rows: list[fmt.Row]) -> Outcome:
    """Counter deltas of this run for the client's and the server's NIC: each piece's model
    deltas (``parts``: its run, its flows and this run's index among them) and the traffic."""
    _, first, mine = parts[0]
    flow = first[mine]
    tx_nic = hosts[flow.src_host].nics[flow.src_nic]
    tos = flow.tclass if flow.tclass is not None else (tx_nic.roce_tos if flow.rdma_cm else 0)
    prio = 0 if tx_nic.link_layer == "InfiniBand" else nic_prio(flow_port(flow, tx_nic), tos)
    nbytes = int(rows[-1].gbps * 1e9 / 8 * _seconds(rows, ctx.args.duration)) if rows else 0
    mtu = active_mtu(tx_nic)
    src, dst = (flow.src_host, flow.src_nic), (flow.dst_host, flow.dst_nic)
    tx = _counters.merge(*(_counters.model_deltas(_share(run, flows, src)) for run, flows, _ in parts),
                         _counters.traffic_deltas("tx", prio, nbytes, mtu))
    rx = _counters.merge(*(_counters.model_deltas(_share(run, flows, dst)) for run, flows, _ in parts),
                         _counters.traffic_deltas("rx", prio, nbytes, mtu))
    client_is_src = ctx.args.prog != "ib_read_bw"
    return Outcome(rows, None, tx if client_is_src else rx, rx if client_is_src else tx)


# --------------------------------------------------------------------------- results and failures


def print_table(ctx: Ctx, local: fmt.Side, rows: list[fmt.Row], *, with_header: bool = True) -> None:
    """The result table (and the ``--out_json`` report)."""
    if with_header:
        for line in fmt.table_header(ctx.args):
            out(line)
    for row in rows:
        out(fmt.format_row(ctx.args, row))
    out(fmt.RESULT_LINE)
    if ctx.args.out_json:
        fmt.write_json_report(ctx.args, local, gid_index(ctx), rows)


def print_failure(ctx: Ctx, failure: str, local: fmt.Side, is_client: bool) -> None:
    """perftest's messages for a connection the model says cannot work."""
    if failure == "timeout":
        if is_client:
            for line in fmt.table_header(ctx.args):
                out(line)
            sys.stdout.flush()
            err(" Completion with error at client")
            err(" Failed status transport retry counter exceeded (12): wr_id 0 syndrom 0x81")
            err(f" scnt={ctx.args.tx_depth}, ccnt=0")
        else:
            err(" Failed to exchange data between server and clients")
        return
    err(f"Failed to modify QP {local.qpns[0]} to RTR")
    err(" Unable to Connect the HCA's through the link")


def _warn_peak(args: PerftestArgs) -> None:
    if not fmt.measures_peak(args):
        out(fmt.PEAK_WARNING)


# --------------------------------------------------------------------------- server


def _listen(port: int) -> socket.socket | None:
    """perftest's TCP control socket (``ethernet_server_connect``, without ``-R``/``-z``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))  # noqa: S104 (perftest listens on every address)
        sock.listen(1)
    except OSError:
        sock.close()
        err(f"Couldn't listen to port {port}")
        err(" Unable to open file descriptor for socket connection")
        err(" Unable to init the socket connection")
        return None
    return sock


def uses_cm(args: PerftestArgs) -> bool:
    """Whether the control exchange goes through rdma_cm, not a TCP socket.

    ``-R`` sets ``work_rdma_cm`` and then ``use_rdma_cm``, ``-z`` sets ``use_rdma_cm`` (perftest
    4.5-0.17 ``src/perftest_parameters.c`` lines 2441-2442 and 1274-1294); ``establish_connection``
    takes ``rdma_server_connect``/``rdma_client_connect`` when ``use_rdma_cm`` is set, the TCP
    ``ethernet_*_connect`` otherwise (``src/perftest_communication.c`` lines 1350-1370).
    """
    return args.rdma_cm or args.comm_rdma_cm


@contextlib.contextmanager
def _server_socket(ctx: Ctx) -> Iterator[socket.socket | None]:
    """The listening end: an RDMA CM listener with ``-R``/``-z`` (no TCP socket), else TCP."""
    if not uses_cm(ctx.args):
        sock = _listen(ctx.args.port)
        try:
            yield sock
        finally:
            if sock is not None:
                sock.close()
        return
    addresses = [nic.ipv4 for nic in ctx.state.node.nics if nic.ipv4]
    with _rdma_cm.listen(ctx.fabric_dir, ctx.hostname, ctx.args.port, addresses,
                         ctx.state.rdma_devices()) as sock:
        if sock is None:
            # rdma_server_connect: rdma_bind_addr fails on a port a live cm_id holds (lines 1141-1144)
            err(" rdma_bind_addr failed")
            err(" Unable to perform rdma_server function")
            err(" Unable to init the socket connection")
        yield sock


def serve(ctx: Ctx) -> int:
    """The server side: banner, one client, same header, the client's result."""
    with _server_socket(ctx) as listener:
        if listener is None:
            return 1
        local = local_side(ctx)
        _warn_peak(ctx.args)
        if ctx.args.rdma_cm:
            for line in fmt.header(ctx.args, local, gid_index(ctx)):
                out(line)
        else:
            for line in fmt.BANNER:
                out(line)
        sys.stdout.flush()
        conn, _ = listener.accept()
    conn.settimeout(OOB_TIMEOUT_S)
    with conn, conn.makefile("r") as reader:
        peer = recv_msg(reader)
        if peer is None:
            err(" Failed to exchange data between server and clients")
            return 1
        send_msg(conn, hello(ctx, local))
        _print_setup(ctx, local, fmt.Side.from_dict(peer["side"]), with_header=not ctx.args.rdma_cm)
        for line in fmt.table_header(ctx.args):
            out(line)
        sys.stdout.flush()
        return _server_result(ctx, local, recv_msg(reader))


def _server_result(ctx: Ctx, local: fmt.Side, msg: dict[str, Any] | None) -> int:
    if msg is None:
        err(" Failed to exchange data between server and clients")
        return 1
    if "failure" in msg:
        print_failure(ctx, str(msg["failure"]), local, is_client=False)
        return 1
    rows = [fmt.Row(int(s), int(i), float(g)) for s, i, g in msg["rows"]]
    print_table(ctx, local, rows, with_header=False)
    _counters.apply(ctx.state, ctx.nic.netdev, {str(k): int(v) for k, v in msg["deltas"].items()})
    return 0


# --------------------------------------------------------------------------- client


def _addresses(host: str, port: int) -> list[tuple[Any, ...]] | None:
    try:
        return [info[4] for info in socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)]
    except socket.gaierror:
        err("Problem in resolving basic address and port")
        return None


def _try_connect(family: int, addr: Any) -> socket.socket | None:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.connect(addr)
    except OSError:
        sock.close()
        return None
    sock.settimeout(OOB_TIMEOUT_S)
    return sock


def _connect(ctx: Ctx) -> socket.socket | None:
    """Connect to the server, once, as perftest does: a server not listening yet fails the client.

    Without ``-R``/``-z``: TCP to ``<host>:<port>``, each address in turn (``ethernet_client_connect``,
    perftest_communication.c: no retry). With them: the RDMA CM listener that answers the host's
    IPv4 address on the port (``rdma_client_connect``, lines 902-1060: a REJECTED event fails it;
    ``retry_rdma_connect`` exists but no test program calls it).
    """
    host, port = ctx.args.host or "", ctx.args.port
    addrs = _addresses(host, port)
    if addrs is None:
        return None
    for addr in addrs:
        if uses_cm(ctx.args):
            paths = _rdma_cm.sockets_for(ctx.fabric_dir, str(addr[0]), port)
            sock = next(filter(None, (_try_connect(socket.AF_UNIX, str(p)) for p in paths)), None)
        else:
            sock = _try_connect(socket.AF_INET, addr)
        if sock is not None:
            return sock
    _connect_failed(ctx)
    return None


def _connect_failed(ctx: Ctx) -> None:
    if uses_cm(ctx.args):
        # no listener: the CM REQ is rejected, RDMA_CM_EVENT_REJECTED (8), lines 1040-1050 and 1353-1357
        err("Unexpected CM event bl blka 8")
    else:
        err(f"Couldn't connect to {ctx.args.host}:{ctx.args.port}")


def client(ctx: Ctx) -> int:
    """The client side: connect, exchange, run the model, print and report to the server."""
    assert ctx.args.host is not None
    sock = _connect(ctx)
    if sock is None:
        if uses_cm(ctx.args):
            err(" Unable to perform rdma_client function")
        else:
            err(" Unable to open file descriptor for socket connection")
        err(" Unable to init the socket connection")
        return 1
    local = local_side(ctx)
    _warn_peak(ctx.args)
    with sock, sock.makefile("r") as reader:
        send_msg(sock, hello(ctx, local))
        peer = recv_msg(reader)
        if peer is None:
            err(" Failed to exchange data between server and clients")
            return 1
        _print_setup(ctx, local, fmt.Side.from_dict(peer["side"]))
        outcome = _measure(ctx, peer)
        if outcome.failure is not None:
            send_msg(sock, {"failure": outcome.failure})
            print_failure(ctx, outcome.failure, local, is_client=True)
            return 1
        print_table(ctx, local, outcome.rows)
        _counters.apply(ctx.state, ctx.nic.netdev, outcome.client_deltas)
        send_msg(sock, {"rows": [[r.size, r.iters, r.gbps] for r in outcome.rows],
                        "deltas": outcome.server_deltas})
    return 0


def startup_s() -> float:
    """The emulator's own start-up so far: how long ago this process began.

    A real perftest is a C program: its traffic starts milliseconds after it is started, once the
    device is open, rdma_cm has resolved and the exchange is done. The emulator first starts a
    Python interpreter and imports the fabric model: tens of milliseconds idle, more on a loaded
    machine, and different for each process. That time is not the tool's: a flow's start leaves it
    out (measured when ``run`` begins), so clients started at one instant run from that instant,
    as real ones would; the connection and the exchange that follow count.

    The process (the launcher's, where the tool server runs the tool) began when it was forked
    (``/proc/PID/stat``'s starttime against ``CLOCK_BOOTTIME``), unless its launcher's first line
    (``launched_at``) came more than ``INTERPRETER_MAX_S`` later: then another program ran in it
    first and exec'd the tool (a start barrier that waited), and the launcher's time is the start.
    0 when the tool was not started through a launcher; at most ``STARTUP_MAX_S``."""
    launched = tools.launched_at()
    if launched is None:
        return 0.0
    now = time.time()
    forked = _forked_at(now)
    began = forked if forked is not None and 0.0 <= launched - forked <= INTERPRETER_MAX_S else launched
    return min(max(now - began, 0.0), STARTUP_MAX_S)


def _forked_at(now: float) -> float | None:
    """When this tool's process was forked (wall clock), from /proc; None where /proc cannot say.
    Where the tool server runs the tool, the process is its launcher (the one its caller started)."""
    ticks = _rdma_cm.proc_start(tools.launcher_pid() or "self")  # clock ticks since boot
    if ticks is None or not ticks.isdigit():
        return None
    return now - (time.clock_gettime(time.CLOCK_BOOTTIME) - int(ticks) / os.sysconf("SC_CLK_TCK"))


def _measure(ctx: Ctx, peer: dict[str, Any]) -> Outcome:
    """Register the flow, run to the end of its sampled window, run the model over the flows of
    that window, and run on to the end. The record stays for later flows whose windows overlap
    this run's (pruned ``_fabric.STALE_S`` after its end); a run that dies early takes it away."""
    start = time.time() - ctx.startup_s
    begin, end, stop = sampled_window(ctx.args)
    record = _flow_record(ctx, peer, start)
    path = _fabric.register_flow(record, str(record["key"]), ctx.fabric_dir)
    try:
        time.sleep(max(0.0, start + end - time.time()))
        records = _fabric.flows_during(start + begin, start + end, fabric_dir=ctx.fabric_dir)
        outcome = run_model(ctx, record, records, _fabric.next_run_index(ctx.fabric_dir),
                            (start + begin, start + end))
        time.sleep(max(0.0, start + stop - time.time()))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return outcome


# --------------------------------------------------------------------------- entry points


def run(prog: str, argv: list[str], state: NodeState | None = None,
        fabric_dir: Path = FABRIC_DIR, environ: dict[str, str] | None = None) -> int:
    """Run ``prog`` (``ib_write_bw``, ``ib_read_bw`` or ``ib_send_bw``) with ``argv``.

    Returns:
        perftest's exit status (0 success, 1 on every error, ``-h`` and ``-V`` included).
    """
    startup = startup_s()
    try:
        args = parse(prog, argv)
    except ParseExit as done:
        return done.code
    node = state_or_host(state)
    picked = _pick_nic(node, args)
    if picked is None:
        return 1
    host = observe.host_config(node, observe.nccl_env({}, environ or {}))
    ctx = Ctx(args, node, picked[0], picked[1], host, fabric_dir, startup)
    with contextlib.suppress(BrokenPipeError):
        return serve(ctx) if args.is_server else client(ctx)
    return 1


def write_main(argv: list[str], state: NodeState | None = None) -> int:
    """``ib_write_bw``."""
    return run("ib_write_bw", argv, state)


def read_main(argv: list[str], state: NodeState | None = None) -> int:
    """``ib_read_bw``."""
    return run("ib_read_bw", argv, state)


def send_main(argv: list[str], state: NodeState | None = None) -> int:
    """``ib_send_bw``."""
    return run("ib_send_bw", argv, state)
