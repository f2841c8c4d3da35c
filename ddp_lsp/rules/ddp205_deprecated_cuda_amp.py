"""DDP205 deprecated-cuda-amp.

## What it does
Finds calls of `torch.cuda.amp.autocast(...)` and `torch.cuda.amp.GradScaler(...)`, however
they are imported or aliased (`from torch.cuda.amp import autocast as amp_autocast`,
`from torch.cuda import amp`), and `from torch.cuda.amp import autocast, GradScaler` imports.

## Why is this bad?
Both are deprecated since PyTorch 2.4 in favour of the device-generic `torch.amp.autocast`
and `torch.amp.GradScaler`: calling them emits a `FutureWarning` on every rank (one copy per
process in the job's log), and deprecated APIs get removed. The replacements behave the same with
`"cuda"` as the device. The old `autocast` signature `(enabled, dtype, cache_enabled)` does
not line up with the new `(device_type, dtype, enabled, cache_enabled)`, so positional
arguments must become keywords when moving over.

## Example
```python
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()
with autocast(True, torch.bfloat16):
    loss = model(x)
```

## Use instead
```python
import torch

scaler = torch.amp.GradScaler("cuda")
with torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16):
    loss = model(x)
```

## Fix
Each call becomes `torch.amp.autocast("cuda", ...)` / `torch.amp.GradScaler("cuda", ...)`,
fully qualified (adding `import torch` when the module lacks it), with old positional
`autocast` arguments turned into keywords; the rest of the call (layout, comments) is kept.
The deprecated names in a `from torch.cuda.amp import ...` line are removed only once the
module no longer uses them, so applying any subset of the fixes leaves working code. No fix
for `autocast(*args)` (the positions cannot be mapped). The `GradScaler` rewrite is marked
unsafe (fix-all skips it) because `torch.amp.GradScaler` needs PyTorch 2.3 or newer.

## Known false positives
Version-compatibility code is left alone: deprecated names used in an `except ImportError:`
/ `except AttributeError:` fallback or under a condition on the PyTorch version or `hasattr`.
`torch.cuda.amp.custom_fwd` / `custom_bwd` and `torch.cpu.amp` are not covered.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/amp.html#torch.amp.autocast
- https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import (
    Edit,
    Finding,
    Fix,
    FixAvailability,
    Pos,
    RuleMeta,
    Severity,
    Tag,
)
from ddp_lsp.rules import _amp as amp

_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
_VERSIONISH = re.compile(r"version|torch\w*\d", re.IGNORECASE)


class DeprecatedCudaAmp(Rule):
    meta = RuleMeta(
        id="DDP205",
        name="deprecated-cuda-amp",
        severity=Severity.INFORMATION,
        summary="torch.cuda.amp.autocast / GradScaler are deprecated: use torch.amp with 'cuda'.",
        fix=FixAvailability.SOMETIMES,
        any_module=True,
        tags=(Tag.DEPRECATED,),
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            qual = ctx.call_qualname(call)
            if qual not in known_names.DEPRECATED_AMP or _compat_code(ctx, call):
                continue
            if _rebound_here(ctx, call):
                continue
            yield self._call_finding(ctx, call, qual)
        for imp in ctx.nodes(ast.ImportFrom):
            if imp.level or not imp.module or _compat_code(ctx, imp):
                continue
            for alias in imp.names:
                qual = known_names.canonical(f"{imp.module}.{alias.name}")
                if qual in known_names.DEPRECATED_AMP:
                    yield self._import_finding(ctx, imp, alias, qual)

    # -- calls ---------------------------------------------------------------------------------

    def _call_finding(self, ctx: ChunkContext, call: ast.Call, qual: str) -> Finding:
        attr = qual.rsplit(".", 1)[-1]
        torch_name, imports = _torch_spelling(ctx)
        new = f"{torch_name}.amp.{attr}"
        fixes: list[Fix] = []
        inserts = self._arg_inserts(ctx, call, attr)
        if inserts is not None:
            edits = [text_edits.replace_node(ctx, call.func, new)]
            edits.extend(text_edits.insert_at(p, text) for p, text in sorted(inserts.items()))
            fixes.append(
                Fix(
                    title=f'Use {new}("cuda", ...)',
                    edits=tuple(edits),
                    # torch.amp.GradScaler only exists from PyTorch 2.3 on (torch.amp.autocast
                    # since 1.10): not applied by fix-all, a project may still support 2.2.
                    safe=attr == "autocast",
                    preferred=True,
                    imports=imports,
                )
            )
        return ctx.finding(
            self,
            call.func,
            f'`{qual}(...)` is deprecated since PyTorch 2.4: use `torch.amp.{attr}("cuda", ...)`',
            fixes=fixes,
        )

    @staticmethod
    def _arg_inserts(ctx: ChunkContext, call: ast.Call, attr: str) -> dict[Pos, str] | None:
        """Text to insert per position: ``"cuda"`` first, keywords for old positionals."""
        inserts: dict[Pos, str] = {}
        args: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
        if attr == "autocast":
            if len(call.args) > len(_AUTOCAST_POSITIONAL):
                return None
            if any(isinstance(a, ast.Starred) for a in call.args):
                return None
            given = {k.arg for k in call.keywords}
            for name, arg in zip(_AUTOCAST_POSITIONAL, call.args, strict=False):
                if name in given:
                    return None  # already a TypeError; not ours to guess
                p = chunktext.pos(ctx.chunk, arg.lineno, arg.col_offset)
                inserts[p] = inserts.get(p, "") + f"{name}="
        if any(k.arg == "device_type" or k.arg == "device" for k in call.keywords):
            return None
        if args:
            first = min(args, key=lambda a: (a.lineno, a.col_offset))
            p = chunktext.pos(ctx.chunk, first.lineno, first.col_offset)
            inserts[p] = '"cuda", ' + inserts.get(p, "")
            return inserts
        end_line = call.func.end_lineno or call.func.lineno
        text = chunktext.line(ctx.chunk, end_line)
        col = call.func.end_col_offset or 0
        paren = text.find("(", col)
        if paren < 0 or text[col:paren].strip():
            return None
        p = chunktext.pos(ctx.chunk, end_line, paren + 1)
        return {p: '"cuda"'}

    # -- imports -------------------------------------------------------------------------------

    def _import_finding(
        self, ctx: ChunkContext, imp: ast.ImportFrom, alias: ast.alias, qual: str
    ) -> Finding:
        used = ctx.facts.names_used
        bound = alias.asname or alias.name
        fixes: list[Fix] = []
        if bound not in used:
            keep = [
                a
                for a in imp.names
                if known_names.canonical(f"{imp.module}.{a.name}") not in known_names.DEPRECATED_AMP
                or (a.asname or a.name) in used
            ]
            edit = self._import_edit(ctx, imp, keep)
            if edit is not None:
                fixes.append(
                    Fix(
                        title="Remove the unused deprecated torch.cuda.amp import",
                        edits=(edit,),
                        safe=True,
                        preferred=True,
                    )
                )
        attr = qual.rsplit(".", 1)[-1]
        if bound in used:
            hint = f'its uses should become `torch.amp.{attr}("cuda", ...)`'
        else:
            hint = "it is unused and can go"
        return ctx.finding(
            self,
            alias,
            f"`{qual}` is deprecated since PyTorch 2.4: {hint}",
            fixes=fixes,
        )

    @staticmethod
    def _import_edit(ctx: ChunkContext, imp: ast.ImportFrom, keep: list[ast.alias]) -> Edit | None:
        if not amp.owns_lines(ctx, imp):
            return None
        if not keep:
            if not amp.can_delete(ctx, imp):
                return None
            return text_edits.delete_stmt(ctx, imp)
        first, last = chunktext.stmt_lines(ctx.chunk, imp)
        if last > first and any("#" in ctx.chunk.lines[r] for r in range(first, last + 1)):
            return None  # comments inside a wrapped import: leave it to the user
        names = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in keep)
        return text_edits.replace_node(ctx, imp, f"from {imp.module} import {names}")


def _torch_spelling(ctx: ChunkContext) -> tuple[str, tuple[str, ...]]:
    """How the module spells ``torch`` (``import torch as th``), or ``torch`` plus the import."""
    aliases = ctx.facts.aliases
    if aliases.get("torch") == "torch":
        return "torch", ()
    for name, target in sorted(aliases.items()):
        if target == "torch":
            return name, ()
    return "torch", ("import torch",)


def _mentions_version(test: ast.AST) -> bool:
    for node in tree_walk.bfs(test):
        if isinstance(node, ast.Name) and (_VERSIONISH.search(node.id) or node.id == "hasattr"):
            return True
        if isinstance(node, ast.Attribute) and _VERSIONISH.search(node.attr):
            return True
    return False


def _compat_code(ctx: ChunkContext, node: ast.AST) -> bool:
    """Version-compatibility code: an ``except`` fallback, a branch on the torch version, or
    the code after ``if <new torch>: return ...``."""
    child: ast.AST = node
    for a in [node, *ctx.ancestors(node)]:
        if isinstance(a, ast.ExceptHandler):
            return True
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test and _mentions_version(a.test):
            return True
        if isinstance(a, ast.stmt) and _after_version_return(ctx, a):
            return True
        child = a
    return False


def _after_version_return(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    block, idx = ctx.block_of(stmt)
    for s in block[:idx]:
        if (
            isinstance(s, ast.If)
            and s.body
            and isinstance(s.body[-1], (ast.Return, ast.Raise))
            and _mentions_version(s.test)
        ):
            return True
    return False


def _rebound_here(ctx: ChunkContext, call: ast.Call) -> bool:
    """The called name is also imported in this chunk from somewhere that is not deprecated
    (``try: from torch.amp import GradScaler / except ImportError: from torch.cuda.amp ...``).

    Works around the module facts keeping the first binding they meet, which for a ``try``
    is the ``except`` branch's."""
    if not isinstance(call.func, ast.Name):
        return False
    name = call.func.id
    for imp in ctx.nodes(ast.Import, ast.ImportFrom):
        if not isinstance(imp, (ast.Import, ast.ImportFrom)):
            continue
        for bound, qual in known_names.import_bindings(imp):
            if bound == name and qual not in known_names.DEPRECATED_AMP:
                return True
    return False


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

DeprecatedCudaAmp.cases = (
    Valid(
        _HEAD
        + """\
scaler = torch.amp.GradScaler("cuda")

def train(model, x):
    with torch.amp.autocast("cuda", dtype=torch.bfloat16):
        return model(x)
""",
        note="the current API",
    ),
    Valid(
        _HEAD
        + """\
from torch import autocast
from torch.amp import GradScaler

scaler = GradScaler()

def train(model, x):
    with autocast(device_type="cuda"), torch.autocast("cuda", enabled=False):
        return model(x)
""",
        note="torch.autocast and torch.amp imports",
    ),
    Valid(
        _HEAD
        + """\
def make_scaler():
    try:
        from torch.amp import GradScaler
    except ImportError:
        from torch.cuda.amp import GradScaler
    return GradScaler()
""",
        note="a fallback import for old PyTorch versions",
    ),
    Valid(
        _HEAD
        + """\
from packaging import version

if version.parse(torch.__version__) >= version.parse("2.4"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()

def ctx():
    if hasattr(torch, "amp") and hasattr(torch.amp, "autocast"):
        return torch.amp.autocast("cuda")
    return torch.cuda.amp.autocast()
""",
        note="version-gated code",
    ),
    Valid(
        _HEAD
        + """\
from apex.amp import autocast

class GradScaler:
    pass

def train(model, x):
    scaler = GradScaler()
    with autocast():
        return model(x)
""",
        note="names that are not torch.cuda.amp's",
    ),
    Valid(
        _HEAD
        + """\
from torch.cuda.amp import custom_fwd

class MyFn(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x
""",
        note="other torch.cuda.amp names are out of scope",
    ),
    Invalid(
        _HEAD
        + """\
scaler = «torch.cuda.amp.GradScaler»(init_scale=2.0**14)

def train(model, x, use_amp):
    with «torch.cuda.amp.autocast»(use_amp, torch.bfloat16):  # mixed precision
        return model(x)
""",
        fixed=_HEAD
        + """\
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)

def train(model, x, use_amp):
    with torch.cuda.amp.autocast(use_amp, torch.bfloat16):  # mixed precision
        return model(x)
""",
        note="qualified spellings; the first finding's fix is checked here",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, x, use_amp):
    with «torch.cuda.amp.autocast»(
        use_amp,  # on/off
        torch.bfloat16,
    ):
        return model(x)
""",
        fixed=_HEAD
        + """\
def train(model, x, use_amp):
    with torch.amp.autocast(
        "cuda", enabled=use_amp,  # on/off
        dtype=torch.bfloat16,
    ):
        return model(x)
""",
        note="positional autocast args become keywords; layout and comments kept",
    ),
    Invalid(
        _HEAD
        + """\
from torch.cuda.amp import «autocast», «GradScaler»

scaler = «GradScaler»()
""",
        fixed=_HEAD
        + """\
from torch.cuda.amp import GradScaler

scaler = GradScaler()
""",
        note="the unused deprecated name goes; the used one stays until its call is fixed",
    ),
    Invalid(
        _HEAD.replace("import torch\n", "import torch as th\n")
        + """\
from torch.cuda import amp

def train(model, x):
    with «amp.autocast»():
        return model(x)
""",
        fixed=_HEAD.replace("import torch\n", "import torch as th\n")
        + """\
from torch.cuda import amp

def train(model, x):
    with th.amp.autocast("cuda"):
        return model(x)
""",
        note="the module imported under another name, torch imported as th",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, x, amp_args):
    with «torch.cuda.amp.autocast»(*amp_args):
        return model(x)
""",
        note="no fix: positions from *args cannot be mapped to keywords",
    ),
)
