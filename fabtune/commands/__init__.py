"""One module per verb; each exposes one click command or group. Plugins add their own verbs
(``fabtune.plugins``; the emulated rack's ``testbed`` and ``demo``).

A verb's module is imported only when that verb runs (or ``--help`` lists the verbs): ``fabtune
runs`` never loads the tuning loop, paramiko or the advisor."""

from __future__ import annotations

import importlib

import click

VERBS: dict[str, str] = {
    "tune": "fabtune.commands.tune:tune",
    "apply": "fabtune.commands.apply:apply",
    "bootstrap": "fabtune.commands.bootstrap:bootstrap",
    "drift": "fabtune.commands.drift:drift",
    "bench": "fabtune.commands.bench:bench",
    "check": "fabtune.commands.check:check",
    "runs": "fabtune.commands.runs:runs",
    "show": "fabtune.commands.runs:show",
    "rollback": "fabtune.commands.tune:rollback",
    "resume": "fabtune.commands.tune:resume",
    "report": "fabtune.commands.report:report",
    "parse": "fabtune.commands.parse:parse",
    "advise": "fabtune.commands.advise:advise",
    "uninstall": "fabtune.commands.uninstall:uninstall",
}
"""Each verb of fabtune and where its command is (``module:attribute``)."""

SUMMARIES: dict[str, str] = {
    "tune": "Measure, change one knob group, keep what improves bandwidth, roll back the rest.",
    "apply": "Apply a fabric profile to every host and show, per host, each knob changed (before -> after).",
    "bootstrap": "Preflight a new rack, apply its baseline profile and run the acceptance benchmarks.",
    "drift": "Compare every host with the desired state, knob by knob (check mode: nothing changes).",
    "bench": "Benchmarks: perftest pair matrices and incast, nccl-tests through mpirun or srun.",
    "check": "GPU-NIC affinity, RDMA transport (no TCP fallback), GID index, links, subnet manager.",
    "runs": "The run history (tune, bootstrap, drift, apply, uninstall).",
    "show": "Every journaled step of a run, and the Ansible runs it made with their artifact directories.",
    "rollback": "Restore every managed knob on every host to its value before RUN_ID (verified): a tune, "
                "apply or drift remediation run.",
    "resume": "Continue an interrupted run: undo its unfinished move, then try the moves not yet decided.",
    "report": "The report of RUN_ID (tune, bootstrap or drift), rebuilt from the run journal.",
    "parse": "Parse saved output of TOOL from FILE ('-' reads standard input).",
    "advise": "Predict a training job's step time, MFU and scaling at each N, on RoCE and InfiniBand.",
    "uninstall": "Remove everything fabtune installed on the hosts: the boot units, udev rule and "
                 "scripts, the host-side revert and its records, /etc/nccl.conf when fabtune wrote it.",
}
"""Each verb's one-line help as its command says it (a unit test holds them equal): ``fabtune
--help`` lists the verbs from here, without importing every verb's module."""


def load(name: str) -> click.Command | None:
    """The command of verb ``name`` (its module imported now); None when fabtune has no such verb."""
    where = VERBS.get(name)
    if where is None:
        return None
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command), where
    return command
