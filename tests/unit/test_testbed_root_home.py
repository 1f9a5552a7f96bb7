"""A testbed host's root gets a fresh Debian host's shell start-up files, not this machine's."""

from __future__ import annotations

from pathlib import Path

from fabtune.testbed.files import ROOT_SHELL_FILES, _root_shell_files


def test_base_files_own_profile_and_bashrc_are_root_s(tmp_path: Path) -> None:
    base = tmp_path / "base-files"
    base.mkdir()
    (base / "dot.profile").write_text("# profile of base-files\n")
    (base / "dot.bashrc").write_text("# bashrc of base-files\n")
    upper = tmp_path / "upper"
    _root_shell_files(upper, base)
    assert (upper / "root/.profile").read_text() == "# profile of base-files\n"
    assert (upper / "root/.bashrc").read_text() == "# bashrc of base-files\n"


def test_without_base_files_root_s_files_are_there_and_run_nothing(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    _root_shell_files(upper, tmp_path / "absent")
    for dest in ROOT_SHELL_FILES:
        lines = (upper / dest).read_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith("# ")


def test_an_existing_file_of_an_earlier_build_is_replaced(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "root").mkdir(parents=True)
    (upper / "root/.bashrc").write_text('eval "$(pyenv init -)"\n')
    _root_shell_files(upper, tmp_path / "absent")
    assert "pyenv" not in (upper / "root/.bashrc").read_text()
