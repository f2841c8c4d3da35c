"""``check`` says "N fixable"; ``--fix`` then fixes N, or says why not.

A fix can make another finding go away (absorbed), leave one whose edits keep overlapping
(left), or create a finding that another fix then resolves (late). The count of fixes applied
is reconciled with the count ``check`` printed: fixed = fixable - absorbed - left + late, and
the summary names each difference.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from ddp_lsp.core.fixes import fix_all_stats
from ddp_lsp.core.types import Edit, Finding, Fix, Pos, Severity, Span
from ddp_lsp.reporters import FileReport, FixCounts, fixed_line
from tests.cli.conftest import write

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# DDP203's fix (opt.step() -> scaler.step(opt)) makes DDP202 (step without update) appear,
# whose own fix then adds scaler.update(): one fixable finding, two fixes applied.
LATE = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def train(model, loader, optimizers, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        for opt in optimizers:
            opt.step()
"""


def _fixable(out: str) -> int:
    m = re.search(r"\[\*\] (\d+) fixable", out)
    return int(m.group(1)) if m else 0


def test_counts_agree_on_the_examples(cli_run, project: Path) -> None:
    shutil.copytree(EXAMPLES, project / "examples")
    before = cli_run("check", "examples")
    n = _fixable(before.out)
    assert n > 10
    diff = cli_run("check", "--diff", "examples")
    assert f"Would fix {n} findings.\n" in diff.err
    fixed = cli_run("check", "--fix", "examples")
    assert f"Fixed {n} findings.\n" in fixed.out
    total = int(re.search(r"Found (\d+) findings \(", before.out).group(1))  # type: ignore[union-attr]
    left = int(re.search(r"Found (\d+) findings remaining", fixed.out).group(1))  # type: ignore[union-attr]
    assert left == total - n


def test_a_fix_that_creates_a_fixable_finding_is_explained(cli_run, project: Path) -> None:
    write(project / "train.py", LATE)
    assert _fixable(cli_run("check", "train.py").out) == 1
    r = cli_run("check", "--fix", "train.py")
    assert (
        "Fixed 2 findings (1 was fixable: 1 more appeared only after other fixes and was "
        "fixed too)." in r.out
    )


# -- the accounting, on synthetic findings ----------------------------------------------------


def _finding(rule: str, line: int, title: str, text: str, col: int = 0, end: int = 1) -> Finding:
    span = Span(Pos(line, col), Pos(line, end))
    fix = Fix(title=title, edits=(Edit(span, text),), safe=True)
    return Finding(rule, span, "m", Severity.WARNING, fixes=(fix,))


def test_absorbed_and_left_are_counted() -> None:
    """Pass 1: A and B overlap (A wins), C's edit changes nothing. After A, B is gone."""

    def analyze(text: str) -> Sequence[Finding]:
        out = []
        if text.startswith("a"):
            out.append(_finding("DDP1", 0, "A", "A", 0, 2))
            out.append(_finding("DDP2", 0, "B", "B", 1, 2))
        out.append(_finding("DDP3", 1, "C", "c", 0, 1))  # replaces "c" by "c": no change
        return out

    new, stats = fix_all_stats("ab\nc\n", analyze, lambda f: f.safe_fix)
    assert new == "A\nc\n"
    assert (stats.fixable, stats.applied, stats.late) == (3, 1, 0)
    absorbed, left = stats.reconcile([("DDP3", "C")])
    assert (absorbed, left) == (1, 1)
    report = FileReport("x.py", None, fixed=1, fix_counts=FixCounts(3, 0, absorbed, left))
    assert fixed_line([report]) == (
        "Fixed 1 finding (3 were fixable: 1 went away with the fixes of others; 1 could not be "
        "applied (overlapping or empty edits; it is reported below))."
    )


def test_plain_agreement_says_nothing_more() -> None:
    report = FileReport("x.py", None, fixed=2, fix_counts=FixCounts(2, 0, 0, 0))
    assert fixed_line([report]) == "Fixed 2 findings."
