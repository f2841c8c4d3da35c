"""Frame.value_before: the one "value last assigned before here" of the rules and the
uniformity analysis, with the corner cases where the two used to answer differently."""

from __future__ import annotations

import ast
import textwrap

from ddp_lsp.core.frames import Frame


def _frame(src: str) -> tuple[Frame, ast.FunctionDef]:
    fn = ast.parse(textwrap.dedent(src)).body[0]
    assert isinstance(fn, ast.FunctionDef)
    return Frame(fn), fn


def _use(fn: ast.FunctionDef, name: str, nth: int = -1) -> ast.Name:
    uses = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
    ]
    uses.sort(key=lambda n: (n.lineno, n.col_offset))
    return uses[nth]


def _text(e: ast.expr | None) -> str | None:
    return None if e is None else ast.unparse(e)


def test_the_last_binding_before_the_use() -> None:
    frame, fn = _frame(
        """\
        def f(rank):
            x = rank
            y = 1
            x: int = rank + 1
            use(x)
            x = 0
        """
    )
    assert _text(frame.value_before("x", _use(fn, "x"))) == "rank + 1"
    assert frame.value_before("rank", _use(fn, "x")) is None  # a parameter: no assignment


def test_nested_frames_do_not_count() -> None:
    frame, fn = _frame(
        """\
        def f():
            def g():
                x = 2
            x = 1
            h = lambda: (x := 3)
            use(x)
        """
    )
    assert _text(frame.value_before("x", _use(fn, "x"))) == "1"


def test_a_walrus_inside_an_assignment_binds_first() -> None:
    """Python binds ``x`` to 1 while evaluating the value, then to the whole value: the last
    value is the outer one. (The guard helpers ordered by the value's start and the
    uniformity analysis by the binding's start: both answered ``1``.)"""
    frame, fn = _frame(
        """\
        def f(rank):
            x = (x := rank) + 1
            use(x)
        """
    )
    assert _text(frame.value_before("x", _use(fn, "x"))) == "(x := rank) + 1"


def test_a_sync_in_between_makes_the_value_unknown_only_when_asked() -> None:
    """After ``dist.broadcast(x, 0)`` every rank holds rank 0's ``x``: the value assigned no
    longer says what each rank holds (the uniformity analysis asks with the syncs). The
    expression assigned is still what the code wrote (the rules ask without them)."""
    frame, fn = _frame(
        """\
        def f(rank):
            x = torch.tensor(rank)
            dist.broadcast(x, 0)
            if x == 0:
                pass
        """
    )
    at = _use(fn, "x")
    sync = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "dist.broadcast"
    )
    assert _text(frame.value_before("x", at)) == "torch.tensor(rank)"
    assert frame.value_before("x", at, {"x": [sync]}) is None
    # A sync before the binding, or after the use, changes nothing.
    assert _text(frame.value_before("x", sync, {"x": [sync]})) == "torch.tensor(rank)"
