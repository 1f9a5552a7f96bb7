# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    """The options of the modules that set NIC knobs and record them for fabtune-boot in the same run."""

    DOCUMENTATION = r"""
options:
  persist:
    description:
      - The knobs of the ports this module is given (O(nics), or the one port's) to record also in
        O(persist_path), the file C(fabtune-boot.service) re-applies at boot, in the same module run
        that sets them (what M(fabtune.fabric.fabric_persist) does on its own). A knob this module
        does not set itself is recorded as given. Nothing is recorded when empty.
      - The record is checked before anything is set (a knob that would not apply at boot fails the
        module with nothing changed) and written after the knobs are set, while the run is armed.
    type: list
    elements: str
    default: []
  persist_path:
    description: The file of persisted knobs (with O(persist)).
    type: path
    default: /etc/fabtune/persisted.json
"""
