"""fabtune.sshdirect: connection settings from hostvars, and a real SSH server on loopback (paramiko's
own server side): host keys checked, deadlines kept, argv quoted, sudo only for a non-root login."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import paramiko
import pytest

from fabtune import ansible, sshdirect
from fabtune import inventory as inventory_mod
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo
from fabtune.tune.backend import AnsibleBackend, extend_result
from fabtune.tune.loop import reverted_hosts


def test_settings_come_from_the_hosts_ansible_variables(tmp_path: Path) -> None:
    t = sshdirect.target("h01", {
        "ansible_host": "10.0.0.5", "ansible_port": 2222, "ansible_user": "ops",
        "ansible_ssh_private_key_file": "/k/id", "ansible_ssh_common_args":
            f"-o UserKnownHostsFile='{tmp_path}/kh {tmp_path}/kh2' -o StrictHostKeyChecking=yes -C",
    })
    assert (t.address, t.port, t.user, t.key_file) == ("10.0.0.5", 2222, "ops", "/k/id")
    assert t.known_hosts == (f"{tmp_path}/kh", f"{tmp_path}/kh2")
    other = sshdirect.target("h02", {"ansible_ssh_extra_args": "-oUserKnownHostsFile=/a/kh"})
    assert other.address == "h02" and other.port == 22 and other.known_hosts == ("/a/kh",)
    assert sshdirect.target("h03", {}).known_hosts[0] == str(Path("~/.ssh/known_hosts").expanduser())


@pytest.mark.parametrize("hostvars", [
    {"ansible_connection": "local"}, {"ansible_ssh_common_args": "-o ProxyCommand='ssh -W %h:%p b'"},
    {"ansible_ssh_common_args": "-J bastion"}, {"ansible_host": "{{ inventory_hostname }}.x"},
])
def test_settings_the_channel_cannot_follow_are_unsupported(hostvars: dict[str, Any]) -> None:
    with pytest.raises(sshdirect.Unsupported):
        sshdirect.target("h01", hostvars)


def test_the_runs_ssh_args_come_first_and_a_hosts_ansible_ssh_args_replace_them(tmp_path: Path) -> None:
    """As Ansible's ssh connection builds ssh's command line: ssh_args (the host's ansible_ssh_args,
    else the run's), then the common and extra args; ssh keeps an option's first value."""
    run_args = f"-C -o UserKnownHostsFile={tmp_path}/run_kh -o ControlMaster=auto"
    common = {"ansible_ssh_common_args": f"-o UserKnownHostsFile={tmp_path}/common_kh"}
    assert sshdirect.target("h01", common, run_args).known_hosts == (f"{tmp_path}/run_kh",)
    own = {**common, "ansible_ssh_args": f"-o UserKnownHostsFile={tmp_path}/own_kh"}
    assert sshdirect.target("h01", own, run_args).known_hosts == (f"{tmp_path}/own_kh",)
    assert sshdirect.target("h01", common).known_hosts == (f"{tmp_path}/common_kh",)
    with pytest.raises(sshdirect.Unsupported, match="ssh proxyjump is not followed"):
        sshdirect.target("h01", {}, "-o ProxyJump=ops@bastion")  # the caller's ansible.cfg jump host
    with pytest.raises(sshdirect.Unsupported, match="ansible_ssh_args"):
        sshdirect.target("h01", {"ansible_ssh_args": "-o 'unclosed"})


def test_the_backend_gives_the_direct_channel_the_runs_ssh_args(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A jump host in the caller's ssh_args reaches Ansible's runs (fabtune.ansible.ssh_args): the
    direct channel, which cannot follow it, leaves the work to the playbook."""
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ProxyJump=bastion")
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01",), (), "mpirun", None,
                         hostvars={"h01": {"ansible_host": "10.0.0.5"}})
    assert AnsibleBackend(info)._direct(["h01"]) is None
    monkeypatch.delenv("ANSIBLE_SSH_ARGS")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    found = AnsibleBackend(info)._direct(["h01"])
    assert found is not None and found["h01"].address == "10.0.0.5"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own (``~/.ssh/config`` written by the test)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    return tmp_path


def test_the_ssh_config_fills_what_the_inventory_leaves_out(home: Path) -> None:
    """OpenSSH (Ansible's ssh connection) reads ~/.ssh/config: an alias's HostName, Port, User,
    IdentityFile and UserKnownHostsFile apply where the inventory sets none; the inventory's win."""
    (home / ".ssh" / "config").write_text(
        "Host gpu*\n  HostName 10.9.0.%h\n  Port 2200\n  User ops\n  IdentityFile ~/.ssh/id_rack\n"
        "  UserKnownHostsFile ~/.ssh/rack_hosts\n"
        "Host *\n  User nobody\n"
    )
    t = sshdirect.target("n1", {"ansible_host": "gpu7"})
    assert (t.address, t.port, t.user) == ("10.9.0.gpu7", 2200, "ops")
    assert t.key_file == str(home / ".ssh" / "id_rack")
    assert t.known_hosts == (str(home / ".ssh" / "rack_hosts"),)
    mine = sshdirect.target("n1", {"ansible_host": "gpu7", "ansible_user": "me", "ansible_port": 22,
                                   "ansible_ssh_private_key_file": "/k/id"})
    assert (mine.user, mine.port, mine.key_file) == ("me", 22, "/k/id")
    assert sshdirect.target("n2", {"ansible_host": "10.1.1.1"}).user == "nobody"


@pytest.mark.parametrize("config, args", [
    ("Host gpu*\n  ProxyJump bastion\n", ""),  # a jump host for the rack
    ("Include rack.d/*.conf\n", ""),  # ... in an included file (paramiko alone does not follow it)
    ("Host *\n  StrictHostKeyChecking accept-new\n", ""),  # OpenSSH takes an unknown key; we never do
    ("", "-o StrictHostKeyChecking=no"),
    ("Host gpu*\n  ProxyCommand ssh -W %h:%p b\n", "-F {home}/.ssh/other"),  # -F: only that file
])
def test_a_config_the_channel_cannot_follow_sends_the_work_to_the_playbook(
    home: Path, config: str, args: str,
) -> None:
    (home / ".ssh" / "rack.d").mkdir()
    (home / ".ssh" / "rack.d" / "jump.conf").write_text("Host gpu*\n  ProxyJump bastion\n")
    name = "other" if "-F" in args else "config"
    (home / ".ssh" / name).write_text(config)
    with pytest.raises(sshdirect.Unsupported):
        sshdirect.target("n1", {"ansible_host": "gpu7", "ansible_ssh_common_args": args.format(home=home)})


def test_a_config_named_by_dash_f_replaces_the_users(home: Path) -> None:
    (home / ".ssh" / "config").write_text("Host *\n  ProxyJump bastion\n")
    (home / "rack.conf").write_text("Host *\n  Port 2022\n")
    t = sshdirect.target("n1", {"ansible_ssh_common_args": f"-F {home}/rack.conf"})
    assert t.port == 2022


def test_a_port_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="ansible_port: '99999'"):
        sshdirect.target("h01", {"ansible_port": 99999})


def test_commands_are_quoted_argv_and_sudo_only_for_a_non_root_login() -> None:
    argv = ["/usr/local/sbin/fabtune-revert", "--extend", "r; rm -rf /", "40"]
    assert sshdirect.command_line(argv, root=True, user="root") == \
        "/usr/local/sbin/fabtune-revert --extend 'r; rm -rf /' 40"
    assert sshdirect.command_line(argv, root=True, user="ops").startswith("sudo -n -- /usr/local/sbin/")
    assert sshdirect.command_line(argv, root=False, user="ops").startswith("/usr/local/sbin/")


class _Server(paramiko.ServerInterface):
    """Accepts the client key; a command ``sleep`` never ends, a command ``hang`` is never answered
    (as a host whose link went down once the session was open), any other is echoed with rc 0."""

    def __init__(self, client_key: paramiko.PKey, commands: list[str], released: threading.Event) -> None:
        self.client_key = client_key
        self.commands = commands
        self.released = released

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = key.get_base64() == self.client_key.get_base64()
        return int(paramiko.common.AUTH_SUCCESSFUL if ok else paramiko.common.AUTH_FAILED)

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return int(paramiko.common.OPEN_SUCCEEDED)

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode()
        self.commands.append(text)
        if text.startswith("hang"):
            self.released.wait(60)  # the server's transport sends nothing meanwhile
        elif not text.startswith("sleep"):
            def answer() -> None:
                channel.sendall(b'{"armed": true, "deadline": 123.0, "reverted": false}\n')
                channel.send_exit_status(0)
            threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[dict[str, Any]]:
    host_key = paramiko.ECDSAKey.generate()
    client_key = paramiko.ECDSAKey.generate()
    client_key.write_private_key_file(str(tmp_path / "id"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    commands: list[str] = []
    transports: list[paramiko.Transport] = []
    released = threading.Event()

    def serve() -> None:
        while True:
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transports.append(transport)
            # a client that gave up may have closed the connection before this thread looks at
            # the handshake (a loaded machine): the session is over, the server takes the next one
            with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
                transport.start_server(server=_Server(client_key, commands, released))

    threading.Thread(target=serve, daemon=True).start()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    yield {"port": port, "known": known, "key": tmp_path / "id", "commands": commands, "host_key": host_key}
    released.set()
    listener.close()
    for transport in transports:
        transport.close()


def _target(sshd: dict[str, Any], known: Path) -> sshdirect.Target:
    return sshdirect.target("h01", {"ansible_host": "127.0.0.1", "ansible_port": sshd["port"],
                                    "ansible_user": "ops", "ansible_ssh_private_key_file": str(sshd["key"]),
                                    "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"})


def test_a_command_runs_with_the_known_host_key_and_sudo(sshd: dict[str, Any]) -> None:
    done = sshdirect.run({"h01": _target(sshd, sshd["known"])}, ["fabtune-revert", "--extend", "r1", "40"],
                         forks=4, root=True)
    assert done["h01"].ok and '"armed": true' in done["h01"].stdout
    assert sshd["commands"] == ["sudo -n -- fabtune-revert --extend r1 40"]
    task = extend_result(done["h01"])
    assert task.event == "runner_on_ok" and task.result["deadline"] == 123.0


@pytest.mark.parametrize("known_text", ["", "[127.0.0.1]:{port} ecdsa-sha2-nistp256 {other}\n"])
def test_an_unknown_or_changed_host_key_is_refused(sshd: dict[str, Any], tmp_path: Path,
                                                   known_text: str) -> None:
    other = paramiko.ECDSAKey.generate().get_base64()
    known = tmp_path / "other_known_hosts"
    known.write_text(known_text.format(port=sshd["port"], other=other))
    refused = r"h01: host key of ops@127.0.0.1:\d+ unknown or changed"
    with pytest.raises(sshdirect.HostKeyRejected, match=refused):
        sshdirect.run({"h01": _target(sshd, known)}, ["true"], forks=1)
    assert sshd["commands"] == []  # nothing ran on a host that is not the one known


def test_a_command_past_its_deadline_is_given_up(sshd: dict[str, Any]) -> None:
    done = sshdirect.run({"h01": _target(sshd, sshd["known"])}, ["sleep", "600"], forks=1, timeout_s=0.5)
    assert done["h01"].rc is None and "did not finish within 0.5 s" in str(done["h01"].error)
    task = extend_result(done["h01"])
    assert task.event == "runner_on_unreachable" and task.failed


def test_a_host_that_stops_answering_after_the_session_opened_is_given_up_by_its_deadline(
    sshd: dict[str, Any]
) -> None:
    # paramiko's exec request waits for its reply with no deadline; a CI run hung 900 s on one
    started = time.monotonic()
    done = sshdirect.run({"h01": _target(sshd, sshd["known"])}, ["hang"], forks=1,
                         connect_timeout_s=1, timeout_s=1)
    assert time.monotonic() - started < 10
    assert done["h01"].rc is None and "did not finish within 2 s" in str(done["h01"].error)
    assert extend_result(done["h01"]).event == "runner_on_unreachable"


def test_a_host_that_does_not_answer_is_unreachable_by_its_connect_deadline() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    t = sshdirect.target("h09", {"ansible_host": "127.0.0.1", "ansible_port": port})
    done = sshdirect.run({"h09": t}, ["true"], forks=1, connect_timeout_s=2)
    assert done["h09"].rc is None and "cannot connect to" in str(done["h09"].error)


def test_a_reverted_host_reads_as_the_modules_reverted_failure() -> None:
    gone = sshdirect.Result("h02", 3, '{"reverted": true, "msg": "run r1 was already reverted"}\n', "")
    task = extend_result(gone)
    assert task.event == "runner_on_failed" and task.result["reverted"] is True
    outcome = ansible.RunOutcome("failed", 2, {"failures": {"h02": 1}}, (task,), Path("/x"))
    assert reverted_hosts(outcome) == ["h02"]


def _backend(tmp_path: Path, hosts: Sequence[str] = ("h01", "h02")) -> AnsibleBackend:
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", tuple(hosts), (), "mpirun", None)
    return AnsibleBackend(info, deadline_s=45)


def test_the_backend_extends_over_the_direct_channel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: {
        "h01": {"ansible_host": "10.9.0.1", "ansible_user": "ops"}, "h02": {"ansible_host": "10.9.0.2"}})
    seen: dict[str, Any] = {}

    def direct(found: dict[str, sshdirect.Target], argv: list[str], **kw: Any) -> dict[str, Any]:
        seen.update(found=found, argv=argv, **kw)
        ok = '{"armed": true, "deadline": 9.0, "reverted": false}\n'
        return {"h01": sshdirect.Result("h01", 0, ok, ""),
                "h02": sshdirect.Result("h02", 3, '{"reverted": true, "msg": "already reverted"}', "")}

    monkeypatch.setattr(sshdirect, "run", direct)
    monkeypatch.setattr(ansible, "run_playbook", lambda *a, **k: pytest.fail("no playbook when direct"))
    watched: list[str] = []

    class Watch:
        def task(self, kind: str, result: ansible.TaskResult) -> None:
            watched.append(f"task {kind} {result.host}")

        def finished(self, kind: str, outcome: ansible.RunOutcome) -> None:
            watched.append(f"finished {kind} {outcome.status}")

    with ansible.observing(Watch()):
        outcome = _backend(tmp_path).extend("r1", hosts=["h02", "h01"])
    assert seen["argv"] == ["/usr/local/sbin/fabtune-revert", "--extend", "r1", "45"] and seen["root"] is True
    assert sorted(seen["found"]) == ["h01", "h02"] and seen["found"]["h01"].user == "ops"
    assert reverted_hosts(outcome) == ["h02"] and outcome.failed_hosts == ["h02"]
    assert outcome.results("Extend the revert deadline (the controller is alive)")["h01"]["deadline"] == 9.0
    assert watched[-1] == "finished extend failed" and (outcome.artifact_dir / "results.json").is_file()


def test_the_backend_extends_through_the_playbook_where_the_channel_cannot_follow(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: {
        "h01": {"ansible_connection": "community.docker.docker"}, "h02": {}})
    monkeypatch.setattr(sshdirect, "run", lambda *a, **k: pytest.fail("no direct channel"))
    calls: list[Any] = []
    sentinel = object()

    def playbook(*args: Any, **kwargs: Any) -> object:
        calls.append((args, kwargs))
        return sentinel

    monkeypatch.setattr(ansible, "run_playbook", playbook)
    assert _backend(tmp_path).extend("r1") is sentinel
    assert calls[0][0][0] == "extend.yml" and calls[0][1]["extravars"] == {
        "fabric_run_id": "r1", "fabric_revert_deadline_s": 45}


def test_the_backend_confirms_over_the_direct_channel_where_its_applies_installed_the_revert(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: {"h01": {"ansible_host": "10.9.0.1"},
                                                                 "h02": {"ansible_host": "10.9.0.2"}})
    seen: dict[str, Any] = {}

    def direct(found: dict[str, sshdirect.Target], argv: list[str], **kw: Any) -> dict[str, Any]:
        seen.update(found=found, argv=argv, **kw)
        gone = '{"changed": false, "reverted": true, "msg": "gone"}\n'
        answers = {"h01": sshdirect.Result("h01", 0, '{"changed": true, "reverted": false}\n', ""),
                   "h02": sshdirect.Result("h02", 3, gone, "")}
        return {h: answers[h] for h in found}

    playbooks: list[str] = []
    monkeypatch.setattr(sshdirect, "run", direct)
    monkeypatch.setattr(ansible, "run_playbook", lambda name, *a, **k: playbooks.append(name))
    backend = _backend(tmp_path)
    backend.revert_installed = {"h01", "h02"}
    outcome = backend.confirm("r1")
    assert seen["argv"] == ["/usr/local/sbin/fabtune-revert", "--confirm", "r1"] and seen["root"] is True
    assert playbooks == []
    assert reverted_hosts(outcome) == ["h02"] and outcome.failed_hosts == ["h02"]
    assert outcome.changed_count("h01") == 1 and outcome.changed_count("h02") == 0
    assert set(outcome.results("Confirm the run (cancel the revert)")) == {"h01", "h02"}


def _playbook_confirming(calls: list[tuple[str, Any]], tmp_path: Path) -> Any:
    """A confirm.yml run that confirms every host of its limit (as the role's task would)."""
    def playbook(name: str, inventory: Path, **kw: Any) -> ansible.RunOutcome:
        calls.append((name, kw))
        hosts = kw["limit"].split(",")
        tasks = tuple(ansible.TaskResult(host=h, task="Confirm the run (cancel the revert)",
                                         action="fabtune.fabric.fabric_revert", event="runner_on_ok",
                                         changed=True, result={"changed": True}) for h in hosts)
        return ansible.RunOutcome("successful", 0, {"ok": dict.fromkeys(hosts, 1),
                                                    "changed": dict.fromkeys(hosts, 1)},
                                  tasks, tmp_path / "played")
    return playbook


def test_a_backend_that_installed_nothing_confirms_directly_and_plays_only_where_the_verb_is_unknown(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A rollback's backend: the hosts' fabtune-revert came with the run it rolls back. A host whose
    program confirms, or answers that it already reverted, needs no playbook; one whose program is
    older than the verb (usage, exit 2) or missing (sudo: exit 1) is confirmed by confirm.yml."""
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    hosts = {f"h0{i}": {"ansible_host": f"10.9.0.{i}"} for i in range(1, 5)}
    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: hosts)
    answers = {
        "h01": sshdirect.Result("h01", 0, '{"changed": true, "reverted": false}\n', ""),
        "h02": sshdirect.Result("h02", 3, '{"changed": false, "reverted": true, "msg": "gone"}\n', ""),
        "h03": sshdirect.Result("h03", 2, "", "usage: fabtune-revert RUN_ID"),
        "h04": sshdirect.Result("h04", 1, "", "sudo: /usr/local/sbin/fabtune-revert: command not found"),
    }
    monkeypatch.setattr(sshdirect, "run", lambda found, argv, **kw: {h: answers[h] for h in found})
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(ansible, "run_playbook", _playbook_confirming(calls, tmp_path))
    outcome = _backend(tmp_path, hosts=list(hosts)).confirm("r1")
    assert [(name, kw["limit"]) for name, kw in calls] == [("confirm.yml", "h03,h04")]
    assert calls[0][1]["extravars"] == {"fabric_run_id": "r1"}
    assert set(outcome.results("Confirm the run (cancel the revert)")) == set(hosts)
    assert reverted_hosts(outcome) == ["h02"] and outcome.failed_hosts == ["h02"]
    assert [h for h in hosts if outcome.changed_count(h)] == ["h01", "h03", "h04"]
    assert outcome.status == "failed" and outcome.artifact_dir == tmp_path / "played"
    calls.clear()
    monkeypatch.setattr(sshdirect, "run", lambda found, argv, **kw: dict.fromkeys(found, answers["h01"]))
    assert _backend(tmp_path, hosts=list(hosts)).confirm("r1", hosts=["h01"]).ok and calls == []


def test_the_backend_confirms_aside_only_over_the_direct_channel_where_it_installed_the_revert(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Beside a playbook run, only a confirm that runs no playbook: every host's fabtune-revert came
    with this backend's applies (no fallback to confirm.yml) and the channel follows the inventory."""
    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: {"h01": {"ansible_host": "10.9.0.1"},
                                                                 "h02": {"ansible_host": "10.9.0.2"}})
    backend = _backend(tmp_path)
    assert not backend.confirms_aside(["h01", "h02"])  # installed nowhere yet: confirm.yml may run
    backend.revert_installed = {"h01"}
    assert backend.confirms_aside(["h01"]) and not backend.confirms_aside(["h01", "h02"])
    backend.revert_installed = {"h01", "h02"}
    assert backend.confirms_aside(["h02", "h01"])

    monkeypatch.setattr(inventory_mod, "host_vars", lambda path: {
        "h01": {"ansible_connection": "community.docker.docker"}, "h02": {}})
    docker = _backend(tmp_path)
    docker.revert_installed = {"h01", "h02"}
    assert not docker.confirms_aside(["h01"]) and docker.confirms_aside(["h02"])
