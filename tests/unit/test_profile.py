"""Profiles: one schema for every verb, every value checked, and checked against the rack (issue 16: 4, 6).

The inventories are YAML files read through the real ``ansible-inventory`` (offline). Their hosts
point at a closed local port, so a verb that wrongly went on to contact them fails fast and
touches nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabtune.ansible import PROFILES
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal
from fabtune.profile import MAX_BYTES, check_against_rack, load_profile

REPO = Path(__file__).resolve().parents[2]
IB_PROFILE = PROFILES / "ib.yml"
ROCE_PROFILE = PROFILES / "roce.yml"
SHADOW = "root:$y$j9T$Qz1secrethash:19700:0:99999:7:::\ndaemon:*:19700:0:99999:7:::\n"

HOSTS = """  hosts:
    h01: {ansible_host: 127.0.0.1, ansible_port: 9}
    h02: {ansible_host: 127.0.0.2, ansible_port: 9}
"""
INVENTORIES = {
    "roce": "all:\n  vars: {fabtune_fabric_name: tbroce, fabtune_fabric: roce}\n" + HOSTS,
    "ib": "all:\n  vars: {fabtune_fabric_name: tbib, fabtune_fabric: ib}\n"
    + HOSTS
    + "  children:\n    subnet_managers:\n      hosts: {h01: {}}\n",
    "ib-no-sm": "all:\n  vars: {fabtune_fabric_name: tbibnosm, fabtune_fabric: ib}\n" + HOSTS,
}


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, InventoryInfo]:
    folder = tmp_path_factory.mktemp("inv")
    out = {}
    for name, text in INVENTORIES.items():
        path = folder / f"{name}.yml"
        path.write_text(text)
        out[name] = read_inventory(path)
    return out


@dataclass(frozen=True)
class Bad:
    """One bad profile: its content, the section the verb needs, the rack, what the error must say."""

    content: str | bytes | Path
    expect: tuple[str, ...]
    need: str = "fabtune_tune"
    rack: str | None = None
    unreadable: bool = False


def _tune(body: str) -> str:
    return "fabtune_tune:\n" + body


BAD: dict[str, Bad] = {
    "unreadable (permission)": Bad(
        "fabtune_tune: {}\n", ("cannot read: Permission denied",), unreadable=True
    ),
    "shadow-like file": Bad(
        SHADOW, ("(top level): 2 key(s) that cannot be section names", "fabtune_tune: missing")
    ),
    "binary junk": Bad(bytes(range(256)) * 4, ("not a text file: byte 0x80 at offset 128 is not UTF-8",)),
    "empty file": Bad("", ("(top level): empty",)),
    "list at the top level": Bad("- fabtune_tune\n- max_runs: 3\n", ("(top level): a list, not a mapping",)),
    "not YAML": Bad("fabtune_tune: {max_runs: [1, 2\n", ("not valid YAML:", "line 2")),
    "oversized": Bad("#" * (MAX_BYTES + 1), (f"larger than {MAX_BYTES} bytes",)),
    "misspelled section": Bad(
        "fabtune-tune:\n  max_runs: 20\n",
        ("fabtune-tune: is not a profile section; did you mean fabtune_tune?", "fabtune_tune: missing"),
    ),
    "needed section absent": Bad(ROCE_PROFILE, ("fabtune_tune: missing (sections here: fabric_desired)",)),
    "fabtune_tune is a list": Bad(
        _tune("  - max_runs: 3\n"), ("fabtune_tune: [{'max_runs': 3}] must be a mapping",)
    ),
    "max_runs abc": Bad(_tune("  max_runs: abc\n"), ("fabtune_tune.max_runs: 'abc' must be an integer",)),
    "max_runs true": Bad(_tune("  max_runs: true\n"), ("fabtune_tune.max_runs: True must be an integer",)),
    "revert_deadline_s float": Bad(
        _tune("  revert_deadline_s: 90.5\n"), ("fabtune_tune.revert_deadline_s: 90.5 must be an integer",)
    ),
    "alpha a string": Bad(_tune("  alpha: '0.05'\n"), ("fabtune_tune.alpha: '0.05' must be a number",)),
    "alpha 2": Bad(_tune("  alpha: 2\n"), ("fabtune_tune.alpha: 2 must be between 0 and 0.5",)),
    "pause_guard below 1": Bad(
        _tune("  pause_guard: 0.5\n"), ("fabtune_tune.pause_guard: 0.5 must be at least 1",)
    ),
    "pair_guard 1.5": Bad(
        _tune("  pair_guard: 1.5\n"), ("fabtune_tune.pair_guard: 1.5 must be between 0 and 1",)
    ),
    "skip_groups a string": Bad(
        _tune("  skip_groups: mtu\n"),
        ("fabtune_tune.skip_groups: 'mtu' must be a list of move groups", "[mtu]"),
    ),
    "skip_groups unknown group": Bad(
        _tune("  skip_groups: [qps, mtus]\n"),
        ("fabtune_tune.skip_groups[1]: 'mtus' is not a move group", "did you mean mtu?"),
    ),
    "unknown option": Bad(
        _tune("  max_run: 20\n"), ("fabtune_tune.max_run: 20 is not a known option; did you mean max_runs?",)
    ),
    "bad fabric_desired beside fabtune_tune": Bad(
        "fabric_desired:\n  nics: {all: {mtu: 1234}}\nfabtune_tune: {}\n",
        ("fabric_desired.nics.all.mtu: 1234",),
    ),
    "IB profile on a RoCE rack": Bad(
        IB_PROFILE,
        (
            "fabric_desired.nccl.NCCL_IB_ADAPTIVE_ROUTING: 1 is an InfiniBand setting",
            "fabric_desired.sm: {",
            "makes fabric tbroce RoCE",
        ),
        need="fabric_desired",
        rack="roce",
    ),
    "RoCE profile on an IB rack": Bad(
        ROCE_PROFILE,
        (
            "fabric_desired.nics: {'all': {",
            "is a RoCE-only section",
            "fabric_desired.nccl.NCCL_IB_TC: 106 is a RoCE setting",
            "fabric_desired.nccl.NCCL_IB_GID_INDEX: 3 is a RoCE setting",
        ),
        need="fabric_desired",
        rack="ib",
    ),
    "sm section without subnet_managers": Bad(
        IB_PROFILE,
        ("fabric_desired.sm: {", "has no subnet_managers group"),
        need="fabric_desired",
        rack="ib-no-sm",
    ),
}


def _write(tmp_path: Path, content: str | bytes | Path) -> Path:
    if isinstance(content, Path):
        return content
    path = tmp_path / "profile.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _unreadable(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make ``path`` unreadable: mode 000, and as root (which ignores modes) refuse its opening."""
    path.chmod(0)
    if os.geteuid() != 0:
        return
    real: Callable[..., object] = Path.open

    def deny(self: Path, *args: object, **kwargs: object) -> object:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", deny)


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_profile_is_refused_naming_field_and_value(
    case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventories: dict[str, InventoryInfo]
) -> None:
    path = _write(tmp_path, case.content)
    if case.unreadable:
        _unreadable(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        profile = load_profile(path, need=case.need)
        if case.rack is not None:
            check_against_rack(profile, inventories[case.rack])
    message = str(err.value)
    assert str(path) in err.value.source
    for fragment in case.expect:
        assert fragment in message
    assert "secrethash" not in message


def test_good_profiles_fit_their_racks(inventories: dict[str, InventoryInfo], tmp_path: Path) -> None:
    check_against_rack(load_profile(ROCE_PROFILE, need="fabric_desired"), inventories["roce"])
    check_against_rack(load_profile(IB_PROFILE, need="fabric_desired"), inventories["ib"])
    both = tmp_path / "both.yml"
    both.write_text(ROCE_PROFILE.read_text() + "fabtune_tune:\n  max_runs: 8\n  skip_groups: [mtu]\n")
    for need in ("fabric_desired", "fabtune_tune"):
        profile = load_profile(both, need=need)
        check_against_rack(profile, inventories["roce"])
    assert profile.tune == {"max_runs": 8, "skip_groups": ["mtu"]}
    assert profile.sections == ("fabric_desired", "fabtune_tune")


def test_nccl_ib_sl_fits_a_roce_rack(inventories: dict[str, InventoryInfo], tmp_path: Path) -> None:
    """NCCL_IB_SL is the PCP of NCCL's frames on VLAN-tagged RoCE (SL & 7): a RoCE site whose
    switches trust PCP sets it; an IB-only key beside it is still refused on RoCE."""
    sl = tmp_path / "sl.yml"
    sl.write_text("fabric_desired:\n  nccl:\n    NCCL_IB_SL: 3\n    NCCL_IB_TC: 106\n")
    check_against_rack(load_profile(sl, need="fabric_desired"), inventories["roce"])
    sl.write_text("fabric_desired:\n  nccl:\n    NCCL_IB_SL: 3\n")
    check_against_rack(load_profile(sl, need="fabric_desired"), inventories["ib"])
    sl.write_text("fabric_desired:\n  nccl:\n    NCCL_IB_SL: 3\n    NCCL_IB_ADAPTIVE_ROUTING: 1\n")
    with pytest.raises(ConfigError) as err:
        check_against_rack(load_profile(sl, need="fabric_desired"), inventories["roce"])
    assert "NCCL_IB_SL" not in str(err.value)
    assert "fabric_desired.nccl.NCCL_IB_ADAPTIVE_ROUTING: 1 is an InfiniBand setting" in str(err.value)


# --------------------------------------------------------------------------- through the CLI


def _nothing_started(home: Path) -> None:
    """No journal run was opened and no fabric lock taken."""
    if (home / "journal.sqlite").exists():
        journal = Journal(home / "journal.sqlite")
        try:
            assert journal.runs(10) == []
        finally:
            journal.close()
    locks = home / "locks"
    assert not locks.exists() or not any(locks.iterdir())


CLI = {
    "tune: shadow-like": (["tune"], "roce", SHADOW, "cannot be section names"),
    "tune: max_runs abc": (["tune"], "roce", _tune("  max_runs: abc\n"), "fabtune_tune.max_runs: 'abc'"),
    "tune: skip_groups string": (
        ["tune"],
        "roce",
        _tune("  skip_groups: mtu\n"),
        "fabtune_tune.skip_groups: 'mtu'",
    ),
    "tune: misspelled section": (
        ["tune"],
        "roce",
        "fabtune_tun:\n  max_runs: 3\n",
        "did you mean fabtune_tune?",
    ),
    "tune: IB fabric_desired beside fabtune_tune on RoCE": (
        ["tune"],
        "roce",
        IB_PROFILE.read_text() + "fabtune_tune: {max_runs: 8}\n",
        "fabric_desired.nccl.NCCL_IB_ADAPTIVE_ROUTING: 1",
    ),
    "apply: IB profile on RoCE": (["apply"], "roce", IB_PROFILE,
                                  "fabric_desired.nccl.NCCL_IB_ADAPTIVE_ROUTING: 1"),
    "bootstrap: IB profile on RoCE": (["bootstrap"], "roce", IB_PROFILE,
                                      "fabric_desired.nccl.NCCL_IB_ADAPTIVE_ROUTING: 1"),
    "drift: RoCE profile on IB": (["drift"], "ib", ROCE_PROFILE, "fabric_desired.nccl.NCCL_IB_TC: 106"),
    "drift timer: sm without SM hosts": (
        ["drift", "--install-timer", "--unit-dir", "UNITS"],
        "ib-no-sm",
        IB_PROFILE,
        "no subnet_managers group",
    ),
    "resume: tune options a list": (
        ["resume", "20260101-000000-abcdef"],
        None,
        "fabtune_tune: [1]\n",
        "must be a mapping",
    ),
}


@pytest.mark.parametrize("case", CLI.values(), ids=CLI.keys())
def test_cli_refuses_bad_profile_before_anything_starts(
    case: tuple[list[str], str | None, str | Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    verb, rack, content, expect = case
    home = tmp_path / "home"
    monkeypatch.setenv("FABTUNE_HOME", str(home))
    argv = [a.replace("UNITS", str(tmp_path / "units")) for a in verb]
    if rack is not None:
        inventory = tmp_path / "inv.yml"
        inventory.write_text(INVENTORIES[rack])
        argv += ["-i", str(inventory)]
    argv += ["--profile", str(_write(tmp_path, content))]
    assert main(argv) == ExitStatus.CONFIG
    err = capsys.readouterr().err
    assert expect in " ".join(err.split())
    assert "Traceback" not in err
    _nothing_started(home)
    assert not (tmp_path / "units").exists()


def test_a_bare_name_takes_the_shipped_profile_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_profile(Path("roce")).path == ROCE_PROFILE
    assert load_profile(Path("ib")).path == IB_PROFILE
    with pytest.raises(ConfigError, match="profile nosuch"):
        load_profile(Path("nosuch"))


def test_a_local_file_wins_over_a_shipped_profile_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "roce").write_text("fabtune_tune: {max_runs: 8}\n")
    profile = load_profile(Path("roce"), need="fabtune_tune")
    assert profile.path == Path("roce") and profile.desired.tree() == {}
