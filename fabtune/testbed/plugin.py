"""The emulated rack as a fabtune plugin (entry point ``fabtune.plugins``: ``testbed``, see
``fabtune.plugins``): the ``testbed`` and ``demo`` verbs, and the fabric model's oracle for the
report of ``fabtune tune`` on a testbed."""

from __future__ import annotations

from fabtune.plugins import Plugin
from fabtune.testbed.demo import demo
from fabtune.testbed.oracle import testbed_oracle
from fabtune.testbed.verbs import testbed

PLUGIN = Plugin(commands=(testbed, demo), oracle=testbed_oracle)
