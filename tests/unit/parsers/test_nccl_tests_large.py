"""A 50 MB nccl-tests log is read line by line: bounded memory, a result or one clear error."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus, ParseError
from fabtune.perf.parsers import nccl_tests

SIZE = 50_000_000
HEADER = (
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#  Rank  0 Group  0 Pid 1666603 on h01 device  0 [000f:01:00] NVIDIA H100 80GB HBM3\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong\n"
)
ROW = "        8192          2048     float     sum      -1    35.15    0.23    0.23       0" \
      "    30.33    0.27    0.27       0\n"
INFO = "h01:1234:1234 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7\n"
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 68.4048\n"


def _write(path: Path, chunks: Callable[[], Iterator[str]]) -> Path:
    with path.open("w") as out:
        for chunk in chunks():
            out.write(chunk)
    assert path.stat().st_size >= SIZE
    return path


def _debug_log() -> Iterator[str]:
    """A NCCL_DEBUG=INFO run: 50 MB of INFO lines around one table, and two huge garbage lines."""
    yield HEADER
    yield ROW * 30
    block = INFO * 10_000
    for i in range(SIZE // len(block) + 1):
        yield block
        if i == 10:
            yield "#  Rank  1 Pid 1 on h02 device 1 [x] " + " " * 5_000_000 + "x\n"
        if i == 20:
            yield "x" * 5_000_000 + "\n"
    yield FOOTER


def _rows_log() -> Iterator[str]:
    yield HEADER
    block = ROW * 10_000
    for _ in range(SIZE // len(block) + 1):
        yield block


def _peak_mb(action: Callable[[], object]) -> tuple[object, float]:
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def debug_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("nccl") / "debug.log", _debug_log)


def test_50mb_debug_log_parses_in_bounded_memory(debug_log: Path) -> None:
    def parse() -> nccl_tests.NcclTestsResult:
        with debug_log.open() as stream:
            return nccl_tests.parse_stream(stream)

    result, peak = _peak_mb(parse)
    assert isinstance(result, nccl_tests.NcclTestsResult)
    assert len(result.rows) == 30
    assert len(result.devices) == 1  # the 5 MB rank line is noise, not a device
    assert result.avg_busbw_gbps == 68.4048
    assert peak < 64, f"peak {peak:.0f} MB"


def test_50mb_debug_log_through_the_cli(debug_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, peak = _peak_mb(lambda: main(["parse", "nccl-tests", str(debug_log)]))
    assert code == ExitStatus.OK
    assert "avg bus bandwidth: 68.4048 GB/s" in capsys.readouterr().out
    assert peak < 64, f"peak {peak:.0f} MB"  # the whole text and its line list took over 200 MB


def test_50mb_of_rows_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    log = _write(tmp_path / "rows.log", _rows_log)

    def parse() -> str:
        with log.open() as stream, pytest.raises(ParseError) as caught:
            nccl_tests.parse_stream(stream)
        return str(caught.value)

    message, peak = _peak_mb(parse)
    assert f"more than {nccl_tests.MAX_RECORDS} result rows" in str(message)
    assert peak < 200, f"peak {peak:.0f} MB"


def test_text_and_stream_give_the_same_result(tmp_path: Path) -> None:
    text = HEADER + INFO + ROW * 3 + "x" * 10_000 + "\n" + FOOTER
    path = tmp_path / "small.log"
    path.write_text(text)
    with path.open() as stream:
        assert nccl_tests.parse_stream(stream) == nccl_tests.parse(text)
