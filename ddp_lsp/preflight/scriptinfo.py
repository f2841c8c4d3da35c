"""What a training script says about the job it starts, read statically for the preflight.

The preflight measures a machine; whether that machine can run *this* job depends on facts in
the code: the backend passed to ``init_process_group`` (NCCL on a host without a GPU is a job
that cannot start, not a gloo pass), the ranks ``mp.spawn(nprocs=...)`` starts, and the
DataLoader's ``num_workers`` / ``pin_memory`` / ``prefetch_factor`` (which size /dev/shm and the
pinned host buffers). The script is parsed with :mod:`ast`, never imported or run. Only values
that are literals (or names bound once to a literal, or an argparse ``--backend`` default) count
(the backend argument is read as DDP508 reads it, :mod:`ddp_lsp.core.pgbackend`);
anything decided at run time (``"nccl" if torch.cuda.is_available() else "gloo"``) is left to
the machine, as the job itself would. Stdlib only: the CLI and the language server call this.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

from ddp_lsp.core import pgbackend
from ddp_lsp.preflight.schema import BACKENDS, PreflightOptions

_BACKEND_FLAGS = ("backend", "dist_backend", "ddp_backend")
_SPAWNS = ("spawn", "start_processes")


@dataclass(frozen=True)
class ScriptFacts:
    """Facts of one script; ``None`` = the code does not fix it (the machine decides)."""

    backend: str | None = None
    backend_line: int | None = None
    backend_how: str = ""
    world_size: int | None = None
    world_size_line: int | None = None
    world_size_how: str = ""
    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    init_calls: int = 0

    def describe(self, name: str) -> list[str]:
        """One line per fact, for the CLI's header and the server's log."""
        out = []
        if self.backend is not None:
            out.append(
                f"backend {self.backend!r} ({name}:{self.backend_line}, {self.backend_how})"
                + ("" if self.backend in BACKENDS else "; not probed: the preflight runs nccl/gloo")
            )
        elif self.init_calls:
            out.append("backend chosen at run time (the machine decides)")
        if self.world_size is not None:
            out.append(
                f"{self.world_size} ranks ({name}:{self.world_size_line}, {self.world_size_how})"
            )
        loader = [
            f"{k}={v}"
            for k, v in (
                ("num_workers", self.num_workers),
                ("pin_memory", self.pin_memory),
                ("prefetch_factor", self.prefetch_factor),
            )
            if v is not None
        ]
        if loader:
            out.append("DataLoader " + ", ".join(loader))
        return out


def _func_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _arg(call: ast.Call, index: int, name: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if index < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[: index + 1]
    ):
        return call.args[index]
    return None


class _Reader:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        # Names bound exactly once in the file (any scope) to a literal: `backend = "nccl"`.
        bound: dict[str, list[ast.AST]] = {}
        self.parser_defaults: dict[str, tuple[object, int]] = {}  # flag -> (default, line)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    bound.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.Call) and _func_name(node) == "add_argument":
                self._parser_default(node)
        # A parameter of that name anywhere (`def setup(backend): ...`) is bound by its caller.
        params = {
            a.arg
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
        }
        self.bound = {k: v[0] for k, v in bound.items() if len(v) == 1 and k not in params}

    def _parser_default(self, call: ast.Call) -> None:
        flags = [
            a.value.lstrip("-").replace("-", "_")
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        dest = next((kw.value for kw in call.keywords if kw.arg == "dest"), None)
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            flags = [dest.value]
        default = next((kw.value for kw in call.keywords if kw.arg == "default"), None)
        if isinstance(default, ast.Constant):
            for flag in flags:
                self.parser_defaults[flag] = (default.value, call.lineno)

    def literal(self, node: ast.AST | None, depth: int = 0) -> object | None:
        if node is None or depth > 4:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.bound:
            return self.literal(self.bound[node.id], depth + 1)
        return None

    def backend(self, node: ast.AST, depth: int = 0) -> tuple[str, str] | None:
        """(backend, how) when the code fixes it; None when the run time decides."""
        if depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # "cuda:nccl,cpu:gloo" still needs NCCL to start on a CUDA tensor device.
            return pgbackend.literal_backend(node.value), (
                "a literal" if depth == 0 else "bound to a literal"
            )
        if isinstance(node, ast.Attribute) and node.attr.lower() in (*BACKENDS, "mpi", "ucc"):
            return node.attr.lower(), f"{_dotted(node) or node.attr}"
        if isinstance(node, ast.Name) and node.id in self.bound:
            return self.backend(self.bound[node.id], depth + 1)
        if isinstance(node, ast.Attribute) and node.attr in self.parser_defaults:
            if node.attr in _BACKEND_FLAGS or node.attr.endswith("backend"):
                default, line = self.parser_defaults[node.attr]
                if isinstance(default, str):
                    got = self.backend(ast.Constant(default), depth + 1)
                    if got is not None:
                        flag = node.attr.replace("_", "-")
                        return got[0], f"the --{flag} default, line {line}"
        return None


def read_script(source: str) -> ScriptFacts:
    """The job facts a script fixes; raises ``SyntaxError`` for text that is not Python."""
    tree = ast.parse(source)
    reader = _Reader(tree)
    facts = ScriptFacts()
    backends: list[tuple[str, int, str]] = []
    init_calls = 0
    spawn: tuple[int, int, str] | None = None
    init_world: tuple[int, int, str] | None = None
    workers: list[int] = []
    prefetch: list[int] = []
    pins: list[bool] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _func_name(node)
        if name == "init_process_group":
            init_calls += 1
            arg = pgbackend.backend_argument(node)
            got = reader.backend(arg) if arg is not None else None
            if got is not None:
                backends.append((got[0], node.lineno, got[1]))
            ws = reader.literal(_arg(node, 99, "world_size"))
            if isinstance(ws, int) and not isinstance(ws, bool) and init_world is None:
                init_world = (ws, node.lineno, "init_process_group(world_size=...)")
        elif name in _SPAWNS and any(kw.arg == "nprocs" for kw in node.keywords):
            # torch.multiprocessing.spawn(fn, args=(), nprocs=N): N ranks on this host.
            n = reader.literal(_arg(node, 99, "nprocs"))
            if isinstance(n, int) and not isinstance(n, bool) and spawn is None:
                spawn = (n, node.lineno, f"{_dotted(node.func)}(nprocs={n})")
        elif name == "DataLoader":
            w = reader.literal(_arg(node, 99, "num_workers"))
            if isinstance(w, int) and not isinstance(w, bool):
                workers.append(w)
            p = reader.literal(_arg(node, 99, "pin_memory"))
            if isinstance(p, bool):
                pins.append(p)
            f = reader.literal(_arg(node, 99, "prefetch_factor"))
            if isinstance(f, int) and not isinstance(f, bool):
                prefetch.append(f)
    facts = replace(facts, init_calls=init_calls)
    kinds = {b for b, _, _ in backends}
    # Every init call must agree; two different fixed backends means the run time picks one.
    if len(kinds) == 1 and len(backends) == init_calls:
        b, line, how = backends[0]
        facts = replace(facts, backend=b, backend_line=line, backend_how=how)
    ranks = spawn or init_world
    if ranks is not None and 1 <= ranks[0] <= 1024:
        facts = replace(
            facts, world_size=ranks[0], world_size_line=ranks[1], world_size_how=ranks[2]
        )
    return replace(
        facts,
        num_workers=max(workers) if workers else None,
        # Any loader that pins makes the job pin.
        pin_memory=(True if any(pins) else False) if pins else None,
        prefetch_factor=max(prefetch) if prefetch else None,
    )


def options_with_facts(
    options: PreflightOptions, facts: ScriptFacts, name: str
) -> PreflightOptions:
    """Fill what the user did not set from the script (an explicit option always wins)."""
    changes: dict[str, object] = {}
    if options.backend is None and facts.backend in BACKENDS:
        changes["backend"] = facts.backend
        changes["backend_source"] = f"{name}:{facts.backend_line}"
    if options.world_size is None and facts.world_size is not None:
        changes["world_size"] = facts.world_size
        changes["world_size_source"] = f"{name}:{facts.world_size_line}"
    for key in ("num_workers", "pin_memory", "prefetch_factor"):
        if getattr(options, key) is None and getattr(facts, key) is not None:
            changes[key] = getattr(facts, key)
    return replace(options, **changes) if changes else options  # type: ignore[arg-type]


def load_script(path: str) -> ScriptFacts:
    """:func:`read_script` for a file; ``ValueError`` with a clear message when it cannot be
    read or parsed."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ValueError(f"cannot read --script {path}: {reason}") from None
    try:
        return read_script(source)
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"--script {path} is not valid Python: {exc}") from None


def options_with_script(options: PreflightOptions, path: str) -> PreflightOptions:
    return options_with_facts(options, load_script(path), Path(path).name)
