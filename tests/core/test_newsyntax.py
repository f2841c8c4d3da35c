"""Half-typed f-strings are decided without libcst (core/newsyntax.py), never wrongly."""

from __future__ import annotations

import ast
import sys
import warnings
from typing import Any

import libcst
import pytest

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.newsyntax import NEWER_MARKERS, newer_grammar_rejects
from ddp_lsp.core.types import Pos

# Statements typed key by key: what people type, and f-strings valid only in Python 3.12+
# (quotes reused, comments and line breaks in a replacement field), so that some prefixes parse
# in a newer grammar.
TYPED = (
    'print(f"step {step} loss {loss.item():.4f}")',
    'x = f"{d["k"]} and {x!r:>{w}} {y=}"',
    "msg = f'{a}' f\"{b:{c}}\" 'plain' rf'\\d{x}'",
    'log(f"""multi {x}\nline {y!s}""")',
    'z = f"{", ".join([\n    "a",  # comment\n    "b",\n])}"',
    'w = f"{x:{\'>\'}{10}}" if x else t"{y}"',
    'v = f"{a["b"]["c"]:>10}" + f"{{literal}}"',
    'u = (f"a" "b"\n     f"{c}")',
    "s = f'{x!r}' == f\"{y!a}\"",
    'q = f"{x:{y}.{z}f}"',
    'p = f"{1 if x else 2}" + F"{x}" + Rf"{x}\\n"',
    # Strings next to each other with no space (a `""` for each f-string must not fuse them).
    'x = f"{d["k"]}"""',
    'x = ""f"{d["k"]}"',
    'y = t"{name}"""',
    'assert f"{a["b"]["c"]:>10}" != ""f"{msg!r:^{n}}"',
    # `type` aliases not at a line's start.
    "if TYPE_CHECKING: type Alias = list[int]",
    'x = 1; type Alias = int; print(f"{x}")',
    'def f(): type X = int; log(f"{X}")',
)
WRAPS = (
    "def f():\n    x = 1\n    {}\n    return x\n",
    "{}\n",
    "if 1:\n    def g(self):\n        {}\n        y = 2\n",
)


def _broken_prefixes() -> list[str]:
    out = []
    for stmt in TYPED:
        for k in range(1, len(stmt) + 1):
            for wrap in WRAPS:
                indent = wrap.split("{}")[0].rsplit("\n", 1)[-1]
                src = wrap.format(stmt[:k].replace("\n", "\n" + indent))
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ast.parse(src)
                except SyntaxError:
                    out.append(src)
    return out


def _libcst_accepts(src: str) -> bool:
    try:
        libcst.parse_module(src)
    except Exception:
        return False
    return True


def test_rejected_only_where_libcst_rejects_too() -> None:
    broken = _broken_prefixes()
    decided = [src for src in broken if newer_grammar_rejects(src)]
    assert [src for src in decided if _libcst_accepts(src)] == []
    # Most half-typed prefixes are decided here (the rest: libcst is asked, as before).
    assert len(decided) > 0.8 * len(broken)


@pytest.mark.parametrize(
    "stmt",
    [
        'x = f"{d["k"]}"',
        'x = f"{a!r:>{w}}" + f"{b # c\n}"',
        'x = f"{", ".join([\n    "a",\n])}"',
    ],
)
def test_valid_in_a_newer_python_is_left_to_libcst(stmt: str) -> None:
    src = f"def f():\n    {stmt}\n"
    assert not newer_grammar_rejects(src)


@pytest.mark.parametrize(
    "src",
    [
        "type X = int\nprint(f'{x\n",  # other newer constructs: libcst decides
        "def f[T](x: T):\n    print(f'{x\n",
        "try:\n    pass\nexcept A, B:\n    print(f'{x\n",
        'x = f"{a}" = 1\n',  # not the grammar's error: libcst does not check targets
    ],
)
def test_chunks_with_other_newer_constructs_are_left_to_libcst(src: str) -> None:
    assert not newer_grammar_rejects(src)


def test_typing_an_f_string_asks_libcst_nothing(monkeypatch: Any) -> None:
    calls: list[str] = []

    def parse_module(src: str, *args: Any, **kwargs: Any) -> None:
        calls.append(src)
        raise SyntaxError("asked")

    monkeypatch.setattr(libcst, "parse_module", parse_module)
    # The lines after the half-typed one are read as its replacement field's code: a ':' there
    # starts a format spec, which the quote of the call's string ends.
    text = (
        "import torch\n\n\ndef train(step, loss):\n    x = 1\n"
        '    for batch in loader:\n        log("batch")\n    return x\n'
    )
    doc = Document(text)
    stmt = 'print(f"step {step} loss {loss.item():.4f}")'
    doc.apply_edit(Pos(4, 9), Pos(4, 9), "\n    ")
    for k, ch in enumerate(stmt):
        doc.apply_edit(Pos(5, 4 + k), Pos(5, 4 + k), ch)
    assert doc.lines[5] == "    " + stmt + "\n"
    assert calls == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="no newer grammar to meet here")
def test_adjacent_f_strings_and_inline_aliases_are_skipped_not_errors() -> None:
    # Valid 3.12 code: said to be not analysed (as before core/newsyntax.py), never DDP000.
    src = (
        "import torch\n\n\ndef report(stats, width):\n"
        '    return f"{stats["loss"]:>{width}}"f" ({stats["step"]})"\n\n\n'
        "if TYPE_CHECKING: type Alias = list[int]\n"
    )
    result = analyze(src)
    assert [(n.line, n.end_line) for n in result.not_analysed] == [(3, 4), (7, 7)]
    assert [f.code for f in result.findings if f.code == "DDP000"] == []


@pytest.mark.parametrize(
    "stmt", ["if TYPE_CHECKING: type Alias = list[int]", "x = 1; type A = int", "type\\\n  A = 1"]
)
def test_the_markers_see_aliases_anywhere(stmt: str) -> None:
    assert NEWER_MARKERS.search(stmt) and not newer_grammar_rejects(stmt + "\nprint(f'{x\n")
