"""The emulated systemd's boot: units enabled for multi-user.target, in After=/Before= order."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.sim.tools import systemd


def enable(unit_dir: Path, name: str, text: str) -> None:
    (unit_dir / name).write_text(text)
    wants = unit_dir / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / name).symlink_to(unit_dir / name)


def oneshot(out: Path, word: str, unit: str = "", service: str = "") -> str:
    return (f"[Unit]\n{unit}\n[Service]\nType=oneshot\nRemainAfterExit=yes\n{service}\n"
            f'ExecStart=/bin/sh -c "echo {word} >> {out}"\n[Install]\nWantedBy=multi-user.target\n')


def test_parse_unit_keeps_repeated_keys_and_an_empty_assignment_resets() -> None:
    unit = systemd.parse_unit("# c\n[Unit]\nAfter=a.service b.service\nAfter=c.service\n; c\n"
                              "[Service]\nExecStart=/bin/x \\\n  --flag\nExecStart=\nExecStart=/bin/y\n")
    assert unit["Unit"]["After"] == ["a.service b.service", "c.service"]
    assert unit["Service"]["ExecStart"] == ["/bin/y"]


def test_order_follows_after_and_before_not_names() -> None:
    units = {
        "a.service": systemd.parse_unit("[Unit]\nAfter=c.service missing.service\n"),
        "b.service": systemd.parse_unit("[Unit]\nBefore=c.service\n"),
        "c.service": systemd.parse_unit("[Unit]\n"),
    }
    assert systemd.boot_order(units) == ["b.service", "c.service", "a.service"]


def test_a_cycle_is_broken_and_every_unit_still_starts() -> None:
    units = {"a.service": systemd.parse_unit("[Unit]\nAfter=b.service\n"),
             "b.service": systemd.parse_unit("[Unit]\nAfter=a.service\n")}
    assert sorted(systemd.boot_order(units)) == ["a.service", "b.service"]


def test_boot_runs_enabled_units_in_order_and_records_their_state(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    unit_dir, boot_dir, out = tmp_path / "system", tmp_path / "boot", tmp_path / "out"
    unit_dir.mkdir()
    enable(unit_dir, "a-late.service", oneshot(out, "late", unit="After=z-early.service"))
    enable(unit_dir, "z-early.service", oneshot(out, "early"))
    enable(unit_dir, "skipped.service", oneshot(out, "skipped", unit=f"ConditionPathExists={tmp_path}/none"))
    enable(unit_dir, "broken.service", oneshot(out, "broken", service="ExecStartPre=/bin/false"))
    (unit_dir / "disabled.service").write_text(oneshot(out, "disabled"))  # installed, not enabled
    assert systemd.boot_main([], unit_dir=unit_dir, boot_dir=boot_dir) == 1
    assert out.read_text().split() == ["early", "late"]  # broken.service stopped at its failing command
    states = {p.name[: -len(".state")]: p.read_text().strip() for p in boot_dir.glob("*.state")}
    assert states == {"a-late.service": "active", "z-early.service": "active",
                      "skipped.service": "inactive", "broken.service": "failed"}
    assert "broken.service: failed" in capsys.readouterr().err


def test_is_active_answers_for_a_boot_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(systemd, "BOOT_DIR", tmp_path / "boot")
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/fabtune-boot.service.state").write_text("active\n")
    (tmp_path / "boot/bad.service.state").write_text("failed\n")
    run_dir = tmp_path / "transient"
    assert systemd.systemctl_main(["is-active", "fabtune-boot.service"], run_dir=run_dir) == 0
    assert systemd.systemctl_main(["is-active", "bad.service"], run_dir=run_dir) == 3
    assert systemd.systemctl_main(["is-active", "never.service"], run_dir=run_dir) == 3
    assert capsys.readouterr().out.split() == ["active", "failed", "inactive"]
