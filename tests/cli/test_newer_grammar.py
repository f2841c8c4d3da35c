"""Code in a newer Python grammar than the running interpreter is said to be unanalysed.

Under Python 3.11 a PEP 695 function (``def f[T](x: T)``) or alias (``type X = int``) does not
parse with ``ast``; libcst's grammar accepts it, so it is not a syntax error either, and the
analysis skips it. The run used to end with "All checks passed!" and exit 0: now every format
names the lines not analysed and the run exits 2 (incomplete), like a file that could not be
read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ddp_lsp.core.engine import analyze
from tests.cli.conftest import BUGGY, write

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="PEP 695 parses here: no newer grammar to meet"
)

NEWER = (
    "import torch.distributed as dist\n"
    "\n"
    "def first[T](items: list[T]) -> T:\n"
    "    if dist.get_rank() == 0:\n"
    "        dist.barrier()\n"
    "    return items[0]\n"
    "\n"
    "type Batch = list[int]\n"
)


def test_core_names_the_skipped_lines() -> None:
    result = analyze(NEWER)
    assert [(n.line, n.end_line) for n in result.not_analysed] == [(2, 5), (7, 7)]
    assert "3.12" in result.not_analysed[0].reason
    assert analyze(BUGGY).not_analysed == ()


def test_text_says_what_was_not_analysed_and_exits_2(cli_run, project: Path) -> None:
    write(project / "new.py", NEWER)
    r = cli_run("check", "new.py")
    assert r.rc == 2
    assert "All checks passed" not in r.out
    assert "1 file not fully analysed: code in a newer Python grammar" in r.out
    assert "warning: new.py:3: lines 3-6 not analysed: this code parses only in a newer" in r.err
    assert "warning: new.py:8: line 8 not analysed" in r.err


def test_other_files_keep_their_status_line(cli_run, project: Path) -> None:
    write(project / "new.py", NEWER)
    write(project / "train.py", BUGGY)
    r = cli_run("check", ".", "--select", "DDP201")
    assert r.rc == 2 and "train.py:11:9: DDP201" in r.out
    assert "1 file not fully analysed" in r.out


def test_json_carries_it_with_a_null_code(cli_run, project: Path) -> None:
    write(project / "new.py", NEWER)
    r = cli_run("check", "new.py", "--format", "json")
    items = json.loads(r.out)
    assert r.rc == 2
    assert [
        (i["code"], i["name"], i["location"]["row"], i["end_location"]["row"]) for i in items
    ] == [
        (None, "not-analysed", 3, 6),
        (None, "not-analysed", 8, 8),
    ]


def test_sarif_marks_the_run_incomplete(cli_run, project: Path) -> None:
    write(project / "new.py", NEWER)
    r = cli_run("check", "new.py", "--format", "sarif")
    run = json.loads(r.out)["runs"][0]
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    notes = invocation["toolExecutionNotifications"]
    assert [n["level"] for n in notes] == ["warning", "warning"]
    region = notes[0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 3, "endLine": 6}


def test_github_annotates_the_lines(cli_run, project: Path) -> None:
    write(project / "new.py", NEWER)
    r = cli_run("check", "new.py", "--format", "github")
    assert "::warning file=new.py,line=3,endLine=6,title=ddp-lsp not-analysed::" in r.out
