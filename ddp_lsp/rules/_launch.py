"""Does a fix keep every launch of the program working?

A script usually runs both ways: under a launcher with DDP, AMP and a process group, and as a
single process on one GPU (`python train.py`), where the model is a plain module
(`if args.distributed: model = DDP(model)`), the scaler may be `None`
(`if args.amp: scaler.scale(loss).backward() else: loss.backward()`), and no group exists. A
fix marked safe must not call a DDP-only method (`no_sync`, `.module`) on a model that is DDP
on some launches only, nor a scaler method where the scaler may not exist. These helpers answer
those questions for the rules' fixes from the module facts (``ModuleFacts.sometimes``) and the
shape of the code.
"""

from __future__ import annotations

import ast

from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import ChunkContext


def kind_on_every_launch(ctx: ChunkContext, expr: ast.AST, at: ast.AST) -> bool:
    """``expr`` (``model``, ``self.model``) holds its kind (DDP, a scaler...) at ``at`` on every
    launch: not wrapped only under an ``if`` over a plain value, and not passed a plain value
    by some caller (in this file or another)."""
    path = path_of(expr)
    if path is None:
        return False
    scope, cls = ctx.scope(at)
    return ctx.facts.kind_on_every_launch(path, scope, cls)


def branch_apart(ctx: ChunkContext, node: ast.AST, at: ast.AST) -> ast.If | None:
    """The outermost ``if`` that holds ``node`` in one of its branches but not ``at``: on the
    launches that take the other branch, what ``node`` does (``scaler.scale(loss).backward()``)
    does not happen before ``at``. None when every ``if`` around ``node`` also holds ``at``."""
    around_at = {id(a) for a in ctx.ancestors(at)}
    found: ast.If | None = None
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if id(a) in around_at:
            break
        if isinstance(a, ast.If) and child is not a.test:
            found = a
        child = a
    return found


def in_body(branch: ast.If, node: ast.AST) -> bool:
    """``node`` sits in the ``if`` branch of ``branch`` (not its ``else``)."""
    return any(n is node for s in branch.body for n in ast.walk(s))


def plain_test(test: ast.expr) -> bool:
    """A branch condition that can be evaluated again without effects: names, attributes,
    constants, comparisons and boolean operators over them (``scaler is not None``,
    ``args.amp``, ``use_amp and not args.bf16``); no calls, subscripts or walrus."""
    for n in ast.walk(test):
        if not isinstance(
            n,
            ast.Name
            | ast.Attribute
            | ast.Constant
            | ast.Compare
            | ast.BoolOp
            | ast.UnaryOp
            | ast.Load
            | ast.cmpop
            | ast.boolop
            | ast.unaryop,
        ):
            return False
    return True
