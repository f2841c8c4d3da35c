"""The project index parses a large file in pieces and gets ``ast.parse``'s tree.

``parse_module`` exists for memory (the parser of one piece, not of the whole file, at its
peak: docs/performance.md, "Memory"); these tests check that the pieces really are parsed
apart, and that nothing else changes: the same nodes at the same lines and columns, the same
error for code that does not parse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.gen import module
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.project import summary, wholeparse
from ddp_lsp.project.wholeparse import parse_module

REPO = Path(__file__).resolve().parents[2]

TRICKY = [
    # decorators, a class split at its methods by the core's chunker, nested defs
    "import os\n\n@dec(1)\n@other\ndef f(x):\n    def g():\n        return x\n    return g\n",
    "class C(Base):\n    '''doc'''\n    a = 1\n\n    def m(self):\n        return 1\n\n"
    "    @property\n    def p(self):\n        return 2\n\nx = C()\n",
    # compound statements with continuations at column 0
    "if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\ntry:\n    x = 1\nexcept E:\n"
    "    pass\nfinally:\n    y = 2\n",
    # brackets, backslashes and strings spanning lines, comments at column 0 inside bodies
    "x = [\n1,\n# c\n2,\n]\ny = 1 + \\\n    2\ns = '''\ndef not_code():\n'''\n"
    "def f():\n    a = 1\n# a comment at column 0\n    return a\n",
    # CRLF and CR line endings, a form feed, non-ASCII text before columns
    "a = 'é'; b = 1\r\ndef f():\r\n    return 'ü' + a\r\n\x0cc = 3\rd = 4\n",
    # match statements, async, walrus, f-strings with nested quotes
    "match p:\n    case [x, *_]:\n        pass\n    case _:\n        pass\n"
    "async def h():\n    async with a as b:\n        if (n := len(b)) > 1:\n"
    "            return f\"{b['k']!r:>{n}}\"\n",
    # no trailing newline, blank lines only between statements
    "x = 1\n\n\n\ny = 2",
    "",
]

BROKEN = [
    "def f():\n    return (1,\n\ndef g():\n    pass\n",  # never closed, the core resyncs at def
    "x = 1\ndef f(:\n    pass\ny = 2\n",
    "  x = 1\n",  # unexpected indent
    "def f():\n\tif a:\n        pass\n\t    return 1\n",  # inconsistent tabs
    "x = 'a\0b'\n",  # a NUL byte: ValueError
]


def dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=True)


@pytest.mark.parametrize("text", TRICKY)
def test_pieces_give_ast_parse_s_tree(text: str) -> None:
    assert dump(parse_module(text, min_chars=0)) == dump(ast.parse(text))


def test_pieces_give_ast_parse_s_tree_for_the_repository_s_own_code() -> None:
    files = sorted((REPO / "ddp_lsp").rglob("*.py"))
    assert len(files) > 100
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert dump(parse_module(text, min_chars=0)) == dump(ast.parse(text)), path


def _error(parse: object, text: str) -> tuple[type, str, int | None, int | None]:
    with pytest.raises((SyntaxError, ValueError)) as info:
        parse(text)  # type: ignore[operator]
    e = info.value
    return (type(e), str(e), getattr(e, "lineno", None), getattr(e, "offset", None))


@pytest.mark.parametrize("text", BROKEN)
def test_code_that_does_not_parse_raises_ast_parse_s_error(text: str) -> None:
    assert _error(lambda t: parse_module(t, min_chars=0), text) == _error(ast.parse, text)


def test_future_imports_change_nothing_ast_parse_reads() -> None:
    # `barry_as_FLUFL` makes `<>` the inequality in compile(), not in ast.parse: a piece
    # parsed after the import reads exactly what the whole file's parse reads.
    for text in (
        "from __future__ import barry_as_FLUFL\n\ndef f(a, b):\n    return a != b\n",
        "from __future__ import barry_as_FLUFL\n\ndef f(a, b):\n    return a <> b\n",
    ):
        try:
            expected = dump(ast.parse(text))
        except SyntaxError:
            assert _error(lambda t: parse_module(t, min_chars=0), text) == _error(ast.parse, text)
        else:
            assert dump(parse_module(text, min_chars=0)) == expected


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    real = ast.parse

    def parse(source: str, *args: object, **kwargs: object) -> ast.Module:
        sizes.append(len(source))
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(wholeparse.ast, "parse", parse)
    return sizes


def test_a_large_file_is_summarised_without_parsing_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = module(8000)
    assert len(text) >= wholeparse.PIECES_MIN_CHARS
    whole = summary.summarise("big.py", text, "d", RankModel())
    sizes = _spy(monkeypatch)
    pieces = summary.summarise("big.py", text, "d", RankModel())
    assert len(sizes) > 100
    # Each piece is preceded by its line count of newlines: what the parser holds is the
    # piece's code, never the file's.
    assert max(sizes) < len(text) // 2
    assert pieces == whole


def test_a_small_file_is_parsed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    text = module(300)
    sizes = _spy(monkeypatch)
    parse_module(text)
    assert sizes == [len(text)]


def test_a_large_file_that_does_not_parse_is_parsed_whole_for_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = module(8000)
    lines = text.splitlines(keepends=True)
    lines[len(lines) // 2] = "def broken(:\n"
    bad = "".join(lines)
    sizes = _spy(monkeypatch)
    with pytest.raises(SyntaxError) as info:
        parse_module(bad)
    assert sizes[-1] == len(bad)
    assert info.value.lineno == len(lines) // 2 + 1
