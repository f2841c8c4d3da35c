"""Rules whose bug is a bug in any PyTorch program (``RuleMeta.any_module``) run in modules that
are not distributed code; every other rule stays silent there, also after an edit makes the
module distributed code or stops it being one (docs/accuracy.md M19)."""

from __future__ import annotations

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.types import Pos

# A single-GPU benchmark: every step's loss kept with its graph (DDP301, any module), a save
# no rank guard protects (DDP501, distributed code only) and a fixed GPU index (DDP504).
SCRIPT = """\
import torch


def bench(model, loader, optimizer):
    model = model.cuda(0)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.cuda(0)), y.cuda(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss)
    torch.save(model.state_dict(), "bench.pt")
    return losses
"""


def _rules(findings: object) -> set[str]:
    return {f.rule_id for f in findings}  # type: ignore[attr-defined]


def test_the_flag_matches_the_rule_docs() -> None:
    for rule in all_rules():
        import sys

        doc = sys.modules[type(rule).__module__].__doc__ or ""
        assert ("Any module:" in doc) == rule.meta.any_module, rule.meta.id


def test_any_module_rules_report_in_a_module_that_is_not_distributed_code() -> None:
    found = analyze(SCRIPT).findings
    assert _rules(found) == {"DDP301"}
    assert [f.span.start.line for f in found] == [11]
    # The same code as distributed code gets the rules that need several ranks too.
    dist = analyze("import torch.distributed as dist\n" + SCRIPT).findings
    assert {"DDP301", "DDP501"} <= _rules(dist)


def test_an_edit_that_makes_the_module_distributed_runs_every_rule_again() -> None:
    doc = Document(SCRIPT)
    assert _rules(analyze(doc).findings) == {"DDP301"}
    doc.apply_edit(Pos(0, 0), Pos(0, 0), "import torch.distributed as dist\n")
    after = _rules(analyze(doc).findings)
    assert after == _rules(analyze(doc.text).findings)
    assert "DDP501" in after
    doc.apply_edit(Pos(0, 0), Pos(1, 0), "")
    assert _rules(analyze(doc).findings) == {"DDP301"}
