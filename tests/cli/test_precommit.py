""".pre-commit-hooks.yaml: the two hooks exist, are well formed, and their entries work the
way pre-commit calls them (entry + the changed file names)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.conftest import BUGGY, FIXED_LINE, write

ROOT = Path(__file__).resolve().parents[2]
yaml = pytest.importorskip("yaml")


def _hooks() -> dict[str, dict]:
    data = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, list)
    return {hook["id"]: hook for hook in data}


def test_hooks_are_well_formed() -> None:
    hooks = _hooks()
    assert set(hooks) == {"ddp-lsp", "ddp-lsp-fix"}
    for hook in hooks.values():
        # What pre-commit requires of a hook definition.
        assert {"id", "name", "entry", "language"} <= set(hook)
        assert hook["language"] == "python"
        assert "python" in hook["types_or"]
        assert shlex.split(hook["entry"])[0] == "ddp-lsp"


def _run_entry(cli_run, hook_id: str, *files: str):  # type: ignore[no-untyped-def]
    argv = shlex.split(_hooks()[hook_id]["entry"])[1:]
    return cli_run(*argv, *files)


def test_check_hook_fails_on_findings_and_respects_excludes(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nexclude = ["vendor"]\nselect = ["DDP201"]\n')
    write(project / "train.py", BUGGY)
    write(project / "vendor" / "lib.py", BUGGY)
    r = _run_entry(cli_run, "ddp-lsp", "train.py", "vendor/lib.py")
    assert r.rc == 1
    assert "train.py:" in r.out and "vendor/lib.py" not in r.out


def test_fix_hook_fixes(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nselect = ["DDP201"]\n')
    path = write(project / "train.py", BUGGY)
    r = _run_entry(cli_run, "ddp-lsp-fix", "train.py")
    assert r.rc == 0 and FIXED_LINE in path.read_text()


def test_readme_documents_the_hooks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## pre-commit\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert section, "README.md needs a '## pre-commit' section"
    text = section.group(1)
    assert "id: ddp-lsp" in text and "ddp-lsp-fix" in text and "rev:" in text
