"""rules/_amp.py's path helpers: which two calls never run in the same pass."""

from __future__ import annotations

import ast

from ddp_lsp.core.document import Document
from ddp_lsp.core.uniformity import document_uniformity
from ddp_lsp.rules import _amp as amp

SRC = """\
import torch.distributed as dist


def step(mode, scaler, opt, loss):
    match mode:
        case "a":
            scaler.step(opt)
        case "b":
            scaler.update()
        case _:
            scaler.step(opt)
            scaler.update()
    if loss:
        scaler.step(opt)
    else:
        scaler.update()
"""


def test_match_cases_and_if_branches_are_exclusive() -> None:
    [ctx] = [u.ctx for _, u in document_uniformity(Document(SRC)) if list(u.ctx.nodes(ast.Match))]
    calls = sorted(
        (n for n in ctx.nodes(ast.Call) if isinstance(n, ast.Call)), key=lambda c: c.lineno
    )
    step_a, update_b, step_default, update_default, step_if, update_else = calls
    assert amp.exclusive(ctx, step_a, update_b)  # two cases of one match
    assert amp.exclusive(ctx, step_a, update_default)
    assert not amp.exclusive(ctx, step_default, update_default)  # one case
    assert amp.exclusive(ctx, step_if, update_else)  # if / else
    assert not amp.exclusive(ctx, step_a, update_else)
