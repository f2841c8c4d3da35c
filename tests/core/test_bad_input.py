"""Bad input gets a clear result and never a traceback; the rest of the file is analysed."""

from __future__ import annotations

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos

S = Settings()
BUGGY = """import torch
import torch.distributed as dist

def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""


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
    text = (
        "import torch\nimport torch.distributed as dist\n\ndef half(:\n    x = (1,\n\n"
        + BUGGY.split("\n", 2)[2]
    )
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


def test_file_over_the_front_ends_size_limit() -> None:
    from ddp_lsp.sources import MAX_SOURCE_BYTES

    # 1,000 functions of 14 lines, 2.4 MB: the bytes are what the limit counts. (14,000
    # three-line functions made the same point in 56,000 lines, at 12 times the analysis's cost.)
    note = "x" * 200
    filler = "".join(
        f"def step_{i}(model, batch, optimizer):\n"
        f"    loss = model(batch['inputs_{i}']).float().mean() * {i}\n"
        + "".join(f"    # step {i}, note {j}: {note}\n" for j in range(10))
        + f"    return loss.detach().cpu().item()  # step {i} of a long generated file\n\n"
        for i in range(1_000)
    )
    text = BUGGY + filler
    assert len(text.encode()) > MAX_SOURCE_BYTES  # what the CLI and the server refuse to read
    assert "DDP201" in ids(text)  # the core has no size limit (the front ends do)


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


def _rules_found(text: str) -> set[str]:
    return {f.rule_id for f in analyze(text, S).findings}


def test_a_broken_statement_below_the_imports_keeps_the_module_aliases() -> None:
    """Typing the next statement under the imports must not silence the file: the import
    block is a chunk of its own, and the statements before an error in a run still count."""
    tail = "\n\ndef g(rank):\n    if rank == 0:\n        dist.barrier()\n"
    for broken in ("BATCH = 3 +", "from torch.utils.data import ", "x = 1\ny = (", "z = 1\x00"):
        text = "import torch.distributed as dist\nimport os\n" + broken + tail
        found = _rules_found(text)
        assert "DDP000" in found and "DDP103" in found, (broken, found)


def test_statements_before_an_error_in_the_same_run_keep_their_findings() -> None:
    text = (
        "import torch\nimport torch.distributed as dist\n\n"
        "rank = dist.get_rank()\nstate = torch.load('ckpt.pt')\nbroken = (\n"
    )
    found = _rules_found(text)
    assert "DDP000" in found and "DDP303" in found, found


def test_newer_syntax_next_to_the_imports_does_not_silence_the_file() -> None:
    text = (
        "import torch\nimport torch.distributed as dist\ntype Vec = list[float]\n\n"
        "def g(rank):\n    if rank == 0:\n        dist.barrier()\n"
    )
    found = _rules_found(text)
    assert found == {"DDP103"}, found


def test_example_script_keeps_its_findings_while_an_import_is_typed() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "train_buggy.py"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    last_import = max(
        i for i, line in enumerate(lines[:40]) if line.startswith(("import ", "from "))
    )
    typing = (
        "".join(lines[: last_import + 1])
        + "from torch.utils.data import \n"
        + "".join(lines[last_import + 1 :])
    )
    before = [f.rule_id for f in analyze(text, S).findings]
    during = [f.rule_id for f in analyze(typing, S).findings]
    assert during.count("DDP000") == 1
    assert sorted(r for r in during if r != "DDP000") == sorted(before)


def test_pep701_fstring_is_newer_syntax_not_an_error() -> None:
    text = BUGGY + '\n\ndef show(d):\n    print(f"{d["loss"]:.3f}")\n'
    found = ids(text)
    assert "DDP000" not in found and "DDP201" in found


def test_a_half_typed_statement_does_not_load_libcst() -> None:
    """Checking for a newer grammar costs libcst's import and a parse: only a statement with a
    newer construct in it (a `type` alias, PEP 701 f-string...) is worth asking about."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ddp_lsp.core.engine import analyze\n"
        f"found = analyze({(BUGGY + chr(10) + 'def f(x):' + chr(10) + '    with x.' + chr(10))!r})\n"
        "assert any(f.rule_id == 'DDP000' for f in found.findings)\n"
        "print('libcst' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
