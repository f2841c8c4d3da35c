"""Incremental analysis equals a fresh analysis of the same text, whatever the edits.

Random edit sequences (insertions, deletions, replacements, including edits that break the
syntax and later restore it) are applied to realistic training scripts through
``Document.apply_edit``; after every step the findings must equal those of a fresh
``analyze(text)``, and the document's text must equal the text edited as a plain string.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.gen import module
from ddp_lsp.config import Settings
from ddp_lsp.core.document import Document, split_lines
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import Invalid
from ddp_lsp.core.types import Pos
from tests.casekit import unmark

SETTINGS = Settings()
SCRIPTS = [module(120)] + [
    unmark(c.code).code for r in all_rules() for c in r.cases if isinstance(c, Invalid)
][:12]

# Fragments that matter to the splitter and the parser: brackets, quotes, newlines,
# decorators, new top-level defs, indentation, CRLF.
FRAGMENTS = st.sampled_from(
    [
        "", "x", "\n", "\r\n", "(", ")", "[", "]", "'", '"', '"""', "#", "\\\n", ":", "    ",
        "\t", "@decorator\n", "def f():\n    pass\n", "class C:\n    def m(self):\n        pass\n",
        "import torch.distributed as dist\n", "model = DDP(model)\n", "losses.append(loss)\n",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n", "é", "😀", "else:\n",
    ]
)


def _offset(lines: list[str], pos: Pos) -> int:
    line = min(pos.line, len(lines) - 1)
    body = len(lines[line].rstrip("\r\n"))
    return sum(len(x) for x in lines[:line]) + min(pos.col, body)


def _key(text: str | Document) -> list[tuple[object, ...]]:
    return [
        (f.rule_id, f.span, f.message, f.severity, f.fixes)
        for f in analyze(text, SETTINGS).findings
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(min_value=0, max_value=len(SCRIPTS) - 1))
def test_incremental_equals_full(data: st.DataObject, which: int) -> None:
    text = SCRIPTS[which]
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    for _ in range(data.draw(st.integers(min_value=1, max_value=10), label="edits")):
        lines = split_lines(text)
        l0 = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="line")
        c0 = data.draw(st.integers(min_value=0, max_value=len(lines[l0]) + 2), label="col")
        l1 = min(len(lines) - 1, l0 + data.draw(st.integers(0, 3), label="span"))
        c1 = data.draw(st.integers(min_value=0, max_value=len(lines[l1]) + 2), label="end col")
        frag = data.draw(FRAGMENTS, label="text")
        start, end = Pos(l0, c0), Pos(l1, c1)
        if end < start:
            start, end = end, start
        a, b = _offset(lines, start), _offset(lines, end)
        text = text[:a] + frag + text[b:]
        doc.apply_edit(start, end, frag)
        assert doc.text == text
        assert _key(doc) == _key(text)


def test_break_and_restore_keeps_other_findings() -> None:
    """A syntax error mid-typing costs only its own chunk's findings."""
    code = unmark(next(c.code for r in all_rules() if r.meta.id == "DDP201"
                       for c in r.cases if isinstance(c, Invalid))).code
    text = code + "\n\ndef later():\n    return 1\n"
    doc = Document(text, SETTINGS.rank_model)
    before = [f for f in analyze(doc, SETTINGS).findings if f.rule_id == "DDP201"]
    assert before
    last = doc.line_count - 2  # "    return 1"
    doc.apply_edit(Pos(last, 4), Pos(last, 4), "(")  # "    (return 1": broken
    during = analyze(doc, SETTINGS).findings
    assert [f.rule_id for f in during].count("DDP000") == 1
    assert [f for f in during if f.rule_id == "DDP201"] == before
    doc.apply_edit(Pos(last, 4), Pos(last, 5), "")
    assert analyze(doc, SETTINGS).findings == analyze(text, SETTINGS).findings
