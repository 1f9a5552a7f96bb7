"""ib_write_bw pair matrices and incast stages across an inventory, through Ansible."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible, linkrate
from fabtune.errors import BenchmarkError, ParseError
from fabtune.events import Event, round_event
from fabtune.perf import rdmacounters
from fabtune.perf.argv import PerftestOptions, perftest_argv
from fabtune.perf.deadline import perftest_deadline_s, run_timeout_s, timed_out
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.parsers import ethtool, perftest
from fabtune.perf.schedule import Pair

COUNTERS = ("rx_prio{}_pause", "tx_prio{}_pause")


@dataclass(frozen=True)
class PairResult:
    """One client's measurement, with the link's physical ceiling and counter deltas."""

    server: str
    client: str
    rail: int
    device: str
    gbps: float | None
    ceiling_gbps: float
    error: str | None = None
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    client_device: str = ""  # the client's NIC on the rail (``device`` is the server's)
    late_s: float = 0.0  # how long after the round's common start its client started (fabric_run)
    wait_s: float = 0.0  # how long its client's host waited for that start (the lead it did not need)

    @property
    def share_of_ceiling(self) -> float | None:
        if self.gbps is None or self.ceiling_gbps <= 0:
            return None
        return self.gbps / self.ceiling_gbps

    @property
    def ends(self) -> str:
        """Both ends, host and NIC: ``h01 mlx5_1 -> h02 mlx5_1``."""
        return f"{self.client} {self.client_device or '?'} -> {self.server} {self.device}"


# bench_ib_write_bw.yml's tasks: the counters read before (with the servers started); the
# ib_write_bw clients, the wait for the servers and the counters read after, in one fabric_run call
# per host (the clients' runs in its ``first_runs``, the reads in its ``runs``); where the round's
# hosts run in waves (fewer forks than hosts), the clients in a task of their own before it
BEFORE_TASK = "Read counters before and start the servers"
AFTER_TASK = "Run clients, stop the servers and read counters after"
CLIENTS_TASK = "Run clients"
CLIENT_RUNS = ((AFTER_TASK, "first_runs"), (CLIENTS_TASK, "runs"))  # where a client's run is found
SLOW_SHARE = 0.8  # a pair under this share of the other pairs' median is slow


@dataclass(frozen=True)
class SlowPair:
    """A pair well under the others: its ends, Gb/s, the other pairs' median, and the link
    ceilings (its own and the others' median) when known: a lower ceiling is a port below the rack's
    speed, the same ceiling a fault on the path (cable errors, a congested or broken switch port)."""

    name: str
    gbps: float | None
    median_gbps: float
    error: str | None = None
    ceiling_gbps: float = 0.0
    median_ceiling_gbps: float = 0.0

    @property
    def ratio(self) -> float:
        return (self.gbps or 0.0) / self.median_gbps

    def describe(self) -> str:
        gbps = "failed" if self.gbps is None else f"{self.gbps:.1f} Gb/s"
        text = (f"{self.name}: {gbps}, x{self.ratio:.2f} of the median of the other pairs "
                f"({self.median_gbps:.1f} Gb/s)")
        if 0 < self.ceiling_gbps < SLOW_SHARE * self.median_ceiling_gbps:
            text += (f"; its link's ceiling is {self.ceiling_gbps:.1f} Gb/s against "
                     f"{self.median_ceiling_gbps:.1f}: a port below the rack's speed")
        return text + (f" ({self.error})" if self.error else "")


def late_hosts(results: Iterable[PairResult]) -> dict[str, float]:
    """Each client host's lateness after its round's common start (the most of its runs)."""
    late: dict[str, float] = {}
    for r in results:
        late[r.client] = max(late.get(r.client, 0.0), r.late_s)
    return late


def waited_hosts(results: Iterable[PairResult]) -> dict[str, float]:
    """Each client host's wait for its round's common start (the least of its runs; 0 when late)."""
    waited: dict[str, float] = {}
    for r in results:
        waited[r.client] = min(waited.get(r.client, r.wait_s), r.wait_s)
    return waited


def more_lead(extra_s: float, late: Mapping[str, float], waited: Mapping[str, float] | None = None) -> float:
    """The common start's extra lead for the next round, from this one's (``extra_s``), how late
    its client hosts were (``late``, ``late_hosts``) and how long they waited for it (``waited``,
    ``waited_hosts``).

    Ansible reaches a round's hosts one after another. A controller that reached some only after
    the instant (a loaded controller, a large round) gets that much more time from the next round
    on, and half a second more, where the latest was later than ``LATE_TOLERANCE_S`` (at most
    ``LEAD_EXTRA_MAX_S`` in all). Where every client host waited, the next round's lead is what the
    host that waited least needed, and ``LEAD_SPARE_S`` more: the lead shrinks by that host's wait
    less ``LEAD_SPARE_S`` (the playbook keeps the lead at ``LEAD_MIN_S`` at least, and never lowers
    a lead the inventory sets); a round that then starts late raises it again."""
    latest = max(late.values(), default=0.0)
    if latest > LATE_TOLERANCE_S:
        return min(extra_s + latest + 0.5, LEAD_EXTRA_MAX_S)
    least = min(waited.values(), default=0.0) if waited else 0.0
    if least <= LEAD_SPARE_S + LATE_TOLERANCE_S:
        return extra_s
    return max(extra_s - (least - LEAD_SPARE_S), -LEAD_CUT_MAX_S)


def late_clients(late: Mapping[str, float], duration_s: int) -> str | None:
    """Why a round's numbers may read better than its fabric: hosts (``late``: seconds after the
    round's common start, ``late_hosts``) whose clients started a quarter of their run or more late
    overlapped the other flows for only part of it (Ansible reached them after the instant)."""
    found = {h: s for h, s in late.items() if s >= duration_s / 4}
    if not found:
        return None
    hosts = ", ".join(f"{h} {s:.1f} s" for h, s in sorted(found.items()))
    return (f"clients started after the round's common start ({hosts}, of a {duration_s} s run): their "
            "flows overlapped the others for part of the run only; raise fabtune_bench_start_lead_s, "
            "or check that the controller's clock agrees with the hosts' (NTP)")


def slow_among(
    values: Mapping[str, float | None], share: float = SLOW_SHARE
) -> list[tuple[str, float]]:
    """The keys of ``values`` under ``share`` of the median of the others, each with that median
    (a failed value counts 0)."""
    slow = []
    for key, gbps in sorted(values.items()):
        others = [v or 0.0 for k, v in values.items() if k != key]
        median = statistics.median(others) if others else 0.0
        if median > 0 and (gbps or 0.0) < share * median:
            slow.append((key, median))
    return slow


def slow_pairs(results: Sequence[PairResult], share: float = SLOW_SHARE) -> list[SlowPair]:
    """The pairs of a matrix (or a round) under ``share`` of the median of the other pairs."""
    by_ends = {r.ends: r for r in results}
    found = []
    for name, median in slow_among({k: r.gbps for k, r in by_ends.items()}, share):
        ceilings = [r.ceiling_gbps for k, r in by_ends.items() if k != name]
        r = by_ends[name]
        found.append(SlowPair(name, r.gbps, median, r.error, r.ceiling_gbps,
                              statistics.median(ceilings) if ceilings else 0.0))
    return found


Port = tuple[str, str]  # (host, device)


@dataclass(frozen=True)
class SlowPort:
    """A port that is an end of several slow pairs, most of its pairs (``count``), and explains them:
    its slow pairs, their median Gb/s against the median of the pairs not through it, and the link
    ceilings (its pairs' and the others') as for :class:`SlowPair`."""

    host: str
    device: str
    pairs: tuple[SlowPair, ...]
    count: int
    gbps: float
    median_gbps: float
    ceiling_gbps: float = 0.0
    median_ceiling_gbps: float = 0.0
    share: float = SLOW_SHARE

    @property
    def name(self) -> str:
        return f"{self.host} {self.device}"

    def describe(self) -> str:
        ratio = self.gbps / self.median_gbps if self.median_gbps else 0.0
        text = (f"port {self.name} is slow: {len(self.pairs)} of its {self.count} pairs under "
                f"x{self.share:.2f} of the median of the other pairs; its pairs' median "
                f"{self.gbps:.1f} Gb/s against {self.median_gbps:.1f} for the pairs not through it "
                f"(x{ratio:.2f})")
        if 0 < self.ceiling_gbps < SLOW_SHARE * self.median_ceiling_gbps:
            return text + (f"; its link's ceiling is {self.ceiling_gbps:.1f} Gb/s against "
                           f"{self.median_ceiling_gbps:.1f}: a port below the rack's speed")
        if self.ceiling_gbps > 0:
            return text + (f"; its link's ceiling is the rack's ({self.ceiling_gbps:.1f} Gb/s): a fault "
                           "on its path or host (cable errors, switch port, PCIe)")
        return text

    def to_json(self) -> dict[str, Any]:
        return {"port": self.name, "host": self.host, "device": self.device,
                "summary": self.describe(), "pairs": [p.describe() for p in self.pairs]}


def _port_ends(result: PairResult) -> list[Port]:
    """The ports at both ends of a pair run (the client's only where its NIC is known)."""
    ends = [(result.server, result.device)]
    return [*ends, (result.client, result.client_device)] if result.client_device else ends


def _most_suspect(through: Mapping[Port, Sequence[PairResult]], slow: set[str],
                  named: Sequence[Port]) -> Port | None:
    """The port with the largest share of slow pairs among its pairs that no named port explains,
    where at least 2 of them and more than half are slow; None when no port is."""
    explained = {r.ends for port in named for r in through[port]}
    best, score = None, (0.0, 0)
    for port, runs in sorted(through.items()):
        pending = [r for r in runs if r.ends not in explained]
        hits = sum(r.ends in slow for r in pending)
        if hits >= 2 and 2 * hits > len(pending) and (hits / len(pending), hits) > score:
            best, score = port, (hits / len(pending), hits)
    return best


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _slow_port(port: Port, results: Sequence[PairResult], slow: Sequence[SlowPair],
               share: float) -> SlowPort:
    mine = [r for r in results if port in _port_ends(r)]
    others = [r for r in results if port not in _port_ends(r)]
    ends = {r.ends for r in mine}
    return SlowPort(
        port[0], port[1], tuple(p for p in slow if p.name in ends), len(mine),
        _median([r.gbps or 0.0 for r in mine]), _median([r.gbps or 0.0 for r in others]),
        _median([r.ceiling_gbps for r in mine]), _median([r.ceiling_gbps for r in others]), share,
    )


def slow_ports(
    results: Sequence[PairResult], slow: Sequence[SlowPair], share: float = SLOW_SHARE
) -> list[SlowPort]:
    """The ports that explain slow pairs (``slow``, from :func:`slow_pairs` on ``results``): a port
    (host and NIC) is named when at least 2 of its pairs are slow and more than half of them, most
    suspect first; a pair it explains no longer counts for the ports at its other end. So one port
    below the rack's speed is named alone, not its pairs' other ends, and two slow pairs with no
    common end name no port."""
    through: dict[Port, list[PairResult]] = {}
    for r in results:
        for port in _port_ends(r):
            through.setdefault(port, []).append(r)
    named: list[Port] = []
    while (suspect := _most_suspect(through, {p.name for p in slow}, named)) is not None:
        named.append(suspect)
    return [_slow_port(port, results, slow, share) for port in named]


def unexplained(slow: Sequence[SlowPair], ports: Sequence[SlowPort]) -> list[SlowPair]:
    """The slow pairs that no slow port explains."""
    explained = {p.name for port in ports for p in port.pairs}
    return [p for p in slow if p.name not in explained]


def rail_ceiling(rail: Rail) -> float:
    """The physical goodput ceiling of a rail (RoCEv2 or IB header overhead at its MTU; IB at 4096)."""
    ib = linkrate.is_ib(rail.link_layer)
    return linkrate.ceiling_gbps(rail.link_layer, rail.rate_gbps, 4096 if ib else rail.mtu)


def _run_spec(pair: Pair, views: Mapping[str, HostView], opts: PerftestOptions) -> dict[str, Any]:
    server, client = views[pair.server].rails[pair.rail], views[pair.client].rails[pair.rail]
    if server.ipv4 is None:
        raise BenchmarkError(f"{pair.server}: {server.netdev} has no IPv4 address to test against")
    gid = server.gid_index if opts.gid_index is None else opts.gid_index
    tuned = dataclasses.replace(opts, gid_index=gid)
    server_argv = perftest_argv(tuned, server.device, pair.port)
    run_id = f"{pair.client}->{pair.server}/{server.device}:{pair.port}"
    return {
        "id": run_id,
        "server": pair.server,
        "client": pair.client,
        "port": pair.port,
        # -R: the server listens through rdma_cm, not TCP (the playbook waits with rdma, not ss)
        "rdma_cm": tuned.rdma_cm,
        "server_argv": server_argv,
        "client_argv": perftest_argv(tuned, client.device, pair.port, server.ipv4),
        "client_command": {"id": run_id, "argv": perftest_argv(tuned, client.device, pair.port, server.ipv4)},
        "server_netdev": server.netdev,
        "client_netdev": client.netdev,
        # perftest runs on the device's port 1 (-i 1, fabtune.perf.argv); pair.port is its TCP port
        "server_hw": rdmacounters.read_item(server.netdev, server.device, 1),
        "client_hw": rdmacounters.read_item(client.netdev, client.device, 1),
        "server_command": {"id": run_id, "argv": server_argv, "port": pair.port, "rdma_cm": tuned.rdma_cm},
    }


def counter_map(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per netdev (the loop item of an ``ethtool -S`` task), its per-priority pause counters."""
    out = {}
    for item in results:
        try:
            stats = ethtool.parse(str(item.get("stdout", "")))
        except ParseError:
            continue
        out[str(item.get("item"))] = {
            t.format(p): v for t in COUNTERS for p, v in stats.per_priority(t).items()
        }
    return out


def read_deltas(
    before: rdmacounters.Reads, after: rdmacounters.Reads
) -> dict[tuple[str, str], dict[str, int]]:
    """Per (host, netdev) read after, the counters that moved between two counter reads: the pause
    frames per priority (``ethtool -S``) and the RDMA hw_counters (``rdmacounters.moved``)."""
    eth_before, hw_before = rdmacounters.as_loops(before)
    eth_after, hw_after = rdmacounters.as_loops(after)
    deltas = {}
    for host, res in eth_after.items():
        old = counter_map(eth_before.get(host, {}).get("results", []))
        for netdev, values in counter_map(res.get("results", [])).items():
            deltas[(host, netdev)] = rdmacounters.moved(old.get(netdev, {}), values)
    for key, values in rdmacounters.deltas(hw_before, hw_after).items():
        deltas[key] = {**deltas.get(key, {}), **values}
    return deltas


def _measured(stdout: str) -> tuple[float | None, str | None]:
    try:
        result = perftest.parse(stdout)
    except ParseError as err:
        return None, f"unreadable output: {err}; output was {stdout.strip()[-300:]!r}"
    if result.error is not None:
        return None, result.error.kind
    return result.bw_average_gbps(result.bw_rows[-1]), None


def _client_result(
    item: Mapping[str, Any], run: Mapping[str, Any], deadline_s: int
) -> tuple[float | None, str | None]:
    """One client's measurement (``item``: its entry in fabric_run's ``runs``), or why there is none
    (a missed deadline names host, command, deadline)."""
    if item.get("timed_out") or timed_out(item.get("rc")):
        command = " ".join(str(a) for a in run.get("client_argv", []))
        return None, f"timeout: {run.get('client')}: {command!r} missed its deadline of {deadline_s} s"
    return _measured(str(item.get("stdout", "")) + "\n" + str(item.get("stderr", "")))


def _client_results(
    outcome: ansible.RunOutcome, runs: Sequence[dict[str, Any]], deadline_s: int
) -> dict[str, tuple[float | None, str | None]]:
    """Each client's measurement or error by run id, from the task that ran it (``CLIENT_RUNS``); a
    client whose task passed its own deadline with no run reported missed its deadline."""
    by_id: dict[str, tuple[float | None, str | None]] = {}
    spec = {run["id"]: run for run in runs}
    late = set()
    for task, key in CLIENT_RUNS:
        for host, res in outcome.results(task).items():
            if res.get("msg") == "Timeout exceeded" or res.get("timedout"):  # the task's own deadline
                late.add(host)
            for item in res.get(key) or []:
                by_id[item.get("id")] = _client_result(item, spec.get(item.get("id"), {}), deadline_s)
    for run in runs:
        if run["client"] in late and run["id"] not in by_id:
            by_id[run["id"]] = _client_result({"timed_out": True}, run, deadline_s)
    return by_id


def _results(
    outcome: ansible.RunOutcome,
    runs: Sequence[dict[str, Any]],
    views: Mapping[str, HostView],
    pairs: Sequence[Pair],
    deadline_s: int,
    *,
    deltas: Mapping[tuple[str, str], Mapping[str, int]],
) -> list[PairResult]:
    by_id = _client_results(outcome, runs, deadline_s)
    reported = outcome.results(AFTER_TASK)
    late = {host: float(res.get("first_late_s") or 0.0) for host, res in reported.items()}
    waited = {host: float(res.get("first_wait_s") or 0.0) for host, res in reported.items()}
    results = []
    for run, pair in zip(runs, pairs, strict=True):
        gbps, error = by_id.get(run["id"], (None, "not run"))
        rail, mine = views[pair.server].rails[pair.rail], views[pair.client].rails[pair.rail]
        counters = {
            f"{h}:{d}": dict(deltas.get((h, d), {}))
            for h, d in ((pair.server, run["server_netdev"]), (pair.client, run["client_netdev"]))
        }
        results.append(
            PairResult(
                pair.server, pair.client, pair.rail, rail.device, gbps,
                # the slower end bounds the pair (a port trained below the rack's speed)
                min(rail_ceiling(rail), rail_ceiling(mine)), error, counters, mine.device,
                late.get(pair.client, 0.0), waited.get(pair.client, 0.0),
            )
        )
    return results


def _counter_reads(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per host, the counter reads of the ports its servers and clients use (one fabric_run call)."""
    netdevs: dict[str, list[str]] = {}
    hw: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        for side in ("server", "client"):
            host = str(run[side])
            netdevs.setdefault(host, []).append(str(run[f"{side}_netdev"]))
            if f"{side}_hw" in run:
                hw.setdefault(host, []).append(run[f"{side}_hw"])
    return {h: rdmacounters.read_commands(netdevs[h], hw.get(h, [])) for h in sorted(netdevs)}


def run_round(
    inventory: Path,
    pairs: Sequence[Pair],
    views: Mapping[str, HostView],
    opts: PerftestOptions,
    *,
    deadline_s: int | None = None,
    lead_extra_s: float = 0.0,
) -> list[PairResult]:
    """Run one round of pairs concurrently; servers are stopped afterwards whatever happened.

    Each server and client has a deadline (``deadline_s``, else derived from ``opts``); a client
    that misses it is a failed pair, its error naming the host, the command and the deadline.
    ``lead_extra_s``: more time for Ansible to reach the clients' hosts (``more_lead``).

    Raises:
        PlaybookFailed: when the round could not run (unreachable host, failed task).
    """
    planned = plan_round(pairs, views, opts, deadline_s, lead_extra_s=lead_extra_s)
    outcome = ansible.run_playbook(ROUND_PLAYBOOK, inventory, extravars=planned.variables(read_before=True),
                                   timeout_s=planned.timeout_s)
    return round_results(outcome, planned, views, None)[0]


ROUND_PLAYBOOK = "bench_ib_write_bw.yml"
# the playbook's variable for seconds added to the clients' common start lead (its own default, or
# the inventory's fabtune_bench_start_lead_s): raised by the controller after a late round
LEAD_EXTRA_VAR = "fabtune_bench_start_lead_extra_s"
LATE_TOLERANCE_S = 0.1
"""A client this late after its round's common start changes nothing worth a longer lead."""
LEAD_EXTRA_MAX_S = 30.0
"""The most a run of rounds adds to the lead: a host later than that has a clock or a controller
problem that waiting longer does not fix (the late warning says so)."""
LEAD_SPARE_S = 0.3
"""The wait a shortened lead leaves the client host that waited least: room for a round that
Ansible dispatches a little slower than the one before (a later one raises the lead again)."""
LEAD_CUT_MAX_S = 5.0
"""The most a run of rounds takes off the lead: the playbook's own default is at most 5 s."""
LEAD_MIN_S = 0.3
"""The shortest lead the playbook sets when the controller shortened its default (the
playbook's ``__fabtune_lead_min_s``)."""
# the playbooks' variable for the counters read before: {} where a read the caller holds stands for it
READS_BEFORE_VAR = "fabtune_counter_reads_before"


def reads_before(variables: Mapping[str, Any]) -> bool:
    """Whether a round or batch given ``variables`` reads the counters before it itself."""
    return READS_BEFORE_VAR not in variables


@dataclass(frozen=True)
class PlannedRound:
    """One round of pairs as bench_ib_write_bw.yml runs it: its pairs, each run's spec, each host's
    counter reads and the servers' and clients' deadline."""

    pairs: tuple[Pair, ...]
    runs: tuple[dict[str, Any], ...]
    reads: dict[str, list[dict[str, Any]]]
    deadline: int
    lead_extra_s: float = 0.0  # added to the clients' common start lead (``more_lead``)

    def variables(self, read_before: bool) -> dict[str, Any]:
        """The playbook's variables; ``read_before`` False: the round reads no counters before
        (a read the caller holds stands for it)."""
        found: dict[str, Any] = {
            "fabtune_bench_runs": list(self.runs),
            "fabtune_bench_deadline_s": self.deadline,
            "fabtune_counter_reads": self.reads,
        }
        if not read_before:
            found[READS_BEFORE_VAR] = {}
        if self.lead_extra_s != 0:
            found[LEAD_EXTRA_VAR] = round(self.lead_extra_s, 2)
        return found

    @property
    def timeout_s(self) -> int:
        """The playbook run's: four launches' allowance, one after another (the servers' start,
        the clients, the wait for the servers, the reads after; the middle two in one task where
        the round's hosts run in one wave)."""
        return run_timeout_s(self.deadline, 4)


def plan_round(
    pairs: Sequence[Pair],
    views: Mapping[str, HostView],
    opts: PerftestOptions,
    deadline_s: int | None = None,
    *,
    lead_extra_s: float = 0.0,
) -> PlannedRound:
    """A round of ``pairs`` ready to run (``deadline_s``: each server's and client's; else derived;
    ``lead_extra_s``: more time for Ansible to reach the clients' hosts, ``more_lead``).

    Raises:
        BenchmarkError: a server's port has no IPv4 address to test against.
    """
    runs = tuple(_run_spec(p, views, opts) for p in pairs)
    return PlannedRound(tuple(pairs), runs, _counter_reads(runs), perftest_deadline_s(opts, deadline_s),
                        lead_extra_s)


def round_results(
    outcome: ansible.RunOutcome,
    planned: PlannedRound,
    views: Mapping[str, HostView],
    before: rdmacounters.Reads | None,
) -> tuple[list[PairResult], rdmacounters.Reads]:
    """A round's results and the counters it read after; ``before``: the counters read before it,
    where the round read none itself.

    Raises:
        PlaybookFailed: when the round could not run (unreachable host, failed task).
    """
    outcome.raise_for_failure("perftest round")
    first = before if before is not None else rdmacounters.reads_of(outcome.results(BEFORE_TASK))
    after = rdmacounters.reads_of(outcome.results(AFTER_TASK))
    deltas = read_deltas(first, after)
    return _results(outcome, list(planned.runs), views, planned.pairs, planned.deadline, deltas=deltas), after


def run_rounds(
    inventory: Path,
    rounds: Sequence[Sequence[Pair]],
    views: Mapping[str, HostView],
    opts: PerftestOptions,
    on_event: Event | None = None,
    *,
    deadline_s: int | None = None,
    phase: str = "pair matrix",
) -> list[list[PairResult]]:
    """Run rounds one after another, each announced as a ``round`` event with an ETA."""
    done: list[list[PairResult]] = []
    start = time.monotonic()
    extra = 0.0
    for index, pairs in enumerate(rounds, start=1):
        if on_event is not None:
            eta = (time.monotonic() - start) / (index - 1) * (len(rounds) - index + 1) if index > 1 else None
            on_event(*round_event(phase, index, len(rounds), eta))
        done.append(run_round(inventory, pairs, views, opts, deadline_s=deadline_s, lead_extra_s=extra))
        extra = more_lead(extra, late_hosts(done[-1]), waited_hosts(done[-1]))
    return done
