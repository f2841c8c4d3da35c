"""Logging, the statements DDP502 wants on rank 0: ``print``, ``logging.info``,
``<logger>.info``, and whether a message names its process (then every rank logs on purpose).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _patterns as patterns

_LOGGER_NAME = re.compile(r"^_*(logger|log|logging|lgr)$", re.IGNORECASE)

# Names that identify the process in a message (the rank itself is checked through RankModel).
_PROCESS_TAGS = frozenset(
    {"gpu", "gpu_id", "device_id", "device", "local_device", "cuda_device", "pid"}
)

_TAG_TEXT = re.compile(r"rank|gpu|device", re.IGNORECASE)


def names_in(e: ast.AST) -> Iterator[str]:
    for n in tree_walk.bfs(e):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr


def log_call(ctx: ChunkContext, call: ast.Call) -> str | None:
    """``print``, ``logging.info`` or ``<logger>.info``; None for anything else."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "print" and "print" not in ctx.facts.aliases:
        for kw in call.keywords:
            if kw.arg == "file":
                target = chunktext.segment(ctx.chunk, kw.value)
                if target not in ("sys.stdout", "sys.stderr"):
                    return None
        return "print"
    if not isinstance(func, ast.Attribute) or func.attr != "info":
        return None
    qual = ctx.call_qualname(call)
    if qual == "logging.info":
        return "logging.info"
    receiver = func.value
    if isinstance(receiver, ast.Call):
        if ctx.call_qualname(receiver) == "logging.getLogger":
            return chunktext.segment(ctx.chunk, func)
        return None
    name = patterns.last_name(receiver)
    if name is None or not _LOGGER_NAME.match(name):
        return None
    if not any(q == "logging" or q.startswith("logging.") for q in ctx.facts.aliases.values()):
        # Not a standard-library logger made in this file (`import logging`, or
        # `from logging import getLogger`): its setup is unknown.
        return None
    rqual = ctx.qualname(receiver)
    if rqual is not None and not rqual.startswith("logging"):
        return None  # a logger object imported from a library (accelerate, lightning...)
    label = chunktext.segment(ctx.chunk, func)
    return label if "\n" not in label else "logger.info"


def names_process(ctx: ChunkContext, call: ast.Call) -> bool:
    """The message says which rank or GPU it comes from: per-rank on purpose."""
    for arg in [*call.args, *(kw.value for kw in call.keywords)]:
        if ctx.ranks.mentions_rank(arg):
            return True
        for n in tree_walk.bfs(arg):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and _TAG_TEXT.search(n.value)
            ):
                return True
        if any(name in _PROCESS_TAGS for name in names_in(arg)):
            return True
    return False
