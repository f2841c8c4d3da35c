"""Output paths and timeouts are checked before a preflight or small run starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ddp_lsp.cli import main
from ddp_lsp.cliutil import positive_seconds, unwritable_reason


def test_positive_seconds() -> None:
    assert positive_seconds("2.5") == 2.5
    for bad in ("-1", "0", "nan", "inf", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_seconds(bad)


def test_unwritable_reason(tmp_path: Path) -> None:
    assert unwritable_reason(str(tmp_path / "out.json")) is None
    assert unwritable_reason("-") is None
    assert "does not exist" in (unwritable_reason(str(tmp_path / "no" / "out.json")) or "")
    assert "is a directory" in (unwritable_reason(str(tmp_path)) or "")


@pytest.mark.parametrize(
    "argv",
    [
        ["preflight", "--quick", "--json", "/nonexistent-dir/x.json"],
        ["smallrun", "--json", "/nonexistent-dir/x.json", "--", "true"],
    ],
)
def test_unwritable_json_is_refused_before_running(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot write --json" in err and "does not exist" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["preflight", "smallrun"])
def test_bad_timeout_is_a_usage_error(command: str, capsys) -> None:
    argv = [command, "--timeout", "-1"] + (["--", "true"] if command == "smallrun" else [])
    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse's own exit, where the command lets it through
        rc = exit_.code  # type: ignore[assignment]
    assert rc == 2
    assert "expected a number of seconds above 0" in capsys.readouterr().err
