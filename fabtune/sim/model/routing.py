"""Where traffic goes between leaves: ECMP hashing (RoCE) and SM routing (IB).

A rail plane is a two-tier leaf/spine fabric; host ``i`` sits on leaf ``i // nodes_per_leaf``.
A job that fits one leaf never crosses a spine, so routing cannot hurt it (cal §5): that is the
~32-node knee with 64-port leaves (32 down, 32 up).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fabtune.sim.model import params
from fabtune.sim.model.config import CollectiveOp, FabricConfig, SmConfig, SwitchConfig

if TYPE_CHECKING:  # numpy only where the ECMP prior is drawn (see noise.py)
    import numpy as np


def leaf_of(sw: SwitchConfig, host: int) -> int:
    """Return the leaf switch that host ``host`` hangs off (per rail plane)."""
    return host // max(1, sw.nodes_per_leaf)


def spans_leaves(fabric: FabricConfig) -> bool:
    """Return True when the hosts of the fabric sit on more than one leaf."""
    return len(fabric.hosts) > fabric.switch.nodes_per_leaf


def _max_loads(rng: np.random.Generator, k: int, q: int, trials: int) -> np.ndarray:
    """Hash ``k`` flows of ``q`` QPs each onto ``k`` paths; return the max path load per trial."""
    import numpy as np

    picks = rng.integers(0, k, size=(trials, k * q))
    flat = (picks + np.arange(trials)[:, None] * k).ravel()
    counts = np.bincount(flat, minlength=trials * k).reshape(trials, k)
    return np.asarray(counts.max(axis=1) / q, dtype=float)


@functools.lru_cache(maxsize=256)
def ecmp_prior(k: int, q: int, stages: int = 2) -> float:
    """Return the ECMP collision prior of cal §4: mean of 1/(max link load) over trials.

    Args:
        k: equal-cost paths (spines), also the number of equal flows.
        q: QPs per flow, hashed independently (different UDP source ports).
        stages: 1 (leaf uplinks) or 2 (uplinks and spine downlinks).

    Returns:
        The efficiency of a synchronised collective that waits for its slowest flow.
    """
    if k <= 1:
        return 1.0
    import numpy as np

    rng = np.random.default_rng(4000 + 97 * k + q)
    worst = _max_loads(rng, k, q, params.ECMP_TRIALS)
    for _ in range(stages - 1):
        worst = np.maximum(worst, _max_loads(rng, k, q, params.ECMP_TRIALS))
    return float(np.mean(1.0 / worst))


def roce_route_eff(fabric: FabricConfig, qps: int) -> float:
    """Return the cross-leaf efficiency of RoCE: AR/spraying, or hashed ECMP calibrated as prior**alpha."""
    if fabric.switch.adaptive_routing:
        return params.F_ROUTE_AR
    return float(ecmp_prior(fabric.switch.spines, max(1, qps)) ** params.ECMP_ALPHA)


def ib_ar_active(fabric: FabricConfig, nccl_ar: str | None, sl: int) -> bool:
    """Return True when IB adaptive routing carries the traffic (SM, engine, SL mask, NCCL)."""
    sm = fabric.sm
    engine_ok = sm.routing_engine.split(",")[0].strip() in params.AR_ENGINES
    sl_ok = bool(sm.ar_sl_mask >> (sl & 15) & 1)
    return sm.adaptive_routing and engine_ok and sl_ok and nccl_ar != "0"


def ib_route_eff(fabric: FabricConfig, op: CollectiveOp, ar: bool) -> float:
    """Return the cross-leaf efficiency of IB routing for a collective pattern (cal §4, §8)."""
    engine = fabric.sm.routing_engine.split(",")[0].strip()
    if ar:
        return params.F_ROUTE_AR
    if engine in params.FTREE_ENGINES and op != "alltoall":
        return params.F_ROUTE_FTREE_SHIFT
    if engine in params.BALANCED_ENGINES:
        return params.F_ROUTE_BALANCED
    return params.F_ROUTE_STATIC


def oversub_cap(sw: SwitchConfig) -> float:
    """Return the share of line rate a leaf's uplinks give each host when all cross spines."""
    return min(1.0, 1.0 / max(sw.oversubscription, 1e-9))


def sl_dropped(sm: SmConfig, sl: int) -> bool:
    """Whether the SM's QoS maps ``sl`` to VL15: opensm's doc/QoS_management_in_OpenSM.txt section 7,
    "VL15 used here means drop this SL" (the SL2VL table, IBA 7.6.6), so its packets never arrive."""
    return sm.qos and len(sm.sl2vl) == 16 and sm.sl2vl[sl & 15] == 15
