"""What the tuning loop launches: one size per test, the one its decision reads."""

from __future__ import annotations

from pathlib import Path

from fabtune.tune.measure import MeasureSpec


def test_each_test_runs_only_the_size_its_decision_reads() -> None:
    spec = MeasureSpec(Path("inv.yml"), ("h01", "h02"), 8, {})
    ar, aa = spec.options("all_reduce_perf"), spec.options("alltoall_perf")
    assert (ar.min_bytes, ar.max_bytes) == ("8G", "8G")
    assert (aa.min_bytes, aa.max_bytes) == ("1G", "1G")
    sizes = {"all_reduce_perf": "4G", "alltoall_perf": "4G"}
    custom = MeasureSpec(Path("inv.yml"), ("h01",), 8, {}, sizes=sizes)
    assert custom.options("alltoall_perf").max_bytes == "4G"
