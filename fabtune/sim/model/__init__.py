"""The fabric model: bandwidth from configuration (a deterministic, seeded, pure function).

Public entry points::

    ceiling_gbps(nic)                                  physical goodput ceiling of a port
    p2p(fabric, flows, run_index)                      ib_write_bw rounds -> P2PRun
    collective(fabric, op, sizes, run_index)           nccl-tests -> CollectiveResult
    best_config(fabric) / oracle(fabric)               best reachable config and its busbw

See docs/model.md for every equation and parameter with its source.
"""

from fabtune.sim.model.calibration import calibration_markdown, calibration_rows
from fabtune.sim.model.collective import collective, expected_busbw, expected_busbws
from fabtune.sim.model.config import (
    DEFAULT_GIDS,
    FabricConfig,
    Flow,
    GidEntry,
    HostConfig,
    NicConfig,
    SmConfig,
    SwitchConfig,
)
from fabtune.sim.model.link import active_mtu, ceiling_gbps
from fabtune.sim.model.oracle import Knobs, apply, best_config, oracle, score
from fabtune.sim.model.p2p import p2p
from fabtune.sim.model.patterns import incast, pair_rounds
from fabtune.sim.model.results import (
    CollectiveResult,
    Counters,
    P2PResult,
    P2PRun,
    SizeResult,
)

__all__ = [
    "DEFAULT_GIDS",
    "CollectiveResult",
    "Counters",
    "FabricConfig",
    "Flow",
    "GidEntry",
    "HostConfig",
    "Knobs",
    "NicConfig",
    "P2PResult",
    "P2PRun",
    "SizeResult",
    "SmConfig",
    "SwitchConfig",
    "active_mtu",
    "apply",
    "best_config",
    "calibration_markdown",
    "calibration_rows",
    "ceiling_gbps",
    "collective",
    "expected_busbw",
    "expected_busbws",
    "incast",
    "oracle",
    "p2p",
    "pair_rounds",
    "score",
]
