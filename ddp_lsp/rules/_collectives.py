"""How DDP103 and DDP104 word a call that only some ranks reach.

The analysis itself is the core's: :mod:`ddp_lsp.core.uniformity` decides which ranks take
each condition, and :mod:`ddp_lsp.core.rankpaths` walks each frame for the two rank classes
and says which events (collectives, DDP forwards) some ranks never reach and why. This module
only turns a :class:`~ddp_lsp.core.rankpaths.Miss` (or a group of them that one divergence
point strands) into a message and related locations.
"""

from __future__ import annotations

import ast

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import Provenance
from ddp_lsp.core.rankpaths import NZ, Miss, Reason, Z
from ddp_lsp.core.rule import ChunkContext

# -- describing ranks and conditions ----------------------------------------------------------------


def short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_local(ctx: ChunkContext, node: ast.AST) -> bool:
    test = getattr(node, "test", node)
    return "local" in chunktext.segment(ctx.chunk, test).lower()


def ranks_text(cls: int, local: bool) -> str:
    if local:
        return "local rank 0 of each node" if cls == Z else "the other local ranks"
    return "rank 0" if cls == Z else "ranks 1..N-1"


def condition_text(ctx: ChunkContext, reason: Reason) -> str:
    """``if rank == 0:``, ``the else branch of if rank == 0:``, ``is_main and ...``."""
    node = reason.node if reason.kind in ("guard", "some") else reason.guard
    if isinstance(node, ast.If):
        head = f"if {short(chunktext.segment(ctx.chunk, node.test))}:"
        return f"the `else` branch of `{head}`" if reason.in_else else f"`{head}`"
    if isinstance(node, ast.IfExp):
        cond = short(chunktext.segment(ctx.chunk, node.test))
        return (
            f"`else` of `... if {cond} else ...`" if reason.in_else else f"`... if {cond} else ...`"
        )
    if node is not None:
        return f"`{short(chunktext.segment(ctx.chunk, node))}`"
    return "a rank condition"


def guard_span_node(reason: Reason) -> ast.AST | None:
    node = reason.node if reason.kind in ("guard", "some") else reason.guard
    if isinstance(node, (ast.If, ast.IfExp)):
        return node.test
    return node


_EXIT_WORDS = {
    "return": ("return", "returns"),
    "raise": ("raise", "raises"),
    "break": ("break out of the loop", "breaks out of the loop"),
    "continue": ("skip to the next iteration", "skips to the next iteration"),
    "exit": ("exit", "exits"),
}


def elsewhere_source(ctx: ChunkContext, miss: Miss) -> Provenance | None:
    """For a helper defined in another file: where it performs its collective."""
    node = miss.event.node
    if not miss.event.wild or not isinstance(node, ast.Call):
        return None
    return ctx.callee_source(node, fact_model.COLLECTIVE)


def explain(
    ctx: ChunkContext, miss: Miss, consequence: str
) -> tuple[str, list[tuple[ast.AST, str]]]:
    """The part of a message saying which ranks make the call and which skip it, and the
    places to point at (related information)."""
    r = miss.reason
    text = chunktext.segment(ctx.chunk, miss.event.node)
    call = (
        f"`{short(text)}`"
        if len(text) <= 40 and "\n" not in text
        else f"`{short(miss.event.display)}`"
    )
    if miss.event.wild:
        src = elsewhere_source(ctx, miss)
        call += f" (which reaches a collective: {src})" if src else " (which reaches a collective)"
    runner = r.runner
    if r.kind == "some":
        cond = short(chunktext.segment(ctx.chunk, r.node.test))  # type: ignore[attr-defined]
        return (
            f"{call} runs only on the ranks where `{cond}` {'does not hold' if r.in_else else 'holds'} "
            f"({condition_text(ctx, r)}); the other ranks never reach it and {consequence}",
            [(guard_span_node(r) or r.node, "the rank condition")],
        )
    assert runner is not None
    skipper = NZ if runner == Z else Z
    where = r.node if r.kind == "guard" else r.guard
    local = r.kind in ("guard", "exit") and where is not None and is_local(ctx, where)
    runs, skips = ranks_text(runner, local), ranks_text(skipper, local)
    plural = skips.startswith(("ranks", "the other"))
    if r.kind == "guard":
        verb = "never reach" if plural else "never reaches"
        return (
            f"{call} runs only on {runs} ({condition_text(ctx, r)}); {skips} {verb} it "
            f"and {consequence}",
            [(guard_span_node(r) or r.node, "the rank condition")],
        )
    if r.kind == "decorator":
        fn = ctx.enclosing_function(miss.event.node)
        name = fn.name if fn is not None else "this function"
        verb = "never reach" if plural else "never reaches"
        return (
            f"{call} runs only on {runs}: `{name}` is decorated with "
            f"`@{short(chunktext.segment(ctx.chunk, r.node))}`; {skips} {verb} it and {consequence}",
            [(r.node, "runs the function on rank 0 only")],
        )
    if r.kind == "caller":
        name = getattr(r.node, "name", "this function")
        return (
            f"{call} runs only on {runs}: `{name}` is only called under a rank-0 guard; "
            f"{skips} never reach it and {consequence}",
            [],
        )
    kind = "exit"
    exit_node = r.node
    if isinstance(exit_node, ast.Return):
        kind = "return"
    elif isinstance(exit_node, ast.Raise):
        kind = "raise"
    elif isinstance(exit_node, ast.Break):
        kind = "break"
    elif isinstance(exit_node, ast.Continue):
        kind = "continue"
    words = _EXIT_WORDS[kind][0 if plural else 1]
    cond = condition_text(ctx, r)
    exit_text = short(chunktext.segment(ctx.chunk, exit_node))
    related = [
        (guard_span_node(r) or exit_node, "the rank condition"),
        (exit_node, "the early exit"),
    ]
    runs_plural = runs.startswith(("ranks", "the other"))
    tail = ""
    if kind in ("raise", "exit"):
        tail = " (unless the launcher stops the whole job when that rank fails)"
    if r.loop:
        return (
            f"{skips} {'leave' if plural else 'leaves'} the loop around {call} at "
            f"`{exit_text}` under {cond}, while {runs} "
            f"{'keep iterating and call' if runs_plural else 'keeps iterating and calls'} it "
            f"alone, so {consequence}{tail}",
            related,
        )
    return (
        f"{skips} {words} at `{exit_text}` under {cond} and never reach{'' if plural else 'es'} "
        f"{call}; {runs} call{'' if runs_plural else 's'} it alone and {consequence}{tail}",
        related,
    )
