"""The knob registry: which roles a move runs."""

from __future__ import annotations

from fabtune.knobs import roles_of


def test_a_moves_roles_are_those_of_its_knobs_and_all_for_an_unknown_knob() -> None:
    assert roles_of(["mtu"]) == ("roce_qos",)
    assert roles_of(["roce_tos", "NCCL_IB_TC", "pfc"]) == ("nccl_env", "roce_qos", "roce_tos")
    assert roles_of(["routing_engine"]) == ("ib_sm",)
    assert roles_of(["mtu", "not_a_knob"]) is None  # every role runs
    assert roles_of([]) is None
