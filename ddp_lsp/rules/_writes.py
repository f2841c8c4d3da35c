"""Checkpoint writes, the statements DDP501 wants on rank 0: ``torch.save`` and friends,
``save_pretrained``, ``open(..., "w")`` of a checkpoint path, helpers that save; whether the
path is per rank (then every rank writes its own file), and collectives inside a write.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ddp_lsp.core import chunktext
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.crossfile import Provenance
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _patterns as patterns
from ddp_lsp.rules._guard import FUNCS, assigned_value

_CKPT_TEXT = re.compile(
    r"ckpt|checkpoint|weights|state_dict|\.pth?\b|\.bin\b|\.safetensors|\.tar\b", re.IGNORECASE
)
_CKPT_NAME = re.compile(r"ckpt|checkpoint|weights|state_dict", re.IGNORECASE)
_STREAM_NAME = re.compile(
    r"stream|buf|buffer|bytes_io|fileobj|file_obj|fobj|writer|transform_to|^fh$|^fp$", re.IGNORECASE
)
_STREAM_TYPE = re.compile(r"IO\b|IOBase|BytesIO|BinaryIO|BufferedWriter")
_RANK_WORD = re.compile(r"rank", re.IGNORECASE)
_RANK_NAME = re.compile(r"(^|_)(rank|ranks)(_|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Write:
    label: str  # "torch.save", "model.save_pretrained", "open"
    dest: ast.expr | None  # the path (or directory) written
    stmt: ast.stmt | None  # the statement to guard when not the call's own statement
    fixable: bool = True
    source: Provenance | None = None  # a helper in another file that performs the write


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def _with_of(ctx: ChunkContext, call: ast.Call) -> ast.With | ast.AsyncWith | None:
    parent = ctx.parent(call)
    if isinstance(parent, ast.withitem) and parent.context_expr is call:
        holder = ctx.parent(parent)
        if isinstance(holder, (ast.With, ast.AsyncWith)):
            return holder
    return None


def _open_handle(ctx: ChunkContext, name: str, at: ast.AST) -> ast.Call | None:
    """The ``open(...)`` call of an enclosing ``with open(...) as name``."""
    for a in ctx.ancestors(at):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v = item.optional_vars
                if isinstance(v, ast.Name) and v.id == name and _is_open(ctx, item.context_expr):
                    assert isinstance(item.context_expr, ast.Call)
                    return item.context_expr
        if isinstance(a, FUNCS):
            break
    return None


def _other_open_handle(ctx: ChunkContext, name: str, at: ast.AST) -> ast.expr | None:
    """The path of an enclosing ``with <fs>.open(path, ...) as name`` (a file-system
    wrapper's open: iopath's ``path_manager.open``, fsspec's ``fs.open``)."""
    for a in ctx.ancestors(at):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v, e = item.optional_vars, item.context_expr
                if (
                    isinstance(v, ast.Name)
                    and v.id == name
                    and isinstance(e, ast.Call)
                    and isinstance(e.func, ast.Attribute)
                    and e.func.attr == "open"
                    and e.args
                ):
                    return e.args[0]
        if isinstance(a, FUNCS):
            break
    return None


def _is_open(ctx: ChunkContext, e: ast.AST) -> bool:
    if not isinstance(e, ast.Call):
        return False
    if isinstance(e.func, ast.Name) and e.func.id == "open":
        return "open" not in ctx.facts.aliases
    return ctx.call_qualname(e) in ("io.open", "builtins.open")


def _write_mode(call: ast.Call) -> bool:
    mode = _arg(call, 1, "mode")
    return (
        isinstance(mode, ast.Constant)
        and isinstance(mode.value, str)
        and any(c in mode.value for c in "wax")
    )


def _is_buffer(ctx: ChunkContext, dest: ast.expr, root: ast.AST) -> bool:
    """``io.BytesIO()`` (inline or through a variable), a stream parameter (``stream:
    io.IOBase``) or a variable named like one: not a checkpoint path."""
    if _STREAM_NAME.search(patterns.last_name(dest) or ""):
        return True
    value: ast.AST | None = dest
    if isinstance(dest, ast.Name):
        value = assigned_value(ctx, dest.id, root, dest)
        fn = ctx.enclosing_function(dest)
        if fn is not None:
            for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
                if a.arg == dest.id and a.annotation is not None:
                    if _STREAM_TYPE.search(ast.unparse(a.annotation)):
                        return True
    return isinstance(value, ast.Call) and patterns.last_name(value) in ("BytesIO", "StringIO")


def _checkpointish(ctx: ChunkContext, path: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    for node in tree_walk.bfs(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _CKPT_TEXT.search(node.value):
                return True
        elif isinstance(node, ast.Name):
            if _CKPT_NAME.search(node.id):
                return True
            if depth < 2:
                value = assigned_value(ctx, node.id, root, node)
                if value is not None and _checkpointish(ctx, value, root, depth + 1):
                    return True
        elif isinstance(node, ast.Attribute) and _CKPT_NAME.search(node.attr):
            return True
    return False


# Temporary files and folders: a unique name in each process (`tempfile.mkdtemp()`), never the
# folder `gettempdir()` that every process shares.
_TEMP_MAKERS = frozenset(
    {"TemporaryDirectory", "NamedTemporaryFile", "mkdtemp", "mkstemp", "SpooledTemporaryFile"}
)


def _temp_made(ctx: ChunkContext, node: ast.AST, root: ast.AST) -> bool:
    """``node`` holds a temporary folder or file of this process: ``with TemporaryDirectory()
    as tmpdir`` around it, or ``tmpdir = tempfile.mkdtemp()`` before it."""
    if isinstance(node, ast.Call):
        return patterns.last_name(node) in _TEMP_MAKERS
    if not isinstance(node, ast.Name):
        return False
    for a in ctx.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v = item.optional_vars
                if isinstance(v, ast.Name) and v.id == node.id:
                    return _temp_made(ctx, item.context_expr, root)
        if isinstance(a, FUNCS):
            break
    value = assigned_value(ctx, node.id, root, node)
    return isinstance(value, ast.Call) and patterns.last_name(value) in _TEMP_MAKERS


def per_rank_path(ctx: ChunkContext, path: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    """The path names the rank (``f"ckpt_rank{rank}.pt"``): one file per rank, on purpose; or
    it lies in a temporary folder of this process (``with TemporaryDirectory() as tmpdir``:
    each process has its own, as for a hub upload staged on disk)."""
    if ctx.ranks.mentions_rank(path):
        return True
    if any(_temp_made(ctx, n, root) for n in tree_walk.bfs(path)):
        return True
    has_value = not isinstance(path, ast.Constant)
    for node in tree_walk.bfs(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if has_value and _RANK_WORD.search(node.value):
                return True
        elif isinstance(node, ast.Name):
            if _RANK_NAME.search(node.id):
                return True
            if depth < 2:
                value = assigned_value(ctx, node.id, root, node)
                if value is not None and per_rank_path(ctx, value, root, depth + 1):
                    return True
        elif isinstance(node, ast.Attribute) and _RANK_NAME.search(node.attr):
            return True
        elif isinstance(node, ast.Call) and _RANK_WORD.search(patterns.last_name(node) or ""):
            return True  # `f"{name}.{rankstr()}.pth"`: a function of the rank
        elif isinstance(node, ast.Call) and patterns.framework_call(
            ctx, node, framework_tables.Meaning.SAVES_PER_RANK
        ):
            return True  # a helper the tables (or the user) say names the file per rank
    return False


def collective_in(ctx: ChunkContext, stmt: ast.AST, callees: bool = True) -> str | None:
    """A call in ``stmt`` that every rank must make (so the statement cannot be guarded);
    ``callees``: also a project function that performs one (its properties)."""
    for node in [stmt, *patterns.walk_scope(stmt)]:
        if not isinstance(node, ast.Call):
            continue
        qual = ctx.call_qualname(node) or ""
        dotted = known_names.dotted(node.func)
        if qual in known_names.COLLECTIVES or qual.startswith("torch.distributed.checkpoint"):
            return chunktext.segment(ctx.chunk, node.func)
        if dotted is not None and fact_model.is_collective_call(
            dotted, ctx.facts.aliases, ctx.ranks.frameworks
        ):
            return chunktext.segment(ctx.chunk, node.func)
        if callees and fact_model.COLLECTIVE in ctx.callee_props(node):
            return chunktext.segment(ctx.chunk, node.func)
        if isinstance(node.func, ast.Attribute):
            if node.func.attr in ctx.ranks.frameworks.functions(
                framework_tables.Meaning.GATHERS_STATE
            ):
                return chunktext.segment(ctx.chunk, node.func)
            if (
                node.func.attr == "state_dict"
                and ctx.kind(node.func.value, node) == fact_model.FSDP
            ):
                return chunktext.segment(ctx.chunk, node.func)
    return None


def checkpoint_write(ctx: ChunkContext, call: ast.Call) -> Write | None:
    """The checkpoint write ``call`` performs, or None (reads, buffers, other calls)."""
    qual = ctx.call_qualname(call)
    # The frame holding the call is found only for the calls that need it (the rule asks
    # about every call of the chunk; few are writes).
    if qual == known_names.TORCH_SAVE:
        root = patterns.scope_root(ctx, call)
        dest = _arg(call, 1, "f")
        if dest is None and call.args and isinstance(call.args[0], ast.Starred):
            return Write("torch.save", call.args[0], None)  # `torch.save(*args, **kwargs)`
        if dest is None or _is_buffer(ctx, dest, root):
            return None
        if isinstance(dest, ast.Name):
            if _open_handle(ctx, dest.id, call) is not None:
                return None  # the `with open(...)` is the write (reported there)
            opened = _other_open_handle(ctx, dest.id, call)
            if opened is not None:  # `with path_manager.open(path, "wb") as f`: the path counts
                return Write("torch.save", opened, None)
            value = assigned_value(ctx, dest.id, root, dest)
            if _is_open(ctx, value) if value is not None else False:
                assert isinstance(value, ast.Call)
                # The file was opened (and truncated) on every rank already.
                return Write("torch.save", value.args[0] if value.args else None, None, False)
        return Write("torch.save", dest, None)
    writer = patterns.framework_call(ctx, call, framework_tables.Meaning.WRITES_CHECKPOINT)
    if writer is not None:  # safetensors' save_file, mmengine's save_checkpoint, yours
        keyword = ctx.ranks.frameworks.keyword(writer) or "f"
        return Write(chunktext.segment(ctx.chunk, call.func), _arg(call, 1, keyword), None)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "save_pretrained":
        if any(kw.arg == "is_main_process" for kw in call.keywords):
            return None
        label = chunktext.segment(ctx.chunk, call.func)
        if "\n" in label:
            label = "save_pretrained"
        return Write(label, _arg(call, 0, "save_directory"), None)
    if _is_open(ctx, call) and _write_mode(call):
        path = _arg(call, 0, "file")
        if path is None:
            return None
        with_stmt = _with_of(ctx, call)
        saved_into = with_stmt is not None and _saves_into(ctx, with_stmt)
        if not saved_into and not _checkpointish(ctx, path, patterns.scope_root(ctx, call)):
            return None
        mode = _arg(call, 1, "mode")
        label = f"open(..., {chunktext.segment(ctx.chunk, mode)})" if mode is not None else "open"
        return Write(label, path, with_stmt, with_stmt is not None)
    return _helper_write(ctx, call)


# A function so named that saves to the path its caller passes is a save helper: DDP501 reports
# its unguarded calls, not its own save (see ddp501's _pass_through_helper).
SAVE_HELPER_NAME = re.compile(r"save|checkpoint|ckpt|export|dump|serial", re.IGNORECASE)


def _helper_write(ctx: ChunkContext, call: ast.Call) -> Write | None:
    """A helper that saves to the path its caller passes, on every rank
    (``utils.save_checkpoint(state, path)``): its own save is not reported (the caller
    decides the rank), so this call is where the decision is missing."""
    props = ctx.callee_props(call)
    if fact_model.SAVES_CALLER_PATH not in props or fact_model.GUARDS_ITSELF in props:
        return None
    if fact_model.COLLECTIVE in props:
        return None  # every rank must call it: its own save is reported inside
    name = known_names.dotted(call.func) or ""
    if not SAVE_HELPER_NAME.search(name.rpartition(".")[2]):
        return None  # not a save helper by name: its own save is reported where it is
    source = ctx.callee_source(call, fact_model.SAVES_CALLER_PATH)  # None: a helper of this file
    # Which argument is the path is not known: any that names the rank makes the files per
    # rank, except what is clearly the saved object (a state dict, a dict of them).
    args = [
        a
        for a in (*call.args, *(kw.value for kw in call.keywords))
        if not isinstance(a, (ast.Dict, ast.List))
        and not (isinstance(a, ast.Call) and patterns.method_call(a, "state_dict") is not None)
    ]
    root = patterns.scope_root(ctx, call)
    if any(per_rank_path(ctx, a, root) for a in args):
        return None
    label = chunktext.segment(ctx.chunk, call.func)
    return Write(label if "\n" not in label else "the helper", None, None, source=source)


def _saves_into(ctx: ChunkContext, with_stmt: ast.With | ast.AsyncWith) -> bool:
    handles = {
        item.optional_vars.id
        for item in with_stmt.items
        if isinstance(item.optional_vars, ast.Name) and _is_open(ctx, item.context_expr)
    }
    for node in patterns.walk_scope(with_stmt):
        if isinstance(node, ast.Call) and ctx.call_qualname(node) == known_names.TORCH_SAVE:
            dest = _arg(node, 1, "f")
            if isinstance(dest, ast.Name) and dest.id in handles:
                return True
    return False
