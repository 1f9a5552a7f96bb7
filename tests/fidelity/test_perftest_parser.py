"""Fidelity: the emulated perftest's option parser against Debian's real ``ib_write_bw``.

Both parse the same command lines. The real binary (Debian 12's perftest package, which
scripts/install.sh installs) runs on this machine without any RDMA device: a command line its
parser accepts ends at device detection (``Did not detect devices``), one it refuses prints the
parser's own message first. The twin is ``fabtune.sim.tools._perftest_args.parse``. For each line
the verdicts must agree, and a refusal must print the same first line.

Where they may differ by design, the corpus says so: the emulated hosts run a CUDA build of
perftest (``--use_cuda``), Debian's package is built without CUDA.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess

import pytest

from fabtune.sim.tools import _perftest_args

REAL = shutil.which("ib_write_bw")
pytestmark = pytest.mark.skipif(REAL is None,
                                reason="Debian's perftest is not installed (scripts/install.sh)")
NO_DEVICE = "Did not detect devices"

CORPUS = [
    "-s 1048576 -q 8 -D 5 --report_gbits -x 3 -F",
    "-d mlx5_0 -i 1 -x 3",
    "-R -x 3",
    "-b",
    "-m 5000",
    "--mtu=1000",  # checked against the port's MTU later, not by the parser
    "-x 300",  # the GID index is a uint8_t: 300 wraps to 44, within 0..64
    "-x 65",
    "-x -1",
    "--port=70000",
    "--ib-port=300",
    "--sl=15",
    "--sl=20",
    "--tclass=300",  # no parse-time check (finding 8 of issue 13)
    "--tclass=-1",
    "--tos=106",
    "--tos=106 -R",
    "--tos=300 -R",
    "-s 0",
    "-s 3000000000",
    "-q 0",
    "-q 16385",
    "-n 0",
    "--iters=4",
    "-D 0",
    "-a -D 5",
    "-D 2 -f 1",  # DURATION > 2*MARGIN
    "-D 4 -f 1",
    "-f 3",  # checked against DEF_DURATION (5) without -D
    "-f 2",
    "-f -1",
    "-t 0",
    "--tx-depth=0",
    "--gid-index=-1",
    "--foo",
    "-h",
    "--version",
]


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def real(argv: list[str]) -> tuple[str, str]:
    assert REAL is not None
    done = subprocess.run([REAL, *argv], capture_output=True, text=True, timeout=20, check=False)
    text = done.stdout + done.stderr
    if NO_DEVICE in text:
        return "accepted", ""
    return "refused", _first_line(text)


def twin(argv: list[str]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            _perftest_args.parse("ib_write_bw", argv)
        except _perftest_args.ParseExit:
            return "refused", _first_line(out.getvalue() + err.getvalue())
    return "accepted", ""


@pytest.mark.parametrize("line", CORPUS)
def test_the_twin_parses_as_debians_ib_write_bw(line: str) -> None:
    argv = line.split()
    assert twin(argv) == real(argv)
