"""Reaching testbed hosts from the controller: ssh argv with host-key checking on."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from fabtune.errors import TestbedError
from fabtune.testbed import layout
from fabtune.testbed.build import load_spec_of


def ssh_argv(name: str, host: str, command: Sequence[str] | str = (), *, tty: bool = False) -> list[str]:
    """The ssh command line that reaches ``host`` of testbed ``name`` (strict host-key checking).

    ``command`` is an argv list (quoted for the remote shell) or a shell string (sent as is, like ssh).

    Raises:
        TestbedError: when the testbed or the host does not exist.
    """
    spec = load_spec_of(name)
    try:
        target = spec.host(host)
    except KeyError as err:
        known = ", ".join(h.name for h in spec.hosts)
        raise TestbedError(f"host {host!r} is not in testbed {name!r} (hosts: {known})") from err
    tb_dir = layout.testbed_dir(name)
    argv = [
        "ssh",
        "-i",
        str(tb_dir / "ssh/id_ed25519"),
        "-o",
        f"UserKnownHostsFile={tb_dir / 'ssh/known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-t" if tty else "-T",
        f"root@{layout.mgmt_ip(spec, target)}",
    ]
    if command:
        argv += ["--", command if isinstance(command, str) else shlex.join(command)]
    return argv
