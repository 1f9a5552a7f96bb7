"""The step-time model, equation by equation (docs/advisor.md, "Step time"), on numbers worked by
hand from the equations, not from the code."""

from __future__ import annotations

from typing import Any

import pytest

from fabtune.advise import model
from fabtune.advise.job import fit, parse_job
from fabtune.advise.model import Bandwidth

DENSE: dict[str, Any] = {
    "name": "d", "params": 1e9, "seq_len": 1000, "global_batch": 64, "peak_tflops": 100,
    "achievable": 0.5, "overlap": 0.0,
}
BW = Bandwidth(net=10.0, alltoall=5.0, nvlink=100.0)


def test_flops_per_token_is_6n_plus_the_attention_term() -> None:
    assert model.flops_per_token(parse_job(DENSE, "x")) == 6e9
    shaped = parse_job({**DENSE, "layers": 10, "hidden": 100}, "x")
    assert model.flops_per_token(shaped) == 6e9 + 12 * 10 * 100 * 1000


def test_compute_time_is_step_flops_over_gpus_peak_and_fraction() -> None:
    job = parse_job(DENSE, "x")
    layout = fit(job, 2)  # 16 GPUs
    # 6e9 x 64 x 1000 tokens / (16 x 100e12 x 0.5) = 0.48 s
    assert model.compute_s(job, layout) == pytest.approx(0.48)


def test_pipeline_bubble_is_pp_minus_1_over_vp_m() -> None:
    job = parse_job({**DENSE, "layers": 8, "hidden": 64, "pp": 4, "vp": 2}, "x")
    layout = fit(job, 2)  # 16 GPUs, dp 4, m = 64 / 4 = 16
    assert layout.microbatches == 16
    assert model.bubble_s(job, layout, 1.0) == pytest.approx(3 / (2 * 16))


def test_ring_time_follows_the_busbw_definition() -> None:
    # all_reduce: busbw = algbw x 2 (n-1)/n: 1 GB over 4 ranks at 10 GB/s = 0.15 s
    assert model.ring_s(1e9, 4, 10.0) == pytest.approx(0.15)
    assert model.ring_s(1e9, 4, 10.0, factor=1.0) == pytest.approx(0.075)
    assert model.ring_s(1e9, 1, 10.0) == 0.0


def test_data_parallel_reduction_uses_the_rails_of_the_group_and_hides_behind_backward() -> None:
    job = parse_job({**DENSE, "overlap": 1.0}, "x")
    layout = fit(job, 2)  # dp 16, 8 GPUs of the group per node
    # the DP group has 8 GPUs per node: 8 x 10 GB/s, capped by NVLink 100
    assert model.dp_busbw(job, layout, BW) == 80.0
    step = model.step_time(job, layout, BW)
    comm = 4e9 * 2 * 15 / 16 / 80e9  # bf16 gradients reduced in fp32: 4 bytes each
    assert step.dp_comm_s == pytest.approx(comm)
    window = (2 / 3) * 0.48 / layout.microbatches
    assert step.dp_exposed_s == pytest.approx(max(0.0, comm - window))
    one_node = fit(job, 1)
    assert model.dp_busbw(job, one_node, BW) == 100.0


def test_tensor_parallel_is_four_all_reduces_per_layer_per_microbatch_on_nvlink() -> None:
    job = parse_job({**DENSE, "layers": 4, "hidden": 1000, "tp": 8, "micro_batch": 2}, "x")
    layout = fit(job, 2)  # dp 2, m = 64 / (2 x 2) = 16
    act = 2 * 1000 * 1000 * 2  # b s h x 2 bytes
    expect = 4 * 16 * 4 * act * 2 * 7 / 8 / 100e9
    assert model.tp_s(job, layout, BW) == pytest.approx(expect)


def test_pipeline_p2p_exposes_fill_and_drain_on_the_fabric_when_stages_cross_nodes() -> None:
    job = parse_job({**DENSE, "layers": 8, "hidden": 1000, "tp": 8, "pp": 4}, "x")
    act = 1000 * 1000 * 2
    assert model.pp_s(job, BW) == pytest.approx(2 * 3 * act / 8 / 10e9)
    inside = parse_job({**DENSE, "layers": 8, "hidden": 1000, "tp": 2, "pp": 4}, "x")
    assert model.pp_s(inside, BW) == pytest.approx(2 * 3 * act / 2 / 100e9)


def test_expert_alltoall_over_the_fabric_when_the_group_leaves_the_node() -> None:
    job = parse_job({**DENSE, "layers": 4, "hidden": 1000, "ep": 16, "top_k": 2, "params": 8e9,
                     "active_params": 1e9}, "x")
    layout = fit(job, 2)  # dp 16, m = 4
    size = 1000 * 1000 * 2 * 2
    expect = 4 * layout.microbatches * 4 * size * 15 / 16 / 5e9
    assert model.ep_s(job, layout, BW) == pytest.approx(expect)
    # MoE gradients: the dense part whole, the experts sharded over ep
    assert model.grad_bytes(job) == pytest.approx((1e9 + 7e9 / 16) * 4)
    fp16 = parse_job({**DENSE, "precision": "fp16"}, "x")
    assert model.grad_bytes(fp16) == pytest.approx(1e9 * 2)
    assert model.flops_per_token(job) == 6e9 + 12 * 4 * 1000 * 1000


def test_mfu_is_model_flops_over_the_step_and_the_fabric_share_counts_only_the_fabric() -> None:
    job = parse_job({**DENSE, "layers": 8, "hidden": 1000, "tp": 8, "pp": 2}, "x")
    layout = fit(job, 4)
    step = model.step_time(job, layout, BW)
    total = step.compute_s + step.bubble_s + step.dp_exposed_s + step.tp_s + step.pp_s
    assert step.step_s == pytest.approx(total)
    assert step.mfu == pytest.approx(model.step_flops(job) / (32 * 100e12 * step.step_s))
    assert step.mfu < 0.5  # never above the achievable fraction
    assert step.fabric_s == pytest.approx(step.dp_exposed_s + step.pp_s)  # TP stays on NVLink
    assert step.tokens_per_s == pytest.approx(64 * 1000 / step.step_s)
