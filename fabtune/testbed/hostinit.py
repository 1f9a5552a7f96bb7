"""PID 1 of an emulated host: builds its root and becomes its sshd.

Started by the testbed builder as
``ip netns exec NS unshare --mount --uts --pid --fork --propagation private --kill-child
-- python -m fabtune.testbed.hostinit HOST_DIR HOSTNAME``: inside the host's network namespace and
fresh mount, UTS and PID namespaces. Exits by exec'ing ``sshd -D``, which stays PID 1 of the host,
so killing it removes every process of the host. Before that it starts the host's daemons
(``HOST_DIR/daemons.json``: ``[{"argv": [...], "log": "/var/log/..."}]``, e.g. the emulated
opensm of a subnet-manager host), detached, inside the host's root. First it creates the testbed's
login user when the spec names one (``HOST_DIR/login.json``), as cloud-init does at first boot:
``useradd`` inside the host's root (only the host's overlay changes), then its ``~/.ssh``; then it
runs the systemd units enabled for multi-user.target (``fabtune.sim.tools.systemd.boot_main``:
the emulated systemd's boot; fabtune-boot.service re-applies the persisted NIC settings there).
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

# Classes the emulation owns; every other /sys/class entry points into a second, real sysfs mount.
EMULATED_CLASSES = ("net", "infiniband")
REAL_SYSFS = "/run/fabtune-sysfs"


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True)


def _link_real_netdevs(merged: Path, class_dir: Path) -> None:
    """Give each real netdev of this netns a /sys/class/net entry of symlinks to its kernel files."""
    real_net = merged / "sys/class/net"
    for dev in sorted(real_net.iterdir()):
        target = Path("/sys") / os.path.relpath(dev.resolve(), merged / "sys")
        own = class_dir / "net" / dev.name
        own.mkdir(parents=True, exist_ok=True)
        for entry in sorted(p.name for p in dev.resolve().iterdir()):
            link = own / entry
            if not link.exists() and not link.is_symlink():
                link.symlink_to(target / entry)


def _link_real_entries(merged: Path, own: Path, sub: str, skip: tuple[str, ...]) -> None:
    """Point every entry of the real /sys/SUB that the emulation does not own into the real sysfs."""
    for entry in sorted(p.name for p in (merged / "sys" / sub).iterdir()):
        link = own / entry
        if entry not in skip and not link.is_symlink():
            link.symlink_to(f"{REAL_SYSFS}/{sub}/{entry}")


def _mount_root(host_dir: Path) -> Path:
    merged = host_dir / "merged"
    _mount(
        "-t",
        "overlay",
        "overlay",
        "-o",
        f"lowerdir=/,upperdir={host_dir / 'upper'},workdir={host_dir / 'work'}",
        str(merged),
    )
    _mount("-t", "proc", "proc", str(merged / "proc"))
    _mount("-t", "sysfs", "sysfs", str(merged / "sys"))
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(merged / "run"))
    for sub in ("sshd", "fabtune-sysfs", "fabtune-oldroot"):
        (merged / "run" / sub).mkdir()
    _mount("-t", "sysfs", "sysfs", str(merged / REAL_SYSFS.lstrip("/")))
    _mount("--rbind", "/dev", str(merged / "dev"))
    _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(merged / "dev/shm"))
    _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(merged / "tmp"))
    return merged


def _bind_emulation(host_dir: Path, merged: Path) -> None:
    class_dir, kernel_dir = host_dir / "sys/class", host_dir / "sys/kernel"
    (kernel_dir / "config").mkdir(parents=True, exist_ok=True)
    _link_real_netdevs(merged, class_dir)
    _link_real_entries(merged, class_dir, "class", EMULATED_CLASSES)
    _link_real_entries(merged, kernel_dir, "kernel", ("config",))
    _mount("--bind", str(class_dir), str(merged / "sys/class"))
    _mount("--bind", str(kernel_dir), str(merged / "sys/kernel"))
    _mount("--bind", str(host_dir / "configfs"), str(merged / "sys/kernel/config"))
    shared = (("fabtune-emu", host_dir / "emu"), ("fabtune-fabric", host_dir.parent.parent / "fabric"))
    for name, source in shared:
        target = merged / "var/lib" / name
        target.mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(source), str(target))


# Mounts a host gets fresh (tmpfs, its own /run): anything of the real machine's under them is hidden.
FRESH_MOUNTS = (Path("/tmp"), Path("/run"), Path("/dev/shm"))


def _bind_emulator(merged: Path) -> None:
    """Let the host run the emulated tools: their launchers name this Python (``sys.executable``) and
    import fabtune from where it is installed. A virtualenv under /tmp (a wheel installed in a test's
    temporary directory) would be hidden by the host's own /tmp, so it is bound at the same path."""
    import fabtune

    for path in sorted({Path(sys.prefix).resolve(), Path(fabtune.__file__).resolve().parent.parent}):
        if any(path.is_relative_to(fresh) for fresh in FRESH_MOUNTS):
            target = merged / path.relative_to("/")
            target.mkdir(parents=True, exist_ok=True)
            _mount("--bind", str(path), str(target))


def _enter(merged: Path) -> None:
    os.chdir(merged)
    subprocess.run(["pivot_root", ".", "run/fabtune-oldroot"], check=True)
    os.chdir("/")
    subprocess.run(["umount", "-l", "/run/fabtune-oldroot"], check=True)


def _start_daemons(daemons: list[dict[str, Any]]) -> None:
    """Start each daemon detached (its own session, output to its log); sshd reaps it later."""
    for daemon in daemons:
        log = Path(str(daemon["log"]))
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            subprocess.Popen(
                [str(a) for a in daemon["argv"]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
            )


# No password ("*": none can match) rather than useradd's locked "!": sshd without PAM refuses
# every login, keys included, to an account whose password is locked.
USERADD = ("useradd", "--create-home", "--shell", "/bin/bash", "--user-group", "--password", "*")
SSH_MODES = {"authorized_keys": 0o600, "id_ed25519": 0o600}


def _create_login(login: dict[str, Any]) -> None:
    """Create the login user in this host's root (once: the overlay keeps it) and its SSH files."""
    name = str(login["user"])
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run([*USERADD, name], check=True, timeout=60)
    entry = pwd.getpwnam(name)
    ssh = Path(entry.pw_dir) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    os.chown(ssh, entry.pw_uid, entry.pw_gid)
    for fname, text in dict(login["ssh"]).items():
        path = ssh / str(fname)
        path.write_text(str(text))
        path.chmod(SSH_MODES.get(str(fname), 0o644))
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _boot_units() -> None:
    """Run the enabled boot units; a failure is logged (init.log), sshd starts whatever happens."""
    from fabtune.sim.tools.systemd import boot_main

    try:
        boot_main([])
    except Exception as exc:  # the host must come up to be looked at
        print(f"hostinit: boot units: {exc!r}", file=sys.stderr)


def main(argv: list[str]) -> None:
    """Build the host's root, then exec sshd as the host's PID 1."""
    host_dir, hostname = Path(argv[0]), argv[1]
    socket.sethostname(hostname)
    daemons_file = host_dir / "daemons.json"
    daemons = json.loads(daemons_file.read_text()) if daemons_file.is_file() else []
    login_file = host_dir / "login.json"
    login = json.loads(login_file.read_text()) if login_file.is_file() else None
    merged = _mount_root(host_dir)
    _bind_emulation(host_dir, merged)
    _bind_emulator(merged)
    _enter(merged)
    if login is not None:
        _create_login(login)
    _boot_units()
    _start_daemons(daemons)
    sys.stdout.flush()
    os.execv("/usr/sbin/sshd", ["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/ssh/sshd_config"])


if __name__ == "__main__":
    main(sys.argv[1:])
