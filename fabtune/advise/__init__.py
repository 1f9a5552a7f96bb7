"""The advisor: what a training job gets at N nodes on this fabric, and RoCE or InfiniBand.

``job`` reads and checks a job spec (the model, the batch, the parallel degrees, the GPU) and fits
it to a cluster size; ``model`` is the analytic step-time model (compute, pipeline bubble, exposed
communication, MFU); ``fabric`` projects the rack's measured per-GPU bandwidth to N nodes for each
fabric option (RoCE as tuned, RoCE with QP scaling, RoCE with adaptive routing, InfiniBand NDR);
``measured`` reads a saved run's measurements; ``advise`` puts them together. docs/advisor.md holds
every equation and its source.
"""
