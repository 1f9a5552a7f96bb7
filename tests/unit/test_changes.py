"""What an apply changed, per host and knob, from the task results (fabtune.changes)."""

from __future__ import annotations

from typing import Any

from fabtune.ansible import TaskResult
from fabtune.changes import KnobChange, knob_changes


def files_task(diffs: list[dict[str, Any]]) -> TaskResult:
    """A fabric_files result (one diff per file it wrote, the path in the diff's header)."""
    return TaskResult("h01", "Write the files", "fabtune.fabric.fabric_files", "runner_on_ok", True,
                      {"changed": True, "diff": diffs})


def test_a_conf_file_names_each_setting_that_changed() -> None:
    task = files_task([{"before_header": "/etc/nccl.conf", "after_header": "/etc/nccl.conf",
                        "before": "NCCL_IB_TC=0\n", "after": "# fabtune\nNCCL_IB_TC=106\n"}])
    assert knob_changes([task]) == {"h01": [KnobChange("h01", "/etc/nccl.conf:NCCL_IB_TC", "0", "106")]}


def test_a_conf_file_rewritten_with_the_same_settings_is_named_by_its_path() -> None:
    """Its header or comments changed, no setting did: the change names the file, not "file"."""
    task = files_task([{"before_header": "/etc/nccl.conf", "after_header": "/etc/nccl.conf",
                        "before": "NCCL_IB_TC=106\n", "after": "# written by fabtune\nNCCL_IB_TC=106\n"}])
    assert knob_changes([task]) == {"h01": [KnobChange("h01", "/etc/nccl.conf", None, "changed")]}
