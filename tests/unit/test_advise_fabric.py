"""The fabric projection: rail-local up to a leaf, ECMP collisions beyond, adaptive routing, and
the practitioners' rule of thumb where its assumptions hold."""

from __future__ import annotations

import math

import pytest

from fabtune.advise import fabric
from fabtune.advise.fabric import FabricOption, Rack, Topology

OPTS = {o.name: o for o in fabric.options(1)}


def test_options_are_roce_as_tuned_with_qps_with_ar_and_ib() -> None:
    assert list(OPTS) == ["roce", "roce+qp", "roce+ar", "ib-ndr"]
    assert fabric.options(2)[0].qps == 2 and fabric.options(2)[1].qps == 4


def test_ecmp_prior_reads_the_calibration_table_and_interpolates() -> None:
    assert fabric.ecmp_prior(32, 1) == pytest.approx(0.27)
    assert fabric.ecmp_prior(8, 4) == pytest.approx(0.53)
    assert fabric.ecmp_prior(1, 1) == 1.0
    assert fabric.ecmp_prior(1000, 1) == pytest.approx(0.24)  # held at the edge
    mid = fabric.ecmp_prior(int(2**4.5), 1)  # half-way (log scale) between k=16 and k=32
    assert 0.27 < mid < 0.30


def test_up_to_one_leaf_every_option_keeps_the_whole_bandwidth() -> None:
    topo = Topology(leaf_nodes=32)
    for n in (2, 16, 32):
        assert {fabric.route_factor(o, topo, n) for o in OPTS.values()} == {1.0}


def test_beyond_one_leaf_ecmp_collides_and_adaptive_routing_does_not() -> None:
    topo = Topology(leaf_nodes=32)
    assert fabric.route_factor(OPTS["roce"], topo, 33) == pytest.approx(math.sqrt(0.27))
    assert fabric.route_factor(OPTS["roce+qp"], topo, 64) == pytest.approx(math.sqrt(0.44))
    assert fabric.route_factor(OPTS["roce+ar"], topo, 64) == 0.95
    assert fabric.route_factor(OPTS["ib-ndr"], topo, 4096) == 0.95


def test_oversubscription_cuts_the_paths_and_the_bandwidth_across_the_spine() -> None:
    topo = Topology(leaf_nodes=32, oversubscription=2.0)
    assert topo.uplinks == 16
    assert fabric.route_factor(OPTS["ib-ndr"], topo, 64) == pytest.approx(0.475)
    assert fabric.route_factor(OPTS["roce"], topo, 64) == pytest.approx(math.sqrt(0.30) / 2)
    assert fabric.route_factor(OPTS["roce"], topo, 32) == 1.0


def test_projection_scales_by_the_header_ceiling_and_takes_out_the_racks_own_loss() -> None:
    topo = Topology(leaf_nodes=32)
    rack = Rack("roce", 4)
    assert fabric.project(45.0, rack, OPTS["roce"], topo, 16) == 45.0
    assert fabric.project(45.0, rack, OPTS["ib-ndr"], topo, 16) == pytest.approx(45.0 * 397.5 / 392.1)
    # a rack measured across two leaves lost the ECMP factor already: back to rail-local first
    wide = Rack("roce", 64)
    assert fabric.project(45.0, wide, OPTS["roce"], topo, 16) == pytest.approx(45.0 / math.sqrt(0.27))


def test_rule_of_thumb_roce_equals_ib_to_32_nodes_and_ib_pays_beyond() -> None:
    """Where its assumptions hold (64-port leaves, 1:1, rail-optimised), RoCE as tuned gives the
    same bandwidth as IB up to 32 nodes and about half beyond; the N where this changes moves with
    the leaf size, which the rule of thumb leaves out."""
    topo = Topology(leaf_nodes=32)
    rack = Rack("roce", 4)

    def ratio(n: int, t: Topology = topo) -> float:
        roce = fabric.project(45.0, rack, OPTS["roce"], t, n)
        return roce / fabric.project(45.0, rack, OPTS["ib-ndr"], t, n)

    assert ratio(32) == pytest.approx(392.1 / 397.5)
    assert ratio(33) < 0.6
    assert ratio(64, Topology(leaf_nodes=64)) == pytest.approx(392.1 / 397.5)  # a bigger leaf moves the N


def test_assumptions_name_the_leaf_and_the_factors() -> None:
    text = "\n".join(fabric.assumptions(Topology(leaf_nodes=16, oversubscription=2.0)))
    assert "a leaf serves 16 nodes per rail" in text and "oversubscription 2:1 (8 uplinks per leaf)" in text
    assert "adaptive routing" in text and "0.95" in text


def test_an_unknown_measured_kind_counts_as_roce() -> None:
    option = FabricOption("x", "ib", "ar")
    assert fabric.line_factor("eth", option) == pytest.approx(397.5 / 392.1)
