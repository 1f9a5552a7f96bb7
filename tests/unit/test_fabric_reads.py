"""fabric_checks.yml's reads come back as one fabric_run result per host (``runs``, by id): what
``fabtune.perf.fabric`` takes from them, and which failures stop a check with one clear error."""

from __future__ import annotations

from typing import Any

import pytest

from fabtune.errors import BenchmarkError
from fabtune.perf import fabric


def _result(**over: dict[str, Any]) -> dict[str, Any]:
    runs = []
    for key in fabric.READS:
        run = {"id": key, "rc": 0, "stdout": f"{key} text", "stderr": "", "timed_out": False}
        run.update(over.get(key, {}))
        runs.append(run)
    return {"changed": False, "runs": runs}


def test_each_read_is_taken_by_its_id() -> None:
    assert fabric._raw("h01", _result()) == {key: f"{key} text" for key in fabric.READS}


def test_a_missing_optional_tool_leaves_its_text_empty_but_no_links_is_an_error() -> None:
    """nvidia-smi, show_gids and ibdev2netdev may be missing (the checks say what they could not
    see); ``ip -j addr`` must work, as the task that read it alone had to."""
    raw = fabric._raw("h01", _result(gids={"rc": 127, "stdout": "", "stderr": "show_gids: not found"}))
    assert raw["gids"] == "" and raw["addr"] == "addr text"
    said = r"^h02: reading addr failed \(rc 1\): Cannot open netlink socket$"
    with pytest.raises(BenchmarkError, match=said):
        fabric._raw("h02", _result(addr={"rc": 1, "stderr": "Cannot open netlink socket\n"}))


def test_a_read_that_outlasts_its_deadline_is_an_error_naming_the_host_and_the_read() -> None:
    with pytest.raises(BenchmarkError, match=r"^h03: reading ibstat failed \(it outlasted its deadline\)$"):
        fabric._raw("h03", _result(ibstat={"rc": -15, "stdout": "", "timed_out": True}))
