"""The analytic step-time model of a training job (docs/advisor.md, "Step time").

Pure arithmetic: a job, its layout on N nodes and the per-GPU bandwidths at N give the step time
split into compute, pipeline bubble and the exposed part of each collective, and the MFU.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabtune.advise.job import ACT_BYTES, GRAD_BYTES, JobSpec, Layout

GB = 1e9
TERA = 1e12


@dataclass(frozen=True)
class Bandwidth:
    """Per-GPU bus bandwidths (GB/s) the job's collectives see at N nodes."""

    net: float  # one GPU's share of its node's fabric bandwidth (all_reduce busbw / GPUs per node)
    alltoall: float  # alltoall busbw per GPU across nodes
    nvlink: float  # intra-node collective bus bandwidth


@dataclass(frozen=True)
class StepTime:
    """One step at ``nodes``, seconds; ``fabric_s`` is the exposed time spent on the fabric."""

    nodes: int
    gpus: int
    dp: int
    compute_s: float
    bubble_s: float
    dp_comm_s: float  # the whole data-parallel reduction
    dp_exposed_s: float  # the part not hidden behind the backward pass
    tp_s: float
    pp_s: float
    ep_s: float
    fabric_s: float
    step_s: float
    mfu: float
    tokens_per_s: float

    @property
    def fabric_share(self) -> float:
        """Fraction of the step the GPUs wait on the fabric."""
        return self.fabric_s / self.step_s


def flops_per_token(job: JobSpec) -> float:
    """Model FLOPs per trained token: 6 N (forward + backward matmuls) + 12 L h s (attention),
    PaLM appendix B; the attention term only when layers and hidden are given."""
    attention = 12.0 * job.layers * job.hidden * job.seq_len if job.layers and job.hidden else 0.0
    return 6.0 * job.active_params + attention


def step_flops(job: JobSpec) -> float:
    """Model FLOPs of one optimizer step (global_batch x seq_len tokens)."""
    return flops_per_token(job) * job.global_batch * job.seq_len


def compute_s(job: JobSpec, layout: Layout) -> float:
    """The step's compute time on every GPU at ``achievable`` x peak."""
    return step_flops(job) / (layout.gpus * job.peak_tflops * TERA * job.achievable)


def bubble_s(job: JobSpec, layout: Layout, compute: float) -> float:
    """The pipeline bubble of 1F1B with ``vp`` interleaved chunks: (pp-1)/(vp m) of the compute
    (Narayanan et al. 2021, sections 2.2.1 and 2.2.2)."""
    return compute * (job.pp - 1) / (job.vp * layout.microbatches)


def ring_s(size_bytes: float, ranks: int, busbw_gbytes: float, factor: float = 2.0) -> float:
    """A ring collective's time from the nccl-tests bus bandwidth: busbw = algbw x factor (n-1)/n
    (factor 2 for all_reduce, 1 for reduce_scatter, all_gather and alltoall)."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return size_bytes * factor * (ranks - 1) / ranks / (busbw_gbytes * GB)


def grad_bytes(job: JobSpec) -> float:
    """Gradient bytes one GPU reduces per step: its shard of the dense weights, and of the experts'
    (sharded over ``ep``) when the model is a mixture of experts."""
    dense = job.active_params if job.ep > 1 else job.params
    experts = (job.params - job.active_params) / job.ep if job.ep > 1 else 0.0
    return (dense + experts) / job.model_gpus * GRAD_BYTES[job.precision]


def dp_busbw(job: JobSpec, layout: Layout, bw: Bandwidth) -> float:
    """The data-parallel group's per-GPU bus bandwidth: NVLink inside one node; across nodes, the
    group's GPUs on one node share their rails (k GPUs of the group per node get k x net)."""
    if layout.nodes == 1:
        return bw.nvlink
    local = max(1, job.gpus_per_node // job.model_gpus)
    return min(bw.nvlink, local * bw.net)


def activation_bytes(job: JobSpec) -> float:
    """One micro-batch's activations at a layer boundary: b s h x bytes."""
    return float(job.micro_batch * job.seq_len * (job.hidden or 0) * ACT_BYTES[job.precision])


def tp_s(job: JobSpec, layout: Layout, bw: Bandwidth) -> float:
    """Tensor parallelism: 4 all-reduces of b s h per layer per micro-batch (2 forward, 2 backward;
    Shoeybi et al. 2019), on NVLink, on the critical path."""
    if job.tp == 1:
        return 0.0
    per_stage = (job.layers or 0) / job.pp
    return per_stage * layout.microbatches * 4 * ring_s(activation_bytes(job), job.tp, bw.nvlink)


def pp_s(job: JobSpec, bw: Bandwidth) -> float:
    """Pipeline point-to-point: b s h / tp per message (scatter/gather, Narayanan et al. 2021
    section 4.1); steady-state sends overlap compute, the 2 (pp-1) of fill and drain do not."""
    if job.pp == 1:
        return 0.0
    crosses = job.model_gpus > job.gpus_per_node
    rate = bw.net if crosses else bw.nvlink
    return 2 * (job.pp - 1) * activation_bytes(job) / job.tp / (rate * GB)


def ep_s(job: JobSpec, layout: Layout, bw: Bandwidth) -> float:
    """Expert parallelism: 4 alltoalls (dispatch and combine, forward and backward) of b s h top_k
    per MoE layer per micro-batch, not overlapped; across nodes when ep x tp > GPUs per node."""
    if job.ep == 1:
        return 0.0
    crosses = job.ep * job.tp > job.gpus_per_node
    rate = bw.alltoall if crosses else bw.nvlink
    per_stage = job.moe_layers / job.pp
    size = activation_bytes(job) * job.top_k / job.tp
    return per_stage * layout.microbatches * 4 * ring_s(size, job.ep, rate, factor=1.0)


def step_time(job: JobSpec, layout: Layout, bw: Bandwidth) -> StepTime:
    """The step at ``layout`` with bandwidths ``bw`` (docs/advisor.md, "Step time")."""
    compute = compute_s(job, layout)
    bubble = bubble_s(job, layout, compute)
    dp_comm = ring_s(grad_bytes(job), layout.dp, dp_busbw(job, layout, bw))
    window = job.overlap * (2.0 / 3.0) * compute / layout.microbatches  # last micro-batch's backward
    dp_exposed = max(0.0, dp_comm - window)
    tp, pp, ep = tp_s(job, layout, bw), pp_s(job, bw), ep_s(job, layout, bw)
    on_fabric = layout.nodes > 1
    fabric = (dp_exposed if on_fabric else 0.0) + (pp if job.model_gpus > job.gpus_per_node else 0.0)
    fabric += ep if job.ep * job.tp > job.gpus_per_node else 0.0
    step = compute + bubble + dp_exposed + tp + pp + ep
    flops = step_flops(job)
    return StepTime(
        nodes=layout.nodes,
        gpus=layout.gpus,
        dp=layout.dp,
        compute_s=compute,
        bubble_s=bubble,
        dp_comm_s=dp_comm,
        dp_exposed_s=dp_exposed,
        tp_s=tp,
        pp_s=pp,
        ep_s=ep,
        fabric_s=fabric,
        step_s=step,
        mfu=flops / (layout.gpus * job.peak_tflops * TERA * step),
        tokens_per_s=job.global_batch * job.seq_len / step,
    )
