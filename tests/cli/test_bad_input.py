"""Bad input through the CLI: each file gets a clear result, no traceback, and the other
files in the same run are still checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import BUGGY, BUGGY_LINE, write


def _others_still_checked(r) -> None:  # type: ignore[no-untyped-def]
    assert f"good.py:{BUGGY_LINE}:9: DDP201" in r.out, r.out
    assert "Traceback" not in r.out + r.err


def test_invalid_python_is_ddp000_and_rest_of_file_analysed(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "broken.py", BUGGY + "\ndef oops(:\n    pass\n")
    r = cli_run("check", ".", "--select", "DDP000,DDP201")
    assert r.rc == 1
    assert "broken.py:15:10: DDP000 [error] syntax error" in r.out
    assert f"broken.py:{BUGGY_LINE}:9: DDP201" in r.out  # chunks before the error still count
    _others_still_checked(r)


def test_nul_bytes(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "nul.py", b"import torch\x00\nx = 1\n")
    r = cli_run("check", ".", "--select", "DDP000,DDP201")
    assert r.rc == 1
    (line,) = [x for x in r.out.splitlines() if x.startswith("nul.py:")]
    assert line.startswith("nul.py:1:") and "DDP000 [error] syntax error" in line
    assert "nul" in line.lower()
    _others_still_checked(r)


def test_deeply_nested_parentheses_do_not_crash(cli_run, project: Path) -> None:
    """2,000 nested brackets: Python refuses them, and libcst's native parser (which the core
    asks about chunks Python rejects) would overflow its stack; the core does not ask it about
    absurd nesting and reports DDP000 instead."""
    write(project / "good.py", BUGGY)
    write(project / "deep.py", "x = " + "(" * 2000 + "1" + ")" * 2000 + "\n")
    write(
        project / "deep2.py",
        "import torch.distributed\n\ndef f():\n    return " + "[" * 3000 + "]" * 3000 + "\n",
    )
    r = cli_run("check", ".", "--select", "DDP000,DDP201", "--jobs", "1")
    assert r.rc == 1
    assert "deep.py:1:" in r.out and "too many nested parentheses" in r.out
    assert "deep2.py:4:" in r.out
    _others_still_checked(r)


def test_non_utf8_without_cookie_is_an_error_for_that_file(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "latin.py", "# Auteur: José\nx = 1\n".encode("latin-1"))
    r = cli_run("check", ".", "--select", "DDP201")
    assert r.rc == 2
    assert "error: latin.py: cannot decode as utf-8: byte 0xe9 on line 1" in r.err
    assert "coding" in r.err  # says how to fix it
    assert "1 file could not be checked" in r.out
    _others_still_checked(r)


def test_non_utf8_error_in_json_and_sarif_keeps_stdout_parseable(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "latin.py", b"x = '\xe9'\n")
    r = cli_run("check", ".", "--format", "json", "--select", "DDP201")
    assert r.rc == 2 and "latin.py" in r.err
    assert [item["code"] for item in json.loads(r.out)] == ["DDP201"]
    r = cli_run("check", ".", "--format", "sarif", "--select", "DDP201")
    run = json.loads(r.out)["runs"][0]
    assert run["invocations"][0]["executionSuccessful"] is False
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert "latin.py" in note["message"]["text"]


def test_unknown_coding_cookie(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "k.py", b"# -*- coding: klingon -*-\nx = 1\n")
    r = cli_run("check", ".", "--select", "DDP201")
    assert (
        r.rc == 2
        and "error: k.py: cannot determine the encoding: unknown encoding: klingon" in r.err
    )
    _others_still_checked(r)


def test_unreadable_path_is_an_error_for_that_file(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    (project / "dangling.py").symlink_to(project / "gone.py")
    (project / "dir.py").mkdir()  # a directory named like a module: walked, not read
    r = cli_run("check", "good.py", "dangling.py", "--select", "DDP201")
    assert r.rc == 2 and "error: dangling.py:" in r.err
    _others_still_checked(r)


def test_crlf_positions(cli_run, project: Path) -> None:
    write(project / "good.py", BUGGY)
    write(project / "crlf.py", BUGGY.replace("\n", "\r\n").encode())
    r = cli_run("check", ".", "--format", "json", "--select", "DDP201")
    rows = sorted(
        (Path(i["filename"]).name, i["location"]["row"], i["location"]["column"])
        for i in json.loads(r.out)
    )
    assert rows == [("crlf.py", BUGGY_LINE, 9), ("good.py", BUGGY_LINE, 9)]


def test_five_megabyte_file(cli_run, project: Path) -> None:
    """A 5 MB module (generated tables and an embedded blob) is over the one size limit: it is
    reported (not analysed: that cost ~40 s and 1.2 GB), and the other files get their result."""
    head = "import torch\nimport torch.distributed as dist\n\n"
    rows = "".join(f"ROW_{i} = [{i}, {i * 2}, 'name_{i}', {{'k': {i}}}]\n" for i in range(40_000))
    blob_line = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 2 + "\n"
    blob = "BLOB = '''\n" + blob_line * 40_000 + "'''\n"
    text = head + rows + blob
    write(project / "big.py", text)
    write(project / "good.py", BUGGY)
    r = cli_run("check", ".", "--select", "DDP000,DDP201", "-q")
    assert len(text) >= 5_000_000
    assert r.rc == 2 and "big.py" not in r.out
    assert "error: big.py: is 5.1 MB, over the 2 MB limit for Python sources" in r.err
    _others_still_checked(r)


def test_internal_rule_error_is_a_warning_with_verbose(cli_run, project: Path, monkeypatch) -> None:
    from ddp_lsp.core import engine, registry
    from ddp_lsp.core.rule import Rule
    from ddp_lsp.core.types import RuleMeta, Severity

    class Crashes(Rule):
        meta = RuleMeta("DDP999", "always-crashes", Severity.ERROR, "test rule")

        def check(self, ctx):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    rules = (*registry.all_rules(), Crashes())
    monkeypatch.setattr(registry, "all_rules", lambda: rules)
    monkeypatch.setattr(engine, "all_rules", lambda: rules)
    write(project / "good.py", BUGGY)
    r = cli_run("check", "good.py", "--select", "DDP201,DDP999")
    assert r.rc == 1 and "Traceback" not in r.err
    assert r.err == (
        "warning: DDP999 failed internally on 1 file (findings may be missing); "
        "rerun with --verbose for details\n"
    )
    _others_still_checked(r)
    r = cli_run("check", "good.py", "--select", "DDP201,DDP999", "--verbose")
    assert (
        "warning: good.py:" in r.err
        and "rule DDP999 failed internally (RuntimeError: boom)" in r.err
    )
    assert "Traceback" not in r.err
    _others_still_checked(r)
    # A disabled rule does not run at all, so it cannot fail.
    r = cli_run("check", "good.py", "--select", "DDP201")
    assert r.err == ""


def test_engine_crash_costs_one_file(cli_run, project: Path, monkeypatch) -> None:
    from ddp_lsp.core import engine

    real = engine.analyze

    def flaky(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "POISON" in source:
            raise AssertionError("engine bug")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(engine, "analyze", flaky)
    write(project / "good.py", BUGGY)
    write(project / "poison.py", "POISON = 1\n")
    r = cli_run("check", ".", "--select", "DDP201", "--jobs", "1")
    assert r.rc == 2
    assert "error: poison.py: internal error while analysing: AssertionError: engine bug" in r.err
    _others_still_checked(r)


@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        ("utf-16", "the file is UTF-16 (it starts with a UTF-16 byte order mark)"),
        ("utf-16-le", "the file is UTF-16 (little-endian, without a byte order mark)"),
        ("utf-16-be", "the file is UTF-16 (big-endian, without a byte order mark)"),
        ("utf-32", "the file is UTF-32 (it starts with a UTF-32 byte order mark)"),
    ],
)
def test_utf16_file_is_named_as_such(cli_run, project: Path, encoding: str, said: str) -> None:
    """A coding comment cannot make a UTF-16 file readable: the message must not suggest one."""
    write(project / "good.py", BUGGY)
    write(project / "wide.py", BUGGY.encode(encoding))
    r = cli_run("check", "good.py", "wide.py", "--select", "DDP201")
    assert r.rc == 2
    (line,) = [x for x in r.err.splitlines() if "wide.py" in x]
    assert said in line and "save it as UTF-8" in line
    assert "coding" not in line and "latin-1" not in line
    _others_still_checked(r)
