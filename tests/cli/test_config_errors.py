"""A pyproject.toml that cannot be used is reported, never silently passed by.

``[tool] ddp-lsp = 5`` used to be skipped (the search looked for the text ``[tool.ddp-lsp``)
and the defaults applied without a word; a pyproject.toml that is not TOML was skipped the
same way unless that text was in it. Now both are reported with file and line, the check runs
with the default settings, and the exit status is 2 (the configuration was not applied).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lsp.config import ConfigFileError, find_pyproject, settings_from_pyproject
from ddp_lsp.lsp.config import ProjectConfigs
from tests.cli.conftest import BUGGY, BUGGY_LINE, write

CASES = {
    "not-a-table": ("[tool]\nddp-lsp = 5\n", "pyproject.toml:2: [tool.ddp-lsp] must be a table"),
    "tool-not-a-table": ('tool = "ddp-lsp"\n', "pyproject.toml:1: `tool` must be a table"),
    "broken-section": (
        '[tool.ddp-lsp]\nselect = ["DDP2"\n',
        "pyproject.toml:2: invalid TOML: Unclosed array at the end of the file",
    ),
    "broken-elsewhere": (
        '[project]\nname = "x\n',
        "pyproject.toml:2:10: invalid TOML: Illegal character",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unusable_pyproject_is_reported_and_defaults_apply(
    case: str, cli_run, project: Path
) -> None:
    content, message = CASES[case]
    write(project / "pyproject.toml", content)
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "-q")
    assert r.rc == 2
    (line,) = [x for x in r.err.splitlines() if "pyproject.toml" in x]
    assert line.startswith("error: ") and message in line, r.err
    assert line.endswith("checking with the default settings")
    assert f"train.py:{BUGGY_LINE}:9: DDP201" in r.out  # the defaults: every rule
    assert "Traceback" not in r.err


def test_inline_table_under_tool_is_found_and_applied(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool]\nddp-lsp = { ignore = ["DDP201"] }\n')
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "-q")
    assert "DDP201" not in r.out and r.err == ""


def test_valid_pyproject_without_the_section_is_passed_by(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-lsp]\nignore = ["DDP5"]\n')
    write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "sub"\n[tool.ruff]\n')
    assert find_pyproject(tmp_path / "sub" / "x.py") == tmp_path / "pyproject.toml"
    write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "sub\n')
    assert find_pyproject(tmp_path / "sub" / "x.py") == tmp_path / "sub" / "pyproject.toml"
    with pytest.raises(ConfigFileError, match=r"pyproject.toml:2:\d+: invalid TOML"):
        settings_from_pyproject(tmp_path / "sub" / "pyproject.toml")


def test_explicit_broken_config_is_a_configuration_error(cli_run, project: Path) -> None:
    write(project / "other.toml", "[tool]\nddp-lsp = 5\n")
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--config", "other.toml")
    assert r.rc == 2 and r.out == ""
    assert "configuration error: other.toml:2: [tool.ddp-lsp] must be a table" in r.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_server_gets_a_message_not_a_crash(case: str, tmp_path: Path) -> None:
    """The server reads the same file through lsp.config: a message (shown with
    window/showMessage), no settings from it, and no exception (``tool = 5`` raised one)."""
    content, message = CASES[case]
    pyproject = write(tmp_path / "pyproject.toml", content)
    configs = ProjectConfigs()
    assert configs.pyproject_for(tmp_path / "train.py") == pyproject
    loaded = configs.table(pyproject)
    assert loaded.table == () and len(loaded.errors) == 1
    assert message in loaded.errors[0]
