"""Every bad input gets one clear error: its exit code, a message naming the field and the value,
and no host changed (each host's files, NIC state and link MTUs compared before and after).

Each row runs the real ``fabtune`` command in a child process, as an operator would; rows that
need hosts run against one factory rack built for the table.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fabtune.errors import ExitStatus
from fabtune.testbed.spec import TestbedSpec
from tests.conftest import FIXTURES, REPO
from tests.faults.rig import cli, factory_rack, host_fingerprint, inventory

pytestmark = pytest.mark.testbed
CONFIG, USAGE, TESTBED = int(ExitStatus.CONFIG), int(ExitStatus.USAGE), int(ExitStatus.TESTBED)
RUN_ID = "20261201-101010-abcdef"  # well formed, never journaled


@dataclass(frozen=True)
class Bad:
    """One bad input: the command (``{inv}``, ``{dir}``, ``{repo}`` filled in), files it reads, the
    exit code, and what the message must name."""

    id: str
    argv: tuple[str, ...]
    code: int
    needles: tuple[str, ...]
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    inv_vars: Mapping[str, object] | None = None  # {dir}/inv.yml: the rack's inventory with these vars


def _profile(text: str, verb: str = "apply") -> dict[str, object]:
    extra = ("--check",) if verb == "apply" else ()
    return {"argv": (verb, "-i", "{inv}", "--profile", "{dir}/p.yml", *extra), "files": {"p.yml": text}}


def P(id: str, text: str, needles: tuple[str, ...], verb: str = "apply", code: int = CONFIG) -> Bad:  # noqa: N802
    spec = _profile(text, verb)
    return Bad(id, spec["argv"], code, needles, spec["files"])  # type: ignore[arg-type]


def T(id: str, options: str, needles: tuple[str, ...]) -> Bad:  # noqa: N802
    return P(id, f"fabtune_tune:\n{options}\n", needles, verb="tune")


def I(id: str, inv_vars: Mapping[str, object], needles: tuple[str, ...], code: int = CONFIG) -> Bad:  # noqa: N802,E743
    return Bad(id, ("tune", "-i", "{dir}/inv.yml"), code, needles, inv_vars=inv_vars)


def S(id: str, spec: str, needles: tuple[str, ...]) -> Bad:  # noqa: N802
    return Bad(id, ("testbed", "up", "--spec", "{dir}/spec.yml"), CONFIG, needles, {"spec.yml": spec})


NICS = "fabric_desired:\n  nics:\n    all:\n"
ROWS = [
    # profiles for apply
    Bad(
        "profile missing",
        ("apply", "-i", "{inv}", "--profile", "{dir}/nope.yml", "--check"),
        CONFIG,
        ("nope.yml",),
    ),
    Bad(
        "profile is a directory",
        ("apply", "-i", "{inv}", "--profile", "{dir}", "--check"),
        CONFIG,
        ("{dir}",),
    ),
    P("profile binary junk", "\x00\x01\x02\xff\xfe garbage", ("p.yml",)),
    P("profile a list", "- 1\n- 2\n", ("p.yml", "mapping")),
    P("profile empty", "", ("p.yml", "fabric_desired")),
    P("profile misspelled section", "fabric_desird:\n  nccl: null\n", ("fabric_desird",)),
    P("profile section not a mapping", "fabric_desired: 5\n", ("fabric_desired", "5")),
    P("mtu not a number", NICS + "      mtu: abc\n", ("mtu", "abc")),
    P("mtu out of range", NICS + "      mtu: 100000\n", ("mtu", "100000")),
    P("pfc priority 9", NICS + "      pfc: [9]\n", ("pfc", "9")),
    P("trust unknown", NICS + "      trust: foo\n", ("trust", "foo")),
    P("roce_tos 300", NICS + "      roce_tos: 300\n", ("roce_tos", "300")),
    P("dscp2prio dscp 64", NICS + "      dscp2prio: {64: 3}\n", ("dscp2prio", "64")),
    P(
        "tcbw not summing to 100",
        NICS + "      tsa: [ets, ets, ets, ets, ets, ets, ets, ets]\n"
        "      tcbw: [50, 50, 50, 0, 0, 0, 0, 0]\n",
        ("tcbw", "sums to 150"),
    ),
    P("unknown NIC knob", NICS + "      turbo: true\n", ("turbo",)),
    P("nccl value a list", "fabric_desired:\n  nccl:\n    NCCL_IB_TC: [1, 2]\n", ("NCCL_IB_TC",)),
    Bad(
        "InfiniBand profile on a RoCE rack",
        ("apply", "-i", "{inv}", "--profile", "ib", "--check"),
        CONFIG,
        ("NCCL_IB_ADAPTIVE_ROUTING", "RoCE"),
    ),
    Bad(
        "sm section on an InfiniBand inventory without subnet managers",
        ("apply", "-i", "{dir}/inv.yml", "--profile", "{dir}/p.yml", "--check"),
        CONFIG,
        ("sm", "subnet_managers"),
        {"p.yml": "fabric_desired:\n  sm:\n    routing_engine: updn\n"},
        inv_vars={"fabtune_fabric": "ib"},
    ),
    P(
        "sm section on a RoCE rack",
        "fabric_desired:\n  sm:\n    routing_engine: updn\n",
        ("fabric_desired.sm", "InfiniBand-only"),
    ),
    # tuning options
    T("tune options a list", "  - max_runs: 3", ("fabtune_tune",)),
    T("max_runs not a number", "  max_runs: abc", ("max_runs", "abc")),
    T("max_runs a boolean", "  max_runs: true", ("max_runs", "True")),
    T("skip_groups a string", "  skip_groups: mtu", ("skip_groups", "mtu")),
    T("skip_groups unknown group", "  skip_groups: [turbo]", ("skip_groups", "turbo")),
    T("alpha above 0.5", "  alpha: 2", ("alpha", "2")),
    T("unknown option", "  max_run: 3", ("max_run",)),
    T("revert deadline too short", "  revert_deadline_s: 5", ("revert_deadline_s", "5")),
    T("baseline_runs zero", "  baseline_runs: 0", ("baseline_runs", "0")),
    T("guard_loss above 1", "  guard_loss: 3", ("guard_loss", "3")),
    P("misspelled tuning section", "fabtune_tun:\n  max_runs: 3\n", ("fabtune_tun",), verb="tune"),
    Bad(
        "/etc/shadow as a profile",
        ("tune", "-i", "{inv}", "--profile", "/etc/shadow"),
        CONFIG,
        ("/etc/shadow",),
    ),
    # inventories
    Bad("inventory missing", ("tune", "-i", "{dir}/none.yml"), CONFIG, ("none.yml",)),
    Bad(
        "inventory malformed",
        ("tune", "-i", "{dir}/bad.yml"),
        CONFIG,
        ("bad.yml",),
        {"bad.yml": "all: [: :\n"},
    ),
    Bad(
        "inventory without hosts",
        ("tune", "-i", "{dir}/empty.yml"),
        CONFIG,
        ("hosts",),
        {"empty.yml": "all: {}\n"},
    ),
    I("fabric type unknown", {"fabtune_fabric": "ethernet"}, ("fabtune_fabric", "ethernet")),
    I("fabric name escapes the home", {"fabtune_testbed": "../../../../tmp/x"}, ("../../../../tmp/x",)),
    I("fabric name with a slash", {"fabtune_fabric_name": "a/b"}, ("fabtune_fabric_name", "a/b")),
    I(
        "launcher injection",
        {"fabtune_launcher": "mpirun;touch /tmp/pwned"},
        ("fabtune_launcher", "mpirun;touch"),
    ),
    I("launcher unknown", {"fabtune_launcher": "pdsh"}, ("fabtune_launcher", "pdsh")),
    # testbed specs
    S("spec one host", "hosts: 1\n", ("hosts", "1")),
    S("spec too many hosts", "hosts: 100\n", ("hosts", "100")),
    S("spec unknown fabric", "hosts: 2\nfabric: ethernet\n", ("fabric", "ethernet")),
    S("spec name traversal", "name: ../x\nhosts: 2\n", ("name", "../x")),
    S("spec subnet", "hosts: 2\nsubnet_base: '999.1'\n", ("subnet_base", "999.1")),
    S("spec unknown key", "hosts: 2\nbogus: 1\n", ("bogus",)),
    S("spec no NICs", "hosts: 2\nnics_per_host: 0\n", ("nics_per_host", "0")),
    S("spec override of a host it has not", "hosts: 2\noverrides: {h09: {gpus: 4}}\n", ("h09",)),
    # testbed names
    Bad("down ..", ("testbed", "down", "--name", ".."), CONFIG, ("..",)),
    Bad("down ../..", ("testbed", "down", "--name", "../.."), CONFIG, ("../..",)),
    Bad("down a/b", ("testbed", "down", "--name", "a/b"), CONFIG, ("a/b",)),
    Bad("down a testbed that does not exist", ("testbed", "down", "--name", "nosuch"), TESTBED, ("nosuch",)),
    Bad("status ..", ("testbed", "status", "--name", ".."), CONFIG, ("..",)),
    Bad("inventory of an empty name", ("testbed", "inventory", "--name", ""), CONFIG, ("name",)),
    # run ids
    Bad("show an unknown run", ("show", RUN_ID), CONFIG, (RUN_ID,)),
    Bad("show a path", ("show", "../../etc"), CONFIG, ("../../etc",)),
    Bad("report a path", ("report", "../x"), CONFIG, ("../x",)),
    Bad("rollback an unknown run", ("rollback", RUN_ID), CONFIG, (RUN_ID,)),
    Bad("resume an unknown run", ("resume", RUN_ID), CONFIG, (RUN_ID,)),
    # command-line values
    Bad("runs --limit abc", ("runs", "--limit", "abc"), USAGE, ("--limit", "abc")),
    Bad("tune without -i", ("tune",), USAGE, ("-i",)),
    Bad("testbed up --hosts abc", ("testbed", "up", "--hosts", "abc"), USAGE, ("--hosts", "abc")),
    Bad("testbed up --fabric foo", ("testbed", "up", "--fabric", "foo"), USAGE, ("foo",)),
    Bad("unknown verb", ("tunez",), USAGE, ("tunez",)),
    # parse inputs
    Bad(
        "parse an unknown tool", ("parse", "perftest", "{dir}/x.txt"), USAGE, ("perftest",), {"x.txt": "x\n"}
    ),
    Bad("parse a missing file", ("parse", "nccl-tests", "{dir}/none.txt"), CONFIG, ("none.txt",)),
    Bad(
        "parse nccl-tests garbage",
        ("parse", "nccl-tests", "{dir}/g.txt"),
        int(ExitStatus.BENCHMARK),
        ("g.txt",),
        {"g.txt": "garbage\n" * 50},
    ),
    Bad(
        "parse ib_write_bw empty",
        ("parse", "ib_write_bw", "{dir}/e.txt"),
        int(ExitStatus.BENCHMARK),
        ("e.txt",),
        {"e.txt": ""},
    ),
    Bad(
        "parse ibstat binary",
        ("parse", "ibstat", "{dir}/b.bin"),
        int(ExitStatus.BENCHMARK),
        ("b.bin",),
        {"b.bin": bytes(range(256)) * 40},
    ),
]


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("fbad", "10.248")


@pytest.fixture(scope="module")
def pristine(rack: TestbedSpec) -> dict[str, dict[str, str]]:
    return host_fingerprint(rack)


def _fill(value: str, mapping: dict[str, str]) -> str:
    for key, real in mapping.items():
        value = value.replace("{" + key + "}", real)
    return value


def _write_inputs(row: Bad, rack: TestbedSpec, folder: Path) -> None:
    for name, content in row.files.items():
        data = content.encode() if isinstance(content, str) else content
        (folder / name).write_bytes(data)
    if row.inv_vars is not None:
        doc = yaml.safe_load(inventory(rack).read_text())
        doc["all"]["vars"].update(row.inv_vars)
        (folder / "inv.yml").write_text(yaml.safe_dump(doc))


def test_the_table_has_sixty_rows() -> None:
    assert len(ROWS) >= 60 and len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_is_refused_by_name_and_no_host_changes(
    row: Bad, rack: TestbedSpec, pristine: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    _write_inputs(row, rack, tmp_path)
    fill = {"inv": str(inventory(rack)), "dir": str(tmp_path), "repo": str(REPO)}
    out = cli(*(_fill(a, fill) for a in row.argv), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == row.code, text
    assert "Traceback" not in text, text
    flat = " ".join(text.split())  # a message may be wrapped to the terminal's width
    for needle in row.needles:
        assert _fill(needle, fill) in flat, f"{needle!r} not named in: {text}"
    assert host_fingerprint(rack) == pristine
    assert not Path("/tmp/pwned").exists()


def test_a_50_mb_nccl_tests_log_parses_in_bounded_time_and_memory(tmp_path: Path) -> None:
    sample = FIXTURES / "nccl-tests__allreduce_perf_8xA100_single_node__superbenchmark.txt"
    if not sample.exists():
        pytest.skip("../shared/fixtures is not beside the checkout")
    table = "".join(sample.read_text().splitlines(keepends=True)[1:])
    info = "node01:12345:12345 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7\n"
    log = tmp_path / "big.log"
    with log.open("w") as out:
        out.write(info * (50_000_000 // len(info)))
        out.write(table)
    limit = 1 << 30  # 1 GiB of address space for the whole process, interpreter included

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "fabtune", "parse", "nccl-tests", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=cap,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "busbw" in done.stdout or "bus" in done.stdout.lower()
