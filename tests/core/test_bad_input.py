"""Bad input gets a clear result and never a traceback; the rest of the file is analysed."""

from __future__ import annotations

import time

from ddp_lsp.config import Settings
from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.types import Pos

S = Settings()
BUGGY = '''import torch
import torch.distributed as dist

def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
'''


def ids(text: str) -> list[str]:
    return [f.rule_id for f in analyze(text, S).findings]


def test_invalid_python_reports_ddp000_and_keeps_other_chunks() -> None:
    text = BUGGY + "\ndef broken(:\n    pass\n"
    result = analyze(text, S).findings
    errors = [f for f in result if f.rule_id == "DDP000"]
    assert len(errors) == 1
    assert errors[0].span.start.line == BUGGY.count("\n") + 1
    assert "syntax error" in errors[0].message
    assert "DDP201" in [f.rule_id for f in result]


def test_unclosed_bracket_does_not_swallow_the_following_functions() -> None:
    text = "import torch\nimport torch.distributed as dist\n\ndef half(:\n    x = (1,\n\n" + BUGGY.split("\n", 2)[2]
    found = ids(text)
    assert found.count("DDP000") == 1
    assert "DDP201" in found


def test_nul_bytes() -> None:
    text = BUGGY + "\nx = 1\x00\n"
    result = analyze(text, S).findings
    assert any(f.rule_id == "DDP000" and "NUL" in f.message for f in result)
    assert any(f.rule_id == "DDP201" for f in result)


def test_deeply_nested_parentheses() -> None:
    text = BUGGY + "\nx = " + "(" * 2000 + "1" + ")" * 2000 + "\n"
    result = analyze(text, S).findings
    assert [f.rule_id for f in result].count("DDP000") == 1
    assert any(f.rule_id == "DDP201" for f in result)


def test_five_megabyte_file() -> None:
    filler = "".join(
        f"def step_{i}(model, batch, optimizer):\n"
        f"    loss = model(batch['inputs_{i}']).float().mean() * {i}\n"
        f"    return loss.detach().cpu().item()  # step {i} of a long generated file\n\n"
        for i in range(32_000)
    )
    text = BUGGY + filler
    assert len(text) > 5_000_000
    t = time.perf_counter()
    found = ids(text)
    assert "DDP201" in found
    assert time.perf_counter() - t < 60  # a sanity bound, not a benchmark


def test_crlf_positions_and_fix_newlines() -> None:
    text = BUGGY.replace("\n", "\r\n")
    result = analyze(text, S).findings
    lf = analyze(BUGGY, S).findings
    assert [(f.rule_id, f.span) for f in result] == [(f.rule_id, f.span) for f in lf]
    fix = next(f for f in result if f.rule_id == "DDP201").fixes[0]
    assert all("\n" not in e.text.replace("\r\n", "") for e in fix.edits)
    assert any("\r\n" in e.text for e in fix.edits)


def test_newer_python_syntax_is_not_a_syntax_error() -> None:
    text = BUGGY + "\ntype Alias = list[int]\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n"
    found = ids(text)
    assert "DDP000" not in found
    assert "DDP201" in found


def test_non_ascii_columns_are_code_points() -> None:
    text = BUGGY.replace(
        "        torch.nn.utils.clip_grad_norm_",
        "        note = '梯度😀'; torch.nn.utils.clip_grad_norm_",
    )
    f = next(f for f in analyze(text, S).findings if f.rule_id == "DDP201")
    line = text.splitlines()[f.span.start.line]
    assert line[f.span.start.col :].startswith("torch.nn.utils.clip_grad_norm_")


def test_out_of_range_edits_are_clamped() -> None:
    doc = Document(BUGGY)
    doc.apply_edit(Pos(500, 3), Pos(900, 0), "\n# tail\n")
    assert doc.text == BUGGY + "\n# tail\n"
    doc.apply_edit(Pos(0, 500), Pos(0, 900), "  # head")
    assert doc.text.splitlines()[0] == "import torch  # head"
    doc.apply_edit(Pos(-4, -1), Pos(0, 0), "")
    assert analyze(doc, S).findings == analyze(doc.text, S).findings
