"""fabric_run's mpirun_ssh_reuse: the launches of one call share their SSH connections, in a socket
directory private to the call, and leave nothing behind; where Open MPI would not launch with ssh
they are left as given.

ompi_info, mpirun and ssh are stand-ins on PATH that record what they were given: what is tested is
the module's reading of ompi_info and the command lines it builds. The ompi_info lines are those
Open MPI 4.1.4 (Debian 12's openmpi-bin) prints for ``ompi_info --parsable --param plm rsh --level 9``,
read on the testbed's hosts; that real mpirun and OpenSSH share connections this way is measured by
bench/tune_walltime.py on the testbed (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import load_module, module_result

run = load_module("fabric_run")

OMPI_INFO_4_1_4 = """\
mca:plm:rsh:param:plm_rsh_num_concurrent:value:128
mca:plm:rsh:param:plm_rsh_force_rsh:value:{force}
mca:plm:rsh:param:plm_rsh_force_rsh:enumerator:value:0:false
mca:plm:rsh:param:plm_rsh_force_rsh:enumerator:value:1:true
mca:plm:rsh:param:plm_rsh_disable_qrsh:value:false
mca:plm:rsh:param:plm_rsh_no_tree_spawn:value:false
mca:plm:rsh:param:plm_rsh_agent:value:"{agent}"
mca:plm:rsh:param:plm_rsh_agent:source:default
mca:plm:rsh:param:plm_rsh_agent:help:The command used to launch executables on remote nodes \
(typically either "ssh" or "rsh")
mca:plm:rsh:param:plm_rsh_args:value:{args}
mca:plm:rsh:param:plm_rsh_args:source:environment
mca:plm:rsh:param:plm_rsh_args:help:Arguments to add to rsh/ssh
"""

# mpirun: records its argv, the socket directory's mode, and binds a socket there (a master)
MPIRUN = """#!{python}
import json, os, socket, sys
argv = sys.argv[1:]
mode = None
if "plm_rsh_args" in argv and "ControlPath=" in argv[argv.index("plm_rsh_args") + 1]:
    path = argv[argv.index("plm_rsh_args") + 1].split("ControlPath=")[1].replace("%C", "c0ffee")
    mode = os.stat(os.path.dirname(path)).st_mode & 0o777
    if not os.path.exists(path):
        socket.socket(socket.AF_UNIX).bind(path)
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"prog": "mpirun", "argv": argv, "mode": mode}}) + "\\n")
"""
SSH = """#!{python}
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"prog": "ssh", "argv": sys.argv[1:]}}) + "\\n")
"""


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    short = Path(tempfile.mkdtemp(prefix="ft"))  # a socket path must stay short (as under /tmp)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    info = tmp_path / "ompi_info.out"
    info.write_text(OMPI_INFO_4_1_4.format(force="false", agent="ssh : rsh", args="-o Foo=1"))
    ompi_info = f"#!{{python}}\nprint(open({str(info)!r}).read(), end='')\n"
    for name, text in {"mpirun": MPIRUN, "ssh": SSH, "ompi_info": ompi_info}.items():
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", str(bin_dir))  # only the stand-ins (this machine may have Open MPI)
    monkeypatch.delenv("SGE_ROOT", raising=False)
    monkeypatch.setenv("TMPDIR", str(short))
    monkeypatch.setattr(run.tempfile, "tempdir", None)  # TMPDIR read again
    yield {"bin": bin_dir, "info": info, "log": log, "tmp": short}
    shutil.rmtree(short, ignore_errors=True)


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _main(module_args: Any, args: dict[str, Any]) -> dict[str, Any]:
    return module_result(run, module_args, args)


LAUNCH = ["mpirun", "-np", "2", "-H", "h01:1,h02:1", "all_reduce_perf", "-b", "8G"]


def test_the_launches_share_a_private_socket_directory_that_is_gone_after(
    module_args: Any, fakes: dict[str, Any]
) -> None:
    result = _main(module_args, {"argvs": [LAUNCH, LAUNCH, LAUNCH], "sequential": True,
                                 "mpirun_ssh_reuse": True})
    site = {"plm_rsh_agent": "ssh : rsh", "plm_rsh_args": "-o Foo=1", "plm_rsh_disable_qrsh": "false",
            "plm_rsh_force_rsh": "false", "plm_rsh_num_concurrent": "128", "plm_rsh_no_tree_spawn": "false"}
    assert result["ssh_reuse"] == {"used": True, "why": "3 launches share their ssh connections",
                                   "site": site}
    launches = [c for c in _calls(fakes["log"]) if c["prog"] == "mpirun"]
    assert len(launches) == 3
    rsh_args = {c["argv"][2] for c in launches}
    assert len(rsh_args) == 1  # one directory for the whole call
    (args,) = rsh_args
    socket_dir = args.split("ControlPath=")[1].rsplit("/", 1)[0]
    # the site's own options first (OpenSSH keeps the first value of an option), then the sharing
    assert args == f"-o Foo=1 -o ControlMaster=auto -o ControlPersist=60s -o ControlPath={socket_dir}/%C"
    for launch in launches:
        assert launch["argv"][:6] == ["--mca", "plm_rsh_args", args, "--mca", "plm_rsh_no_tree_spawn", "1"]
        assert launch["argv"][6:] == LAUNCH[1:]
        assert launch["mode"] == 0o700
    assert Path(socket_dir).parent == fakes["tmp"] and not Path(socket_dir).exists()
    stops = [c["argv"] for c in _calls(fakes["log"]) if c["prog"] == "ssh"]
    assert stops == [["-o", f"ControlPath={socket_dir}/c0ffee", "-O", "exit", "fabtune-launch-master"]]


def test_the_site_values_of_an_earlier_call_stand_for_ompi_info(
    module_args: Any, fakes: dict[str, Any]
) -> None:
    """A later batch of the run gives back what the first read (RV ssh_reuse.site): no ompi_info."""
    first = _main(module_args, {"argvs": [LAUNCH, LAUNCH], "sequential": True, "mpirun_ssh_reuse": True})
    (fakes["bin"] / "ompi_info").unlink()  # were it run again, the launches would be left as given
    again = _main(module_args, {"argvs": [LAUNCH, LAUNCH], "sequential": True, "mpirun_ssh_reuse": True,
                                "mpirun_rsh_site": first["ssh_reuse"]["site"]})
    assert again["ssh_reuse"]["used"] and again["ssh_reuse"]["site"] == first["ssh_reuse"]["site"]
    launches = [c for c in _calls(fakes["log"]) if c["prog"] == "mpirun"]
    assert len(launches) == 4
    assert all(c["argv"][2].startswith("-o Foo=1 -o ControlMaster=auto") for c in launches)
    # values without plm_rsh_args are no site's: ompi_info is asked (here: missing, so none shared)
    unread = _main(module_args, {"argvs": [LAUNCH, LAUNCH], "sequential": True, "mpirun_ssh_reuse": True,
                                 "mpirun_rsh_site": {"plm_rsh_agent": "ssh"}})
    assert not unread["ssh_reuse"]["used"] and "ompi_info" in unread["ssh_reuse"]["why"]


def test_without_the_option_or_with_one_launch_nothing_changes(
    module_args: Any, fakes: dict[str, Any]
) -> None:
    assert _main(module_args, {"argvs": [LAUNCH, LAUNCH]})["ssh_reuse"] == {"used": False, "why": "not asked"}
    one = _main(module_args, {"argvs": [LAUNCH, ["echo", "x"]], "mpirun_ssh_reuse": True})
    assert one["ssh_reuse"]["used"] is False and "1 mpirun launch" in one["ssh_reuse"]["why"]
    assert all(c["argv"] == LAUNCH[1:] for c in _calls(fakes["log"]) if c["prog"] == "mpirun")
    assert list(fakes["tmp"].iterdir()) == []


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("force_rsh", "plm_rsh_force_rsh is set"),
        ("agent_rsh", "plm_rsh_agent 'rsh' is not ssh"),
        ("grid_engine", "a Grid Engine job: the launcher is qrsh"),
        ("no_ompi_info", "ompi_info could not tell"),
        ("open_mpi_5", "ompi_info names no plm_rsh_args"),
        ("own_args", "a launch sets plm_rsh_args itself"),
    ],
)
def test_where_the_launcher_is_not_ssh_the_launches_are_left_as_given(
    module_args: Any, fakes: dict[str, Any], monkeypatch: pytest.MonkeyPatch, case: str, why: str
) -> None:
    launch = LAUNCH
    if case == "force_rsh":
        fakes["info"].write_text(OMPI_INFO_4_1_4.format(force="true", agent="ssh : rsh", args=""))
    elif case == "agent_rsh":
        (fakes["bin"] / "rsh").write_text("#!/bin/sh\n")
        (fakes["bin"] / "rsh").chmod(0o755)
        fakes["info"].write_text(OMPI_INFO_4_1_4.format(force="false", agent="rsh", args=""))
    elif case == "grid_engine":
        monkeypatch.setenv("SGE_ROOT", "/opt/sge")
        monkeypatch.setenv("JOB_ID", "42")
    elif case == "no_ompi_info":
        (fakes["bin"] / "ompi_info").unlink()
    elif case == "open_mpi_5":
        fakes["info"].write_text("mca:plm:rsh:param:plm_rsh_agent:value:ssh\n")
    elif case == "own_args":
        launch = [LAUNCH[0], "--mca", "plm_rsh_args", "-x", *LAUNCH[1:]]
    result = _main(module_args, {"argvs": [launch, launch], "mpirun_ssh_reuse": True, "sequential": True})
    assert result["ssh_reuse"]["used"] is False and why in result["ssh_reuse"]["why"]
    assert [c["argv"] for c in _calls(fakes["log"]) if c["prog"] == "mpirun"] == [launch[1:], launch[1:]]
    assert list(fakes["tmp"].iterdir()) == []


def test_ompi_info_values_are_read_by_name() -> None:
    text = OMPI_INFO_4_1_4.format(force="false", agent="ssh : rsh", args="-o Foo=1 -x")
    values = run.site_rsh(text)
    assert values is not None
    assert values["plm_rsh_agent"] == "ssh : rsh" and values["plm_rsh_args"] == "-o Foo=1 -x"
    assert values["plm_rsh_force_rsh"] == "false"
    assert run.site_rsh("mca:plm:rsh:param:plm_rsh_agent:value:ssh\n") is None


@pytest.mark.parametrize(("dir_len", "used"), [(49, True), (50, False)])
def test_a_socket_path_too_long_for_openssh_is_not_used(module_args: Any, fakes: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        dir_len: int, used: bool) -> None:
    """A master binds DIR/%C.<16 random> (DIR + 58 bytes), which must fit sun_path (108 with its
    NUL; OpenSSH's unix_listener): DIR may have 49 bytes, not 50."""
    parent = fakes["tmp"] / ("d" * (dir_len - len("/fabtune-ssh-12345678") - len(str(fakes["tmp"])) - 1))
    parent.mkdir()
    monkeypatch.setenv("TMPDIR", str(parent))
    monkeypatch.setattr(run.tempfile, "tempdir", None)
    result = _main(module_args, {"argvs": [LAUNCH, LAUNCH], "mpirun_ssh_reuse": True})
    assert result["ssh_reuse"]["used"] is used, result["ssh_reuse"]
    if used:
        launch = next(c for c in _calls(fakes["log"]) if c["prog"] == "mpirun")
        assert len(launch["argv"][2].split("ControlPath=")[1].rsplit("/", 1)[0]) == dir_len
    else:
        assert "not a path OpenSSH takes" in result["ssh_reuse"]["why"]
    assert list(parent.iterdir()) == []
    assert stat.S_ISDIR(parent.stat().st_mode)
