# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    """The option of every module that changes fabric state, for an armed apply (while_armed)."""

    DOCUMENTATION = r"""
options:
  armed_run:
    description:
      - The run whose revert this apply armed (the roles pass C(fabric_armed_run), which the apply
        playbook sets when it arms one).
      - When given, the change is made only while the host holds that run armed, under the revert's
        lock (module_utils C(fabric_apply.while_armed)); where the run's revert already fired (an
        apply that outlasted its deadline), the module fails with C(reverted=true) and changes
        nothing, so the host stays at its snapshot. Not checked in check mode.
    type: str
    default: ""
"""
