"""The text-edit builders of ``ddp_lsp.core.edits``: each keeps the code's layout (one argument
per line, trailing commas, comments, multi-line strings) and gives code that parses."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core.document import Document
from ddp_lsp.core.facts import ModuleFacts
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Edit


def _ctx(code: str) -> tuple[ChunkContext, ast.Module]:
    """The context of a text that is one chunk (one statement or one function)."""
    [(start, chunk)] = Document(code, RankModel()).chunks()
    assert start == 0 and chunk.tree is not None
    return ChunkContext(chunk, ModuleFacts(), Settings(), RankModel()), chunk.tree


def _call(tree: ast.AST, name: str) -> ast.Call:
    return next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == name
    )


def _stmt(tree: ast.Module, text: str, ctx: ChunkContext) -> ast.stmt:
    return next(
        s
        for s in ast.walk(tree)
        if isinstance(s, ast.stmt) and chunktext.segment(ctx.chunk, s) == text
    )


def _apply(code: str, edits: list[Edit] | tuple[Edit, ...]) -> str:
    out = apply_edits(code, edits)
    ast.parse(out)
    return out


ADD = [
    ("f(a)\n", "f(a, x=1)\n"),
    ("f(a, b=2)  # keep\n", "f(a, b=2, x=1)  # keep\n"),
    ("f(\n    a,\n    b=2,\n)\n", "f(\n    a,\n    b=2,\n    x=1,\n)\n"),
    ("f(\n    a,\n    b=2  # two\n)\n", "f(\n    a,\n    b=2,  # two\n    x=1\n)\n"),
]


@pytest.mark.parametrize(("code", "want"), ADD)
def test_add_argument_keeps_the_layout(code: str, want: str) -> None:
    ctx, tree = _ctx(code)
    assert _apply(code, text_edits.add_argument(ctx, _call(tree, "f"), "x=1")) == want


def test_add_argument_to_a_call_without_arguments_is_no_edit() -> None:
    ctx, tree = _ctx("f()\n")
    assert text_edits.add_argument(ctx, _call(tree, "f"), "x=1") == []


REMOVE = [
    ("f(a, x=1)\n", "f(a)\n"),
    ("f(x=1, a=2)\n", "f(a=2)\n"),
    ("f(x=1)\n", "f()\n"),
    ("f(\n    a,\n    x=1,  # why\n    b=2,\n)\n", "f(\n    a,\n    # why\n    b=2,\n)\n"),
    ("f(\n    a,\n    x=1,\n)\n", "f(\n    a,\n)\n"),
    ("f(a,\n  x=1)\n", "f(a)\n"),
]


@pytest.mark.parametrize(("code", "want"), REMOVE)
def test_remove_argument_takes_its_comma_and_keeps_comments(code: str, want: str) -> None:
    ctx, tree = _ctx(code)
    call = _call(tree, "f")
    x = next(k for k in call.keywords if k.arg == "x")
    assert _apply(code, text_edits.remove_argument(ctx, call, x)) == want


def test_insert_after_the_last_line_without_a_newline() -> None:
    code = "def f():\n    a = 1\n    b = 2"
    ctx, tree = _ctx(code)
    stmt = _stmt(tree, "b = 2", ctx)
    assert _apply(code, [text_edits.insert_after(ctx, stmt, "c = 3")]) == code + "\n    c = 3"
    stmt = _stmt(tree, "a = 1", ctx)
    assert _apply(code, [text_edits.insert_after(ctx, stmt, "c = 3")]) == (
        "def f():\n    a = 1\n    c = 3\n    b = 2"
    )


def test_insert_before_and_delete_a_statement() -> None:
    code = "def f():\n    a = 1  # one\n    b = 2\n"
    ctx, tree = _ctx(code)
    a, b = _stmt(tree, "a = 1", ctx), _stmt(tree, "b = 2", ctx)
    moved = _apply(
        code, [text_edits.insert_before(ctx, a, "b = 2"), text_edits.delete_stmt(ctx, b)]
    )
    assert moved == "def f():\n    b = 2\n    a = 1  # one\n"


def test_insert_after_a_node_and_replace_a_node() -> None:
    code = "x = torch.load(path)\n"
    ctx, tree = _ctx(code)
    call = _call(tree, "load")
    edits = [
        text_edits.insert_after_node(ctx, call.args[0], ', map_location="cpu"'),
        text_edits.replace_node(ctx, call.func, "torch.jit.load"),
    ]
    assert _apply(code, edits) == 'x = torch.jit.load(path, map_location="cpu")\n'


def test_wrap_block_indents_the_body_and_keeps_strings_and_continuations() -> None:
    code = 'def f(rank):\n    save(a,\n  b)\n    doc = """\ntext\n"""\n    done()\n'
    ctx, tree = _ctx(code)
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    out = _apply(code, text_edits.wrap_block(ctx, fn.body, "flag = rank == 0\nif flag:"))
    assert out == (
        "def f(rank):\n"
        "    flag = rank == 0\n"
        "    if flag:\n"
        "        save(a,\n"
        "  b)\n"
        '        doc = """\n'
        "text\n"
        '"""\n'
        "        done()\n"
    )
