"""docs/rules/ must be exactly what ``python -m ddp_lsp.docs`` generates from the rules.

The rule reference is generated from the rule modules' docstrings; a rule added or edited
without regenerating it fails here, with the command that fixes it.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

from ddp_lsp.docs import write_docs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "rules"
REGENERATE = ".venv/bin/python -m ddp_lsp.docs"


def _tree(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.md"))}


def test_docs_rules_match_the_rules(tmp_path: Path) -> None:
    write_docs(tmp_path)
    expected, actual = _tree(tmp_path), _tree(DOCS)
    missing = sorted(set(expected) - set(actual))
    stale = sorted(set(actual) - set(expected))
    changed = sorted(n for n in set(expected) & set(actual) if expected[n] != actual[n])
    if missing or stale or changed:
        first = changed[0] if changed else None
        diff = ""
        if first:
            diff = "".join(
                difflib.unified_diff(
                    actual[first].splitlines(True),
                    expected[first].splitlines(True),
                    f"docs/rules/{first}",
                    f"generated/{first}",
                )
            )
        raise AssertionError(
            f"docs/rules is out of date (missing: {missing}, not generated: {stale}, "
            f"changed: {changed}).\nRegenerate it from the repository root with:\n"
            f"    {REGENERATE}\nand delete any file listed as not generated.\n{diff}"
        )


def test_generator_runs_as_a_module(tmp_path: Path) -> None:
    """The documented command itself works (and writes where it is told)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_lsp.docs", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "README.md").is_file() and (tmp_path / "DDP201.md").is_file()
