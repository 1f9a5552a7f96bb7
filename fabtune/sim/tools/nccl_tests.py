"""Emulated nccl-tests: ``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``.

Launched by the real ``mpirun`` (Open MPI 4.1) over SSH, one process per rank. Each process
reads ``OMPI_COMM_WORLD_RANK``/``SIZE``/``LOCAL_RANK`` and the job id Open MPI gives every rank of
one launch (``OMPI_MCA_ess_base_jobid``, else ``PMIX_NAMESPACE``, ``OMPI_MCA_orte_ess_jobid``;
without mpirun the process is a one-rank job of its own), and writes its host's observed
``HostConfig`` (NICs, ``/etc/nccl.conf`` + environment) and its GPUs to
``/var/lib/fabtune-fabric/jobs/<job>/rank<N>.json``. Rank 0 waits for every rank (a timeout
fails like NCCL's bootstrap, exit 3), runs the model's ``collective`` over the hosts, writes
``result.json`` and prints the nccl-tests report; the other ranks wait for that result, print
their ``NCCL_DEBUG=INFO`` lines, add their host's counter deltas (lowest rank on each host) and
exit 0. Rank 0 removes the job directory when every rank has acknowledged.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune.sim import observe
from fabtune.sim.model import FabricConfig, HostConfig, SizeResult, collective
from fabtune.sim.model.collective import failed_hops
from fabtune.sim.model.config import CollectiveOp
from fabtune.sim.model.results import CollectiveResult
from fabtune.sim.model.transport import usable_hcas
from fabtune.sim.node import FABRIC_DIR, NodeState
from fabtune.sim.tools import _counters, _fabric
from fabtune.sim.tools import _nccl_out as fmt
from fabtune.sim.tools._common import err, out, state_or_host

OPS: dict[str, tuple[CollectiveOp, str]] = {
    "all_reduce_perf": ("all_reduce", "sum"), "all_gather_perf": ("all_gather", "none"),
    "reduce_scatter_perf": ("reduce_scatter", "sum"), "alltoall_perf": ("alltoall", "none"),
}
PER_RANK_COUNT = frozenset({"all_gather", "reduce_scatter", "alltoall"})
JOB_TIMEOUT_S = 60.0
ACK_TIMEOUT_S = 10.0
SHORT_ARGS = "tgbeifnmwNpIKcodrzyTGCaRxDVJSMu"
LONG_NAMES = {
    "nthreads": "t", "ngpus": "g", "minbytes": "b", "maxbytes": "e", "stepbytes": "i",
    "stepfactor": "f", "iters": "n", "agg_iters": "m", "warmup_iters": "w", "run_cycles": "N",
    "parallel_init": "p", "check": "c", "op": "o", "datatype": "d", "root": "r", "blocking": "z",
    "stream_null": "y", "timeout": "T", "cudagraph": "G", "report_cputime": "C", "average": "a",
    "local_register": "R", "output_file": "J", "report_timestamps": "S", "memory": "M",
    "unalign": "u",
}
USAGE = (
    "USAGE: {prog} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t"
    "[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t"
    "[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] \n\t"
    "[-n,--iters <iteration count>] \n\t[-m,--agg_iters <aggregated iteration count>] \n\t"
    "[-w,--warmup_iters <warmup iteration count>] \n\t"
    "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
    "[-p,--parallel_init <0/1>] \n\t[-c,--check <check iteration count>] \n\t"
    "[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n\t[-d,--datatype <nccltype/all>] \n\t"
    "[-r,--root <root>] \n\t[-z,--blocking <0/1>] \n\t[-y,--stream_null <0/1>] \n\t"
    "[-T,--timeout <time in seconds>] \n\t[-G,--cudagraph <num graph launches>] \n\t"
    "[-C,--report_cputime <0/1>] \n\t"
    "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
    "[-h,--help]\n"
)


class Done(Exception):
    """Stop with exit status ``code`` (the message was already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclasses.dataclass(frozen=True)
class TestArgs:
    """The nccl-tests options the emulator honours."""

    threads: int = 1
    gpus: int = 1
    min_bytes: int = 32 * 2**20
    max_bytes: int = 32 * 2**20
    step_bytes: int = 2**20
    step_factor: int = 1
    iters: int = 20
    warmup: int = 1
    agg: int = 1
    check: int = 1


# --------------------------------------------------------------------------- arguments


def parse_size(text: str) -> int:
    """nccl-tests ``parsesize``: a number with an optional K/M/G suffix (powers of 1024); -1 if bad."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    body, mult = (text[:-1], units[text[-1].upper()]) if text and text[-1].upper() in units else (text, 1)
    try:
        return int(float(body) * mult)
    except ValueError:
        return -1


def _options(prog: str, argv: list[str]) -> list[tuple[str, str]]:
    """getopt_long over nccl-tests' option string (every option takes a value, except ``-h``)."""
    opts: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("--") and arg[2:].split("=")[0] in LONG_NAMES:
            name, eq, value = arg[2:].partition("=")
            if not eq:
                value, i = (argv[i], i + 1) if i < len(argv) else ("", i)
            opts.append((LONG_NAMES[name], value))
        elif arg.startswith("-") and len(arg) > 1 and arg[1] in SHORT_ARGS:
            value = arg[2:]
            if not value:
                value, i = (argv[i], i + 1) if i < len(argv) else ("", i)
            opts.append((arg[1], value))
        elif arg.startswith("-"):
            bad = arg[2:] if arg.startswith("--") else arg[1:2]
            if bad not in ("h", "help"):
                out(f"invalid option '{bad[:1] if not arg.startswith('--') else '?'}'")
            sys.stdout.write(USAGE.format(prog=prog))
            raise Done(0)
    return opts


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return 0


def parse(prog: str, argv: list[str]) -> TestArgs:
    """Parse nccl-tests arguments.

    Raises:
        Done: ``-h``/unknown option (usage, 0) or a bad size (-1 -> 255).
    """
    values: dict[str, int] = {}
    keys = {"t": "threads", "g": "gpus", "i": "step_bytes", "f": "step_factor", "n": "iters",
            "w": "warmup", "m": "agg", "c": "check"}
    for letter, value in _options(prog, argv):
        if letter in ("b", "e"):
            size = parse_size(value)
            if size < 0:
                out(f"invalid size specified for '{'minbytes' if letter == 'b' else 'maxbytes'}'")
                raise Done(255)
            values["min_bytes" if letter == "b" else "max_bytes"] = size
        elif letter in keys:
            values[keys[letter]] = _int(value)
    args = TestArgs(**values)
    if args.max_bytes < args.min_bytes:
        out(f"invalid sizes for 'minbytes' and 'maxbytes': {args.min_bytes} > {args.max_bytes}")
        raise Done(255)
    return args


def sizes(args: TestArgs) -> list[int]:
    """The message sizes of the sweep (``-b`` .. ``-e`` by ``-f`` factor or ``-i`` step)."""
    out_sizes, size = [], max(args.min_bytes, 0)
    while size <= args.max_bytes:
        out_sizes.append(size)
        nxt = size * args.step_factor if args.step_factor > 1 else size + max(args.step_bytes, 1)
        if nxt <= size:
            break
        size = nxt
    return out_sizes


def step_text(args: TestArgs) -> str:
    """``2(factor)`` or ``1048576(bytes)``."""
    return f"{args.step_factor}(factor)" if args.step_factor > 1 else f"{args.step_bytes}(bytes)"


# --------------------------------------------------------------------------- the job


@dataclasses.dataclass(frozen=True)
class Job:
    """Where this process sits in the MPI job."""

    job_id: str
    rank: int
    size: int
    local_rank: int


def job_of(environ: Mapping[str, str]) -> Job:
    """This process's MPI identity from Open MPI's environment (a one-rank job without mpirun)."""
    job = (environ.get("OMPI_MCA_ess_base_jobid") or environ.get("PMIX_NAMESPACE")
           or environ.get("OMPI_MCA_orte_ess_jobid"))
    if job is None:
        return Job(f"solo-{socket.gethostname()}-{os.getpid()}", 0, 1, 0)
    return Job(job.replace("/", "_"), int(environ.get("OMPI_COMM_WORLD_RANK", "0")),
               int(environ.get("OMPI_COMM_WORLD_SIZE", "1")),
               int(environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))


def my_devices(state: NodeState, job: Job, args: TestArgs) -> list[dict[str, Any]]:
    """This process's GPUs (``cudaDev = localRank*nThreads*nGpus + i``), or exit 5 if too few."""
    gpus = state.node.gpus
    per = args.threads * args.gpus
    first = job.local_rank * per
    if first + per > len(gpus):
        err(f"Invalid number of GPUs: {first + per} requested but only {len(gpus)} were found.")
        err("Please check the number of processes and GPUs per process.")
        raise Done(5)
    return [{"rank": job.rank * per + i, "dev": first + i, "bus": gpus[first + i].bus_id,
             "name": gpus[first + i].model} for i in range(per)]


def rank_record(state: NodeState, job: Job, args: TestArgs, environ: Mapping[str, str],
                conf: Path) -> dict[str, Any]:
    """What one rank publishes: host, pid, GPUs and the host's model config."""
    host = observe.host_config(state, observe.nccl_env(observe.read_nccl_conf(conf), environ))
    return {"rank": job.rank, "host": state.node.hostname, "pid": os.getpid(),
            "devices": my_devices(state, job, args), "config": observe.to_json(host),
            "rail_ipv4": [n.ipv4 for n in state.node.nics]}


def _gather(jdir: Path, job: Job) -> list[dict[str, Any]] | None:
    """Rank 0 waits for every rank's record (None on timeout)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    records = []
    for rank in range(job.size):
        rec = _fabric.wait_json(jdir / f"rank{rank}.json", max(0.0, deadline - time.monotonic()))
        if rec is None:
            return None
        records.append(rec)
    return records


def _fabric_of(records: list[dict[str, Any]], gpus: int, fabric_dir: Path) -> tuple[FabricConfig, list[str]]:
    """The job's hosts (first-rank order) with the GPU ranks each runs."""
    names: list[str] = []
    ranks_on: dict[str, int] = {}
    configs: dict[str, HostConfig] = {}
    for rec in records:
        name = str(rec["host"])
        if name not in configs:
            names.append(name)
            configs[name] = observe.host_from_json(rec["config"])
        ranks_on[name] = ranks_on.get(name, 0) + gpus
    hosts = tuple(dataclasses.replace(configs[n], gpus=ranks_on[n]) for n in names)
    view = observe.fabric_view(fabric_dir)
    hosts = observe.scaled_job(hosts, view.job_nodes)  # the spec's job_nodes: a job larger than the rack
    return observe.fabric_config(view, hosts), names + [h.name for h in hosts[len(names):]]


def _result_doc(res: CollectiveResult, in_place: CollectiveResult, names: list[str],
                records: list[dict[str, Any]]) -> dict[str, Any]:
    counters: dict[str, dict[str, dict[str, int]]] = {}
    for (host, nic), c in res.counters.items():
        counters.setdefault(names[host], {})[str(nic)] = _counters.model_deltas(c)
    return {
        "transport": res.transport, "gdr": res.gdr, "channels": res.channels,
        "failure": res.failure, "counters": counters,
        "rows": [dataclasses.asdict(r) for r in res.rows],
        "in_place": [dataclasses.asdict(r) for r in in_place.rows],
        "devices": [dict(d, host=rec["host"], pid=rec["pid"]) for rec in records
                    for d in rec["devices"]],
        "hosts": {str(rec["host"]): rec["config"] for rec in records},
    }


def compute(records: list[dict[str, Any]], op: CollectiveOp, args: TestArgs,
            fabric_dir: Path) -> dict[str, Any]:
    """Rank 0: the model's collective over the job (out-of-place and in-place sweeps)."""
    fabric, names = _fabric_of(records, args.threads * args.gpus, fabric_dir)
    run_index = _fabric.next_run_index(fabric_dir)
    swept = sizes(args)
    res = collective(fabric, op, swept, run_index, iters=2 * args.iters * args.agg)
    in_place = collective(fabric, op, swept, run_index + 1_000_003, iters=args.iters)
    doc = _result_doc(res, in_place, names, records)
    if res.failure is not None:
        doc["failed_sends"] = _failed_sends(fabric, names, records)
    return doc


def _failed_sends(fabric: FabricConfig, names: list[str], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per sending host, the ring hops whose sends complete in error: NICs, peer, peer address, GIDs."""
    ipv4 = {str(r["host"]): list(r.get("rail_ipv4") or []) for r in records}
    out: dict[str, list[dict[str, Any]]] = {}
    for (src, nic), (dst, peer_nic), failure in failed_hops(fabric):
        host, peer = names[src], names[dst]
        if host not in ipv4:  # a copy standing in for a node of a larger job: no host prints
            continue
        local = ipv4[host][nic] if nic < len(ipv4[host]) else None
        remote = ipv4[peer][peer_nic] if peer_nic < len(ipv4.get(peer, [])) else None
        out.setdefault(host, []).append({
            "nic": fabric.hosts[src].nics[nic].name, "peer": peer, "failure": failure,
            "local_ipv4": local, "remote_ipv4": remote,
        })
    return out


# --------------------------------------------------------------------------- printing


def _count(op: CollectiveOp, size: int, nranks: int) -> int:
    per = size // 4
    return per // max(nranks, 1) if op in PER_RANK_COUNT else per


def _print_report(prog: str, op: CollectiveOp, redop: str, args: TestArgs, doc: dict[str, Any]) -> None:
    nranks = len(doc["devices"])
    rows = [SizeResult(**r) for r in doc["rows"]]
    in_place = [SizeResult(**r) for r in doc["in_place"]]
    for line in fmt.table_header():
        out(line)
    bws: list[float] = []
    for a, b in zip(rows, in_place, strict=True):
        out(fmt.row(a, b, _count(op, a.size, nranks), redop, args.check != 0))
        bws += [a.busbw, b.busbw]
    for line in fmt.footer(prog, sum(bws) / len(bws) if bws else 0.0):
        out(line)


def _print_head(prog: str, args: TestArgs, devices: list[dict[str, Any]]) -> None:
    head = fmt.header(prog, n_threads=args.threads, n_gpus=args.gpus, min_bytes=args.min_bytes,
                      max_bytes=args.max_bytes, step=step_text(args),
                      iters=(args.warmup, args.iters, args.agg), check=args.check)
    devs = [fmt.Device(int(d["rank"]), int(d["pid"]), str(d["host"]), int(d["dev"]), str(d["bus"]),
                       str(d["name"])) for d in devices]
    for line in head + fmt.device_lines(devs):
        out(line)


def _failure_lines(host: str, failure: str) -> list[str]:
    why = "remote process exited or there was a network error" if failure == "timeout" \
        else "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    return [f"{host}: Test NCCL failure common.cu:1279 '{why}'",
            f" .. {host} pid {os.getpid()}: Test failure common.cu:1132"]


# --------------------------------------------------------------------------- NCCL INFO lines


def _prefix(host: str, dev: int) -> str:
    return f"{host}:{os.getpid()}:{threading.get_native_id()} [{dev}] NCCL INFO "


def _net_lines(host: HostConfig, transport: str, oob: str) -> list[str]:
    """``NET/IB : Using ...`` / ``No device found.`` and the socket fallback."""
    lines = []
    if host.env("NCCL_IB_DISABLE") != "1":
        hcas = usable_hcas(host)
        if hcas:
            ll = ["IB" if host.nics[i].link_layer == "InfiniBand" else "RoCE" for i in hcas]
            devs = " ".join(f"[{k}]{host.nics[i].name}:1/{ll[k]}" for k, i in enumerate(hcas))
            lines.append(f"NET/IB : Using {devs} [RO]; OOB {oob}")
        else:
            lines.append("NET/IB : No device found.")
    if transport == "Socket":
        lines += [f"NET/Socket : Using [0]{oob}", "Using network Socket"]
    else:
        lines.append("Using network IB")
    return lines


def _channel_lines(doc: dict[str, Any], mine: list[dict[str, Any]], host: HostConfig) -> list[str]:
    """Ring connections of this process's GPU ranks, one per channel."""
    devices = doc["devices"]
    n = len(devices)
    net = "Socket" if doc["transport"] == "Socket" else "IB"
    rails = max(len(usable_hcas(host)), 1) if net == "IB" else 1
    gdr = "/GDRDMA" if doc["gdr"] and net == "IB" else ""
    lines = []
    for ch in range(max(int(doc["channels"]), 1)):
        for d in mine:
            r = int(d["rank"])
            nxt, prv = devices[(r + 1) % n], devices[(r - 1) % n]
            me = f"{r}[{d['dev']}]"
            if nxt["host"] == devices[r]["host"]:
                lines.append(f"Channel {ch:02d}/0 : {me} -> {nxt['rank']}[{nxt['dev']}] via P2P/CUMEM")
            else:
                lines.append(f"Channel {ch:02d}/0 : {me} -> {nxt['rank']}[{nxt['dev']}] [send] via "
                             f"NET/{net}/{ch % rails}{gdr}")
            if prv["host"] != devices[r]["host"]:
                lines.append(f"Channel {ch:02d}/0 : {prv['rank']}[{prv['dev']}] -> {me} [receive] via "
                             f"NET/{net}/{ch % rails}{gdr}")
    return lines


def info_lines(job: Job, doc: dict[str, Any], mine: list[dict[str, Any]], host: HostConfig,
               oob: str) -> list[str]:
    """Every ``NCCL INFO`` line this process prints (NCCL_DEBUG=INFO)."""
    name = str(mine[0]["host"]) if mine else host.name
    dev = int(mine[0]["dev"]) if mine else 0
    msgs = [f"Bootstrap : Using {oob}"]
    if job.rank == 0:
        msgs.append(f"NCCL version {fmt.NCCL_VERSION}")
    msgs += fmt.env_lines(host.nccl_env)
    msgs += _net_lines(host, str(doc["transport"]), oob)
    if doc["transport"] != "Socket":
        state = "Enabled" if doc["gdr"] else "Disabled"
        msgs += [f"NET/IB : GPU Direct RDMA {state} for HCA {k} '{host.nics[i].name}'"
                 for k, i in enumerate(usable_hcas(host))]
    nranks = len(doc["devices"])
    msgs += [f"ncclCommInitRank comm 0x{0x55d0c0000000 + int(d['rank']) * 0x1000:x} rank {d['rank']} "
             f"nranks {nranks} cudaDev {d['dev']} nvmlDev {d['dev']} busId {_busid(str(d['bus']))} "
             f"commId 0x{zlib.crc32(job.job_id.encode()):016x} - Init START" for d in mine]
    msgs += _channel_lines(doc, mine, host)
    msgs += ["Connected all rings"]
    msgs += [f"ncclCommInitRank comm 0x{0x55d0c0000000 + int(d['rank']) * 0x1000:x} rank {d['rank']} "
             f"nranks {nranks} cudaDev {d['dev']} nvmlDev {d['dev']} busId {_busid(str(d['bus']))} "
             "- Init COMPLETE" for d in mine]
    return [_prefix(name, dev) + m for m in msgs]


def _busid(pci: str) -> str:
    return f"{int(pci.split(':')[1], 16):x}000"


# --------------------------------------------------------------------------- main


@dataclasses.dataclass(frozen=True)
class Env:
    """Where the tool runs: node state, fabric directory, environment and nccl.conf path."""

    state: NodeState
    fabric_dir: Path
    environ: Mapping[str, str]
    conf: Path


def _oob(env: Env, host: str) -> str:
    try:
        address = observe.fabric_view(env.fabric_dir).addresses.get(host, "127.0.0.1")
    except OSError:
        address = "127.0.0.1"
    return f"{observe.FRONTEND_IFNAME}:{address}<0>"


def _apply_counters(env: Env, job: Job, doc: dict[str, Any], host: str) -> None:
    """The lowest rank of each host adds the host's NIC counter deltas."""
    first = min(int(d["rank"]) for d in doc["devices"] if d["host"] == host)
    per = max(len(doc["devices"]) // max(job.size, 1), 1)
    if first // per != job.rank:
        return
    nics = env.state.node.nics
    for nic, deltas in doc["counters"].get(host, {}).items():
        _counters.apply(env.state, nics[int(nic)].netdev, {str(k): int(v) for k, v in deltas.items()})


def _peer_address(env: Env, peer: str) -> str:
    try:
        return observe.fabric_view(env.fabric_dir).addresses.get(peer, "127.0.0.1")
    except OSError:
        return "127.0.0.1"


def warn_lines(env: Env, doc: dict[str, Any], mine: list[dict[str, Any]]) -> list[str]:
    """This host's NCCL WARN lines for sends that cannot complete (only the lowest rank on the host).

    A RoCE QP whose GIDs do not pair (RoCEv1 against v2: the receiver drops the packets) exhausts
    its retries: the sender's proxy reports the work completion in error and NCCL returns
    ncclRemoteError. Format of NCCL 2.2x ``src/transport/net_ib.cc`` (ncclIbTest), as in
    NVIDIA/nccl#1814: ``NET/IB : Got completion from peer <addr><port> with status=12 opcode=1
    len=0 vendor err 129 (Send) localGid ::ffff:a.b.c.d remoteGids::ffff:e.f.g.h``, plus
    `` hca <dev>``. A GID index outside the table fails earlier, at the QP's RTR transition
    (formats.md §3: ``Call to ibv_modify_qp failed with error Invalid argument``).
    """
    if not mine:
        return []
    host, dev = str(mine[0]["host"]), int(mine[0]["dev"])
    if any(int(d["rank"]) < int(mine[0]["rank"]) for d in doc["devices"] if d["host"] == host):
        return []
    prefix = f"{host}:{os.getpid()}:{threading.get_native_id()} [{dev}] "
    lines = []
    for send in doc.get("failed_sends", {}).get(host, []):
        if send["failure"] == "invalid_gid":
            lines.append(prefix + "misc/ibvwrap.cc:221 NCCL WARN Call to ibv_modify_qp failed with error "
                         "Invalid argument")
            continue
        port = 40000 + zlib.crc32(f"{send['peer']}{send['nic']}".encode()) % 20000
        gids = ""
        if send["local_ipv4"] and send["remote_ipv4"]:
            gids = f" localGid ::ffff:{send['local_ipv4']} remoteGids::ffff:{send['remote_ipv4']}"
        lines.append(prefix + f"transport/net_ib.cc:2326 NCCL WARN NET/IB : Got completion from peer "
                     f"{_peer_address(env, str(send['peer']))}<{port}> with status=12 opcode=1 len=0 "
                     f"vendor err 129 (Send){gids} hca {send['nic']}")
    return lines


def _finish_rank(prog: str, env: Env, job: Job, doc: dict[str, Any], record: dict[str, Any]) -> int:
    """Print this rank's INFO lines, failure or nothing; add counters."""
    host = observe.host_from_json(record["config"])
    mine = [dict(d, host=record["host"]) for d in record["devices"]]
    level = (env.environ.get("NCCL_DEBUG") or "").upper()
    if level in ("INFO", "TRACE"):
        for line in info_lines(job, doc, mine, host, _oob(env, str(record["host"]))):
            out(line)
    if doc["failure"] is not None and level in ("WARN", "INFO", "TRACE"):
        for line in warn_lines(env, doc, mine):
            out(line)
    if doc["failure"] is not None:
        for line in _failure_lines(str(record["host"]), str(doc["failure"])):
            out(line)
        return 3
    _apply_counters(env, job, doc, str(record["host"]))
    return 0


def run_job(prog: str, argv: list[str], env: Env) -> int:
    """Run one nccl-tests process of an (MPI) job; rank 0 prints the report."""
    try:
        args = parse(prog, argv)
        job = job_of(env.environ)
        record = rank_record(env.state, job, args, env.environ, env.conf)
    except Done as done:
        return done.code
    jdir = _fabric.job_dir(job.job_id, env.fabric_dir)
    _fabric.write_json(jdir / f"rank{job.rank}.json", record)
    if job.rank != 0:
        doc = _fabric.wait_json(jdir / "result.json", JOB_TIMEOUT_S + 30)
        if doc is None:
            for line in _failure_lines(str(record["host"]), "timeout"):
                out(line)
            return 3
        code = _finish_rank(prog, env, job, doc, record)
        _fabric.write_json(jdir / f"ack{job.rank}.json", {"rank": job.rank})
        return code
    return _rank0(prog, args, env, job, jdir=jdir, record=record)


def _rank0(prog: str, args: TestArgs, env: Env, job: Job, *, jdir: Path, record: dict[str, Any]) -> int:
    op, redop = OPS[prog]
    records = _gather(jdir, job)
    if records is None:
        for line in _failure_lines(str(record["host"]), "timeout"):
            out(line)
        shutil.rmtree(jdir, ignore_errors=True)
        return 3
    devices = [dict(d, host=rec["host"], pid=rec["pid"]) for rec in records for d in rec["devices"]]
    _print_head(prog, args, devices)
    doc = compute(records, op, args, env.fabric_dir)
    _fabric.write_json(jdir / "result.json", doc)
    code = _finish_rank(prog, env, job, doc, record)
    if code == 0:
        _print_report(prog, op, redop, args, doc)
    for rank in range(1, job.size):
        _fabric.wait_json(jdir / f"ack{rank}.json", ACK_TIMEOUT_S)
    shutil.rmtree(jdir, ignore_errors=True)
    return code


def main(prog: str, argv: list[str], state: NodeState | None = None) -> int:
    """Entry point of one tool inside a host."""
    env = Env(state_or_host(state), FABRIC_DIR, dict(os.environ), observe.NCCL_CONF)
    try:
        return run_job(prog, argv, env)
    finally:
        sys.stdout.flush()


def all_reduce_main(argv: list[str], state: NodeState | None = None) -> int:
    """``all_reduce_perf``."""
    return main("all_reduce_perf", argv, state)


def all_gather_main(argv: list[str], state: NodeState | None = None) -> int:
    """``all_gather_perf``."""
    return main("all_gather_perf", argv, state)


def reduce_scatter_main(argv: list[str], state: NodeState | None = None) -> int:
    """``reduce_scatter_perf``."""
    return main("reduce_scatter_perf", argv, state)


def alltoall_main(argv: list[str], state: NodeState | None = None) -> int:
    """``alltoall_perf``."""
    return main("alltoall_perf", argv, state)

