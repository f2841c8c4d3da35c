"""Guarding a run of rank-0 statements at once: the logging and checkpoint writes right next to
a statement in its block (:func:`rank0_run`), wrapped in one ``if`` (:func:`guard_run_fix`).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.core.types import Fix
from ddp_lsp.rules import _patterns as patterns
from ddp_lsp.rules._guard import Condition, _memo, guard_fix
from ddp_lsp.rules._logcalls import log_call, names_process
from ddp_lsp.rules._writes import _is_open, checkpoint_write, collective_in, per_rank_path


def _is_log_stmt(ctx: ChunkContext, s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and log_call(ctx, s.value) is not None
        and not names_process(ctx, s.value)
    )


def _is_write_stmt(ctx: ChunkContext, s: ast.stmt) -> bool:
    """A statement that is one checkpoint write every rank makes to the same file."""
    call: ast.expr | None = None
    if isinstance(s, ast.Expr):
        call = s.value
    elif isinstance(s, (ast.With, ast.AsyncWith)):
        call = next((i.context_expr for i in s.items if _is_open(ctx, i.context_expr)), None)
    if not isinstance(call, ast.Call):
        return False
    write = checkpoint_write(ctx, call)
    if write is None or not write.fixable or (write.stmt or s) is not s:
        return False
    root = patterns.scope_root(ctx, s)
    if write.dest is not None and per_rank_path(ctx, write.dest, root):
        return False
    return collective_in(ctx, s) is None


def _block_of(ctx: ChunkContext, stmt: ast.stmt) -> tuple[list[ast.stmt], int]:
    """``ctx.block_of`` with each block's positions computed once."""
    parent = ctx.parent(stmt)
    blocks = _memo(ctx).setdefault("blocks", {})
    key = id(parent) if parent is not None else 0
    known = blocks.get(key)
    if known is None or known[0] is not parent:
        positions: dict[int, tuple[list[ast.stmt], int]] = {}
        seqs = (
            [ctx.body]
            if parent is None
            else [
                getattr(parent, name)
                for name in ("body", "orelse", "finalbody")
                if isinstance(getattr(parent, name, None), list)
            ]
        )
        for seq in seqs:
            for i, s in enumerate(seq):
                positions[id(s)] = (seq, i)
        known = blocks[key] = (parent, positions)
    return known[1].get(id(stmt)) or ctx.block_of(stmt)


def rank0_run(ctx: ChunkContext, stmt: ast.stmt) -> list[ast.stmt]:
    """``stmt`` and the statements right next to it in its block that belong under the same
    guard: logging and checkpoint writes (``print("saving"); torch.save(...)``), so that
    DDP501's and DDP502's fixes produce one ``if`` block, not one per line. Per-rank writes
    and rank-tagged messages stay outside."""
    memo = _memo(ctx)
    member = memo.setdefault("member", {})

    def is_member(s: ast.stmt) -> bool:
        known = member.get(id(s))
        if known is None:
            known = member[id(s)] = _is_log_stmt(ctx, s) or _is_write_stmt(ctx, s)
        return bool(known)

    if not is_member(stmt):
        return [stmt]
    block, idx = _block_of(ctx, stmt)
    lo = hi = idx
    while lo > 0 and is_member(block[lo - 1]):
        lo -= 1
    while hi + 1 < len(block) and is_member(block[hi + 1]):
        hi += 1
    return block[lo : hi + 1]


def guard_run_fix(ctx: ChunkContext, stmt: ast.stmt, cond: Condition, title: str) -> Fix | None:
    """:func:`guard_fix` for ``stmt``'s run, or for ``stmt`` alone where the run cannot be.

    Every statement of a run gets the same edits, computed once."""
    run = rank0_run(ctx, stmt)
    fixes = _memo(ctx).setdefault("run_fix", {})
    key = (id(run[0]), id(run[-1]), cond)
    if key not in fixes:
        fixes[key] = guard_fix(ctx, run, cond, title)
    fix = fixes[key]
    if fix is None and len(run) > 1:
        return guard_fix(ctx, [stmt], cond, title)
    return None if fix is None else replace(fix, title=title)
