"""The advice: rows per N and option, the reference N, the N where the fabric starts to cost,
where InfiniBand pays, the verdict and the assumptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabtune.advise.advise import IB_PAYS, advise, candidates, predict
from fabtune.advise.fabric import Topology, options
from fabtune.advise.job import parse_job
from fabtune.advise.measured import Measured, from_run
from fabtune.errors import ConfigError
from fabtune.journal import Journal

RACK = Measured("r", "roce", 4, "final", 360.0, 42.0, 400.0, 1)
# a fabric-heavy job: 3D parallel with a small global batch, so the DP reduction is exposed
HEAVY: dict[str, Any] = {
    "name": "heavy", "layers": 80, "hidden": 8192, "params": 70e9, "seq_len": 4096, "global_batch": 256,
    "tp": 8, "pp": 2, "peak_tflops": 989,
}
# data parallel only, long sequences: the reduction hides behind the backward at every N it fits (<= 64)
LIGHT: dict[str, Any] = {
    "name": "light", "layers": 32, "hidden": 4096, "params": 8e9, "seq_len": 8192, "global_batch": 1024,
    "micro_batch": 2, "peak_tflops": 989,
}


def test_rows_cover_every_n_and_option_and_scale_against_the_rack() -> None:
    job = parse_job(HEAVY, "x")
    a = advise(job, RACK, [16, 4, 64], Topology())
    assert a.nodes == (4, 16, 64) and a.reference_nodes == 4
    assert [(r.step.nodes, r.option) for r in a.rows[:4]] == [(4, o.name) for o in options(1)]
    assert all(r.scaling == 1.0 for r in a.rows[:4])


def test_the_reference_is_the_smallest_n_when_the_job_does_not_fit_the_rack() -> None:
    job = parse_job({**HEAVY, "pp": 8}, "x")  # 64 GPUs per replica: 8 nodes at least
    a = advise(job, RACK, [8, 32], Topology())
    assert a.reference_nodes == 8


def test_ib_pays_beyond_the_leaf_for_a_fabric_heavy_job_and_never_for_a_light_one() -> None:
    heavy = advise(parse_job(HEAVY, "x"), RACK, [4, 32, 64], Topology())
    assert heavy.ib_pays_from is not None and heavy.ib_pays_from > 32
    n = heavy.ib_pays_from
    ib = predict(heavy.job, RACK, options(1)[3], Topology(), n)[1].mfu
    roce = predict(heavy.job, RACK, options(1)[0], Topology(), n)[1].mfu
    assert ib >= IB_PAYS * roce
    assert f"from N={n} InfiniBand NDR gives" in heavy.verdict
    light = advise(parse_job(LIGHT, "x"), RACK, [4, 64], Topology())
    assert light.ib_pays_from is None and "InfiniBand never gives 5% more" in light.verdict


def test_a_bigger_leaf_moves_the_answer() -> None:
    small = advise(parse_job(HEAVY, "x"), RACK, [4, 64], Topology(leaf_nodes=32))
    big = advise(parse_job(HEAVY, "x"), RACK, [4, 64], Topology(leaf_nodes=64))
    assert small.ib_pays_from is not None and big.ib_pays_from is not None
    assert big.ib_pays_from > small.ib_pays_from


def test_the_verdict_says_why_and_the_assumptions_carry_the_line_rate() -> None:
    a = advise(parse_job(HEAVY, "x"), RACK, [4], Topology())
    assert "same up to 32 nodes (rail-local); beyond, traffic crosses the spine" in a.verdict
    assert "RoCE as tuned keeps 52% of its per-GPU bandwidth (ECMP collisions)" in a.verdict
    assert "InfiniBand with adaptive routing 95%" in a.verdict
    assert "45.0 GB/s per GPU over 8 GPUs/node = 90% of its line rate (50.0 GB/s)" in a.assumptions[0]


def test_fabric_bound_is_the_first_n_where_the_fabric_takes_a_tenth_of_the_step() -> None:
    a = advise(parse_job(HEAVY, "x"), RACK, [4, 64], Topology())
    n = a.fabric_bound["roce"]
    assert n is not None
    assert predict(a.job, RACK, options(1)[0], Topology(), n)[1].fabric_share >= 0.10
    earlier = [m for m in candidates(a.job, 4) if m < n]
    assert all(predict(a.job, RACK, options(1)[0], Topology(), m)[1].fabric_share < 0.10 for m in earlier)


def test_every_n_that_does_not_fit_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        advise(parse_job(HEAVY, "x"), RACK, [3, 4, 5], Topology())
    assert [p.split(":")[0] for p in err.value.problems] == ["N=3", "N=5"]


def test_a_bootstrap_run_gives_its_acceptance_busbw(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite")
    run_id = journal.open_run("bootstrap", "rack1", str(tmp_path / "gone.yml"), "roce.yml")
    seq = journal.step(run_id, "phase", "preflight", {"hosts": ["a", "b"]})
    journal.finish_step(run_id, seq, "done", {"hosts": ["a", "b"], "checks": []})
    seq = journal.step(run_id, "phase", "acceptance", {})
    journal.finish_step(run_id, seq, "done", {"busbw_gbytes": 180.0})
    m = from_run(journal, run_id)
    # the inventory is gone: the fabric type falls back to RoCE
    assert (m.phase, m.nodes, m.all_reduce, m.alltoall, m.kind) == ("acceptance", 2, 180.0, None, "roce")
    assert m.alltoall_per_gpu(8) == 22.5
