"""Direct SSH commands to inventory hosts (paramiko), where a playbook run costs more than the work.

A host's connection settings are the ones Ansible uses for it, read from the inventory's hostvars
(``ansible-inventory --list``): ``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file`` and, inside the ssh args (the run's ssh_args or the host's
``ansible_ssh_args``, then ``ansible_ssh_common_args``/``ansible_ssh_extra_args``),
``UserKnownHostsFile`` (default ``~/.ssh/known_hosts``). Ansible's ssh connection runs OpenSSH,
which also reads the ssh config (``-F FILE`` in those args, else ``~/.ssh/config`` then
``/etc/ssh/ssh_config``; the first value found wins, the command line's before either): its
``HostName``, ``Port``, ``User``, ``IdentityFile`` and ``UserKnownHostsFile`` for the host are used
where the inventory sets none. Host keys are always checked: the known_hosts files are loaded and an
unknown or changed key is refused (paramiko's RejectPolicy). Settings this channel cannot follow
faithfully (another connection plugin, a proxy or jump host, a templated value, an ssh config
paramiko cannot read) make the inventory :class:`Unsupported`, and so does ``StrictHostKeyChecking``
off (``no``/``off``/``accept-new``: OpenSSH would connect to a host whose key is not known, this
channel never does): the caller then uses the playbook. Commands are argv lists, quoted for the
remote shell; a command that needs root runs under ``sudo -n`` when the login user is not root (as
Ansible's ``become``). Every connect and every command has a deadline; hosts run in parallel, as
many as Ansible's forks.
"""

from __future__ import annotations

import getpass
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from fabtune.errors import ConfigError, PlaybookFailed

CONNECT_TIMEOUT_S = 20
COMMAND_TIMEOUT_S = 60
MAX_OUTPUT = 1 << 20  # bytes kept of a command's stdout and of its stderr
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
SSH_CONNECTIONS = (None, "ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh",
                   "ansible.builtin.paramiko_ssh", "ansible.legacy.ssh")
# ssh options that send the connection somewhere else than ansible_host:ansible_port
PROXY_OPTIONS = ("proxycommand", "proxyjump")
SSH_CONFIGS = ("~/.ssh/config", "/etc/ssh/ssh_config")  # OpenSSH's, when no -F names another
LAX_HOST_KEYS = ("no", "off", "accept-new")  # StrictHostKeyChecking values that accept unknown keys
_POLL_S = 0.05


class Unsupported(ConfigError):
    """A host's connection settings that this channel cannot follow as Ansible does."""


class HostKeyRejected(PlaybookFailed):
    """Hosts whose SSH host key is not the one in their known_hosts (unknown or changed)."""


@dataclass(frozen=True)
class Target:
    """How to reach one inventory host, as Ansible does."""

    host: str  # the inventory name
    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: tuple[str, ...]


@dataclass(frozen=True)
class Result:
    """One host's command: ``rc`` None when it did not run to the end (``error`` says why)."""

    host: str
    rc: int | None
    stdout: str
    stderr: str
    error: str | None = None
    hostkey: bool = False  # the error is a refused host key

    @property
    def ok(self) -> bool:
        return self.rc == 0


FLAG_OPTIONS = {"-J": "ProxyJump", "-F": "ConfigFile"}  # ssh flags that take a value, as options


def _ssh_options(host: str, vars_: Mapping[str, Any], ssh_args: str = "") -> dict[str, str]:
    """The ``-o Key=Value`` options (keys in lower case) of a host's ssh args, in the order Ansible
    puts them on ssh's command line: its ssh_args (the host's ``ansible_ssh_args``, else the run's
    ``ssh_args``), then ``ansible_ssh_common_args`` and ``ansible_ssh_extra_args``; ``-J`` counts
    as ProxyJump, ``-F FILE`` as the option ``configfile``.

    Raises:
        Unsupported: args that cannot be parsed.
    """
    own = vars_.get("ansible_ssh_args")
    given = [("ansible_ssh_args", own) if own is not None else ("ssh_args", ssh_args)]
    given += [(var, vars_.get(var)) for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args")]
    words: list[str] = []
    for var, text in given:
        try:
            words += shlex.split(str(text or ""))
        except ValueError as err:
            raise Unsupported(host, [f"{var}: {text!r} cannot be parsed: {err}"]) from err
    options: dict[str, str] = {}
    pending: str | None = None
    for word in words:
        if pending is not None:
            option, pending = (word if pending == "-o" else f"{FLAG_OPTIONS[pending]}={word}"), None
        elif word in ("-o", *FLAG_OPTIONS):
            pending = word
            continue
        elif word.startswith("-o"):
            option = word[2:]
        else:
            continue
        key, _sep, value = option.replace("=", " ", 1).partition(" ")
        options.setdefault(key.strip().lower(), value.strip())  # ssh keeps an option's first value
    return options


def _value(host: str, vars_: Mapping[str, Any], *names: str) -> str | None:
    """The first of ``names`` the host has, as text; a Jinja template is Unsupported."""
    for name in names:
        value = vars_.get(name)
        if value is None:
            continue
        if not isinstance(value, (str, int)) or "{{" in str(value) or "{%" in str(value):
            raise Unsupported(host, [f"{name}: {value!r} is not a plain value (only Ansible resolves it)"])
        return str(value)
    return None


def _port(host: str, given: str | None) -> int:
    raw = str(given or "22")
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(host, [f"ansible_port: {raw!r} is not a port number"])
    return int(raw)


def _config_files(options: Mapping[str, str]) -> tuple[str, ...]:
    named = options.get("configfile")
    return (named,) if named else SSH_CONFIGS


def _looked_up(host: str, path: Path, address: str, depth: int = 0) -> list[dict[str, Any]]:
    """``address``'s settings in one config file, then in the files it ``Include``s (paramiko
    reads a file but does not follow its Include lines; OpenSSH reads them where they stand)."""
    try:
        found = dict(paramiko.SSHConfig.from_path(str(path)).lookup(address))
    except Exception as err:  # paramiko raises several kinds for what it cannot read
        problem = f"ssh config {path}: not readable by the direct channel ({err})"
        raise Unsupported(host, [problem]) from err
    out = [found]
    for pattern in shlex.split(str(found.pop("include", "")))[:16] if depth < 8 else ():
        # a relative Include is under /etc/ssh in the system config, else under ~/.ssh (ssh_config(5))
        base = Path("/etc/ssh") if path.is_relative_to("/etc/ssh") else Path.home() / ".ssh"
        full = Path(pattern).expanduser()
        for each in sorted(full.parent.glob(full.name) if full.is_absolute() else base.glob(pattern)):
            out += _looked_up(host, each, address, depth + 1) if each.is_file() else []
    return out


def ssh_config(host: str, address: str, options: Mapping[str, str]) -> dict[str, Any]:
    """What OpenSSH's config files say for ``address`` (keys in lower case, the first value found
    wins, as OpenSSH reads them); the ssh args' own options go first.

    Raises:
        Unsupported: a config file paramiko cannot read (``Match exec``, a bad line).
    """
    found: dict[str, Any] = dict(options)
    for name in _config_files(options):
        path = Path(name).expanduser()
        for looked in _looked_up(host, path, address) if path.is_file() else ():
            for key, value in looked.items():
                found.setdefault(key, value)
    return found


def _follows(host: str, config: Mapping[str, Any]) -> None:
    """Unsupported where OpenSSH would connect another way than this channel can."""
    proxies = [k for k in PROXY_OPTIONS if config.get(k) not in (None, "none")]
    if proxies:
        raise Unsupported(host, [f"ssh {proxies[0]} is not followed by the direct channel"])
    strict = str(config.get("stricthostkeychecking") or "").lower()
    if strict in LAX_HOST_KEYS:
        raise Unsupported(host, [f"ssh StrictHostKeyChecking={strict}: the direct channel needs a known key"])


def target(host: str, vars_: Mapping[str, Any], ssh_args: str = "") -> Target:
    """The connection settings Ansible uses for ``host`` (its hostvars ``vars_``; ``ssh_args``:
    the ssh_args Ansible's runs are given, see :func:`_ssh_options`).

    Raises:
        Unsupported: a connection this channel cannot make as Ansible would.
        ConfigError: a port that is not one.
    """
    connection = _value(host, vars_, "ansible_connection")
    if connection not in SSH_CONNECTIONS:
        raise Unsupported(host, [f"ansible_connection: {connection!r} is not ssh"])
    address = _value(host, vars_, "ansible_host", "ansible_ssh_host") or host
    config = ssh_config(host, address, _ssh_options(host, vars_, ssh_args))
    _follows(host, config)
    files = config.get("userknownhostsfile")
    known = tuple(str(Path(f).expanduser()) for f in (shlex.split(files) if files else DEFAULT_KNOWN_HOSTS))
    key = _value(host, vars_, "ansible_ssh_private_key_file", "ansible_private_key_file")
    keys = [key] if key else list(config.get("identityfile") or [])
    login = _value(host, vars_, "ansible_user", "ansible_ssh_user") or config.get("user") or getpass.getuser()
    return Target(
        host=host,
        address=str(config.get("hostname") or address),
        port=_port(host, _value(host, vars_, "ansible_port", "ansible_ssh_port") or config.get("port")),
        user=str(login),
        key_file=str(Path(keys[0]).expanduser()) if keys else None,
        known_hosts=known,
    )


def targets(
    hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str], ssh_args: str = ""
) -> dict[str, Target]:
    """``{host: Target}`` of ``hosts`` from the inventory's hostvars.

    Raises:
        Unsupported, ConfigError: as :func:`target`.
    """
    return {h: target(h, hostvars.get(h, {}), ssh_args) for h in hosts}


def command_line(argv: Sequence[str], *, root: bool, user: str) -> str:
    """The remote shell's command for ``argv``, each word quoted; ``root``: under ``sudo -n`` unless
    ``user`` is root already (no password is ever sent: sudo must not ask)."""
    words = ["sudo", "-n", "--", *argv] if root and user != "root" else list(argv)
    return " ".join(shlex.quote(w) for w in words)


def _connect(client: paramiko.SSHClient, t: Target, connect_timeout_s: float) -> None:
    """Connect ``client`` to ``t``, its host key checked against ``t.known_hosts``.

    Raises:
        paramiko.BadHostKeyException, paramiko.SSHException, OSError: the connection failed.
    """
    for name in t.known_hosts:
        if Path(name).is_file():
            client.get_host_keys().load(name)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        t.address, port=t.port, username=t.user, key_filename=t.key_file,
        allow_agent=t.key_file is None, look_for_keys=t.key_file is None,
        timeout=connect_timeout_s, banner_timeout=connect_timeout_s, auth_timeout=connect_timeout_s,
        channel_timeout=connect_timeout_s,
    )


def _collect(chan: paramiko.Channel, deadline: float) -> tuple[int, bytes, bytes]:
    """Read a channel's output until its exit status.

    Raises:
        TimeoutError: past ``deadline`` (monotonic seconds).
    """
    out, err = bytearray(), bytearray()
    while True:
        while chan.recv_ready():
            out += chan.recv(65536)[: max(0, MAX_OUTPUT - len(out))]
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)[: max(0, MAX_OUTPUT - len(err))]
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            return chan.recv_exit_status(), bytes(out), bytes(err)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        chan.status_event.wait(min(remaining, _POLL_S))


def run_one(t: Target, argv: Sequence[str], *, root: bool = False,
            connect_timeout_s: float = CONNECT_TIMEOUT_S, timeout_s: float = COMMAND_TIMEOUT_S) -> Result:
    """Run ``argv`` on ``t``; the result says what failed (never raises for one host's failure).

    The host's whole exchange (connect and command) ends by ``connect_timeout_s + timeout_s``:
    paramiko waits for some replies (an exec request's) with no deadline of its own, and a host
    whose link went down answers nothing until TCP gives up on it (about 15 minutes), so a
    watchdog closes the connection at that deadline.
    """
    where = f"{t.user}@{t.address}:{t.port}"
    client = paramiko.SSHClient()
    with _Watchdog(client, connect_timeout_s + timeout_s) as watchdog:
        try:
            _connect(client, t, connect_timeout_s)
        except (paramiko.BadHostKeyException, paramiko.SSHException, OSError, EOFError) as err:
            return _not_connected(t, where, err, watchdog)
        try:
            chan = client.get_transport().open_session(timeout=connect_timeout_s)  # type: ignore[union-attr]
            chan.exec_command(command_line(argv, root=root, user=t.user))
            rc, out, errors = _collect(chan, time.monotonic() + timeout_s)
            return Result(t.host, rc, out.decode(errors="replace"), errors.decode(errors="replace"))
        except TimeoutError:
            return Result(t.host, None, "", "", f"{argv[0]} on {where} did not finish within {timeout_s:g} s")
        except (paramiko.SSHException, OSError, EOFError) as exc:
            why = (f"did not finish within {watchdog.seconds:g} s (connect and command): no answer"
                   if watchdog.fired.is_set() else f"failed: {exc or type(exc).__name__}")
            return Result(t.host, None, "", "", f"{argv[0]} on {where} {why}")


def _not_connected(t: Target, where: str, err: BaseException, watchdog: _Watchdog) -> Result:
    """The result of a connect that failed: a host key refused, or the host not reached."""
    hostkey = isinstance(err, paramiko.BadHostKeyException) or (
        isinstance(err, paramiko.SSHException) and "not found in known_hosts" in str(err))
    if hostkey:
        why = f"host key of {where} unknown or changed (known_hosts: {', '.join(t.known_hosts)}): refused"
        return Result(t.host, None, "", "", why, hostkey=True)
    text = str(err) or type(err).__name__
    if watchdog.fired.is_set():
        text = f"no answer within {watchdog.seconds:g} s ({text})"
    return Result(t.host, None, "", "", f"cannot connect to {where}: {text}")


class _Watchdog:
    """Closes ``client`` once ``seconds`` have passed (``fired`` is then set); and on leaving."""

    def __init__(self, client: paramiko.SSHClient, seconds: float) -> None:
        self.client = client
        self.seconds = seconds
        self.fired = threading.Event()
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        self.fired.set()
        self.client.close()

    def __enter__(self) -> _Watchdog:
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        self.client.close()


def run(found: Mapping[str, Target], argv: Sequence[str], *, forks: int, root: bool = False,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        timeout_s: float = COMMAND_TIMEOUT_S) -> dict[str, Result]:
    """Run ``argv`` on every target, ``forks`` hosts at a time: ``{host: Result}``.

    Raises:
        HostKeyRejected: a host's key is unknown or changed (the others' results are lost with it:
            nothing is trusted from a rack whose keys do not match).
    """
    hosts = sorted(found)
    if not hosts:
        return {}
    workers = max(1, min(forks, len(hosts)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sshdirect") as pool:
        done = list(pool.map(lambda h: run_one(found[h], argv, root=root, connect_timeout_s=connect_timeout_s,
                                               timeout_s=timeout_s), hosts))
    refused = [r for r in done if r.hostkey]
    if refused:
        raise HostKeyRejected("; ".join(f"{r.host}: {r.error}" for r in refused))
    return {r.host: r for r in done}
