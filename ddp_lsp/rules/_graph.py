"""Which values carry an autograd graph, for DDP301.

A small, flow-ordered value analysis over one function (or a chunk's module-level code).
Each expression is CARRY (certainly a tensor with autograd history: the value ``.backward()``
runs on, a model's forward output, a criterion's result, anything computed from them), CLEAN
(certainly not: ``.item()``, ``.detach()``, ``float(...)``, comparisons, ``argmax``, values
computed under ``torch.no_grad()``) or UNKNOWN. Rules report only CARRY: precision first.

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state.
"""

from __future__ import annotations

import ast
import copy
import enum
import re

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import LOOPS, ChunkContext
from ddp_lsp.rules import _patterns as patterns


class Taint(enum.Enum):
    CARRY = "carry"
    CLEAN = "clean"
    UNKNOWN = "unknown"


CARRY, CLEAN, UNKNOWN = Taint.CARRY, Taint.CLEAN, Taint.UNKNOWN

# Tensor methods whose result holds no autograd history (Python numbers, integer / boolean
# tensors, metadata) or that cut it (detach, numpy).
_CLEAN_METHODS = frozenset(
    {
        "item",
        "tolist",
        "detach",
        "detach_",
        "numpy",
        "argmax",
        "argmin",
        "argsort",
        "long",
        "int",
        "bool",
        "byte",
        "short",
        "char",
        "eq",
        "ne",
        "gt",
        "lt",
        "ge",
        "le",
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "isnan",
        "isinf",
        "isfinite",
        "isneginf",
        "isposinf",
        "all",
        "any",
        "nonzero",
        "count_nonzero",
        "element_size",
        "data_ptr",
        "is_contiguous",
        "get_device",
        "equal",
        "allclose",
        "isclose",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "__len__",
        "__float__",
        "__int__",
        "stride",
        "storage_offset",
        "is_floating_point",
        "requires_grad_",
    }
)
_CLEAN_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "data",
        "grad",
        "requires_grad",
        "ndim",
        "is_cuda",
        "is_leaf",
        "layout",
        "indices",
        "is_sparse",
        "names",
    }
)
_CLEAN_TORCH = frozenset(
    {
        "torch.argmax",
        "torch.argmin",
        "torch.argsort",
        "torch.isnan",
        "torch.isinf",
        "torch.isfinite",
        "torch.eq",
        "torch.ne",
        "torch.gt",
        "torch.lt",
        "torch.ge",
        "torch.le",
        "torch.equal",
        "torch.allclose",
        "torch.isclose",
        "torch.numel",
        "torch.tensor",
        "torch.as_tensor",
        "torch.zeros",
        "torch.ones",
        "torch.empty",
        "torch.full",
        "torch.arange",
        "torch.linspace",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.empty_like",
        "torch.full_like",
        "torch.randn",
        "torch.rand",
        "torch.randint",
        "torch.randperm",
        "torch.count_nonzero",
        "torch.nonzero",
        "torch.bucketize",
        "torch.searchsorted",
        "torch.unique",
    }
)
_CLEAN_BUILTINS = frozenset(
    {
        "float",
        "int",
        "bool",
        "str",
        "len",
        "repr",
        "round",
        "format",
        "hash",
        "id",
        "isinstance",
        "type",
        "print",
        "callable",
        "divmod",
        "math.isfinite",
        "math.isnan",
    }
)
_PASS_BUILTINS = frozenset({"sum", "max", "min", "abs", "list", "tuple", "sorted", "reversed"})
# `.max(dim)[1]`, `.topk(k)[1]`, `.sort()[1]`, `torch.max(x, 1)[1]`: the index half.
_INDEX_PAIRS = frozenset({"max", "min", "topk", "sort", "mode", "median", "kthvalue"})

# Instances, by the names training code gives them (case-sensitive: `Net(...)` builds one).
_MODEL_NAME = re.compile(
    r"^(model|net|network|ddp_model|model_engine|wrapped_model|\w+_model|\w+_net)$"
)
# Factories return a module, not its output.
_FACTORY = re.compile(
    r"^_?(build|create|get|load|make|init|setup|wrap|prepare|construct|instantiate|from|to|"
    r"unwrap|convert|compile|restore)_"
)
_NOT_TRAINED = re.compile(r"ema|teacher|target|frozen|momentum|old|ref|avg|swa|eval", re.I)
_CRITERION_NAME = re.compile(
    r"^(criterion\w*|\w*_criterion|loss_fn|loss_func\w*|lossfn|loss_function|compute_loss|"
    r"calc_loss|calculate_loss|get_loss|\w+_loss|loss)$",
    re.I,
)
# Names that are a criterion for sure (not `avg_loss()`, `best_loss()`).
_STRONG_CRITERION = re.compile(
    r"^(criterion\w*|loss_fn|loss_func|lossfn|loss_function|compute_loss|calc_loss)$", re.I
)
# Receivers named like a training engine or trainer run the backward of their argument (the
# tables' `backward` receiver words); the tables name the known methods too
# (`accelerator.backward`, `fabric.backward`).
_ENGINE = framework_tables.BUILTIN.receiver_pattern(framework_tables.Meaning.BACKWARD)
_NO_GRAD = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode",
    }
)
# torch namespaces whose functions compute tensors from tensors (autograd flows through them).
_MATH_NAMESPACES = (
    "torch.nn.functional.",
    "torch.special.",
    "torch.linalg.",
    "torch.fft.",
)
# How far a value is followed back through assignments (keeps deep `x = f(x)` chains cheap).
_MAX_DEPTH = 64
TRAINING_STEP_NAMES = frozenset({"training_step", "train_step"})


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def dotted_path(expr: ast.AST) -> str | None:
    """``loss``, ``self.losses``, ``outputs.loss``; for ``hist["loss"]`` its root ``hist``."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return known_names.dotted(expr)


def backward_target(call: ast.Call, called: frozenset[str] = frozenset()) -> ast.expr | None:
    """The tensor a backward call runs on: ``loss`` in ``loss.backward()``,
    ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``, ``fabric.backward(loss)``.

    ``called``: the paths the scope calls as functions (``model(**batch)``). A tensor is not
    callable, so ``model.backward(loss)`` on one of them is a training engine's backward of
    its argument (a DeepSpeed engine kept under the name ``model``), not
    ``Tensor.backward(gradient)``."""
    b = patterns.backward_of(call)
    if b is None:
        return None
    if call.args:
        name = known_names.dotted(b.target) or ""
        if (
            _ENGINE.search(name.rsplit(".", 1)[-1])
            or framework_tables.BUILTIN.matches(
                framework_tables.Meaning.BACKWARD, f"{name}.backward", None
            )
            or (b.scaler is None and name in called)
        ):
            return call.args[0]
        return None
    return b.target


def _scalar_backward(call: ast.Call) -> bool:
    """No ``gradient`` argument: autograd requires the tensor to be a scalar."""
    return len(call.args) <= 1 and all(k.arg != "gradient" for k in call.keywords)


def is_no_grad_call(ctx: ChunkContext, expr: ast.AST) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``, also
    uncalled as a decorator."""
    func = expr.func if isinstance(expr, ast.Call) else expr
    qual = ctx.qualname(func)
    name = qual or known_names.dotted(func) or ""
    if qual in _NO_GRAD or name.rsplit(".", 1)[-1] in ("no_grad", "inference_mode"):
        if isinstance(expr, ast.Call) and name.endswith("inference_mode") and expr.args:
            mode = expr.args[0]
            return isinstance(mode, ast.Constant) and mode.value is not False
        return True
    if name.rsplit(".", 1)[-1] == "set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
        arg = expr.args[0]
        return isinstance(arg, ast.Constant) and arg.value is False
    return False


def under_no_grad(ctx: ChunkContext, node: ast.AST) -> bool:
    """Inside ``with torch.no_grad():`` (or inference_mode) or a function decorated with it."""
    # Asked for most calls of a training loop by several rules: the chunk's no-grad withs and
    # functions are found once per analysis (none, in most chunks), then each question walks
    # up to the first of them.
    scopes = ctx.memo(("no-grad scopes",), lambda: _no_grad_scopes(ctx))
    if not scopes:
        return False
    for a in ctx.ancestors(node):
        if id(a) in scopes:
            return True
        if isinstance(a, ast.Lambda | ast.ClassDef):
            return False
    return False


def _no_grad_scopes(ctx: ChunkContext) -> frozenset[int]:
    """The chunk's ``with`` statements entering no_grad (or inference_mode) and functions
    decorated with it, by id."""
    out: set[int] = set()
    withs: list[ast.With | ast.AsyncWith] = ctx.nodes(ast.With, ast.AsyncWith)
    for w in withs:
        if any(is_no_grad_call(ctx, item.context_expr) for item in w.items):
            out.add(id(w))
    fns: list[ast.FunctionDef | ast.AsyncFunctionDef] = ctx.nodes(
        ast.FunctionDef, ast.AsyncFunctionDef
    )
    for fn in fns:
        if any(is_no_grad_call(ctx, d) for d in fn.decorator_list):
            out.add(id(fn))
    return frozenset(out)


# The nodes GraphFlow records a binding of (exact classes: ``ast`` has no subclasses of them).
_BINDING_NODES = frozenset(
    {
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.NamedExpr,
        ast.For,
        ast.AsyncFor,
        ast.comprehension,
        ast.With,
        ast.AsyncWith,
    }
)


def merge(*ts: Taint) -> Taint:
    if CARRY in ts:
        return CARRY
    if all(t is CLEAN for t in ts):
        return CLEAN
    return UNKNOWN


class GraphFlow:
    """Value analysis of one scope (a function, or a chunk's module-level statements)."""

    def __init__(self, ctx: ChunkContext, root: ast.AST) -> None:
        self.ctx = ctx
        self.root = root
        self.backward_calls: list[ast.Call] = []
        self.targets: set[str] = set()  # paths the backward runs on
        self.consumed: set[str] = set()  # paths read by a backward target (`sum(losses)`)
        self.scalar_targets: set[str] = set()  # ... with a plain `.backward()` (a scalar)
        self.assigns: dict[str, list[tuple[tuple[int, int], ast.AST, int | None]]] = {}
        self._busy: set[int] = set()
        self._memo: dict[int, Taint] = {}
        # One pass over the scope (bindings in scope order, the calls kept for after it: a
        # backward's target is judged against every call's name), dispatched on the node's
        # class: most nodes are none of these.
        calls: list[ast.Call] = []
        called: set[str] = set()
        bind = self._bind
        for node in patterns.walk_scope(root):
            cls = node.__class__
            if cls is ast.Call:
                calls.append(node)  # type: ignore[arg-type]
                d = known_names.dotted(node.func)  # type: ignore[attr-defined]
                if d:
                    called.add(d)
            elif cls not in _BINDING_NODES:
                continue
            elif cls is ast.Assign:
                for tgt in node.targets:  # type: ignore[attr-defined]
                    bind(tgt, node, None)
            elif cls is ast.AnnAssign:
                if node.value is not None:  # type: ignore[attr-defined]
                    bind(node.target, node, None)  # type: ignore[attr-defined]
            elif cls is ast.AugAssign or cls is ast.NamedExpr:
                bind(node.target, node, None)  # type: ignore[attr-defined]
            elif cls is ast.With or cls is ast.AsyncWith:
                for item in node.items:  # type: ignore[attr-defined]
                    if item.optional_vars is not None:
                        bind(item.optional_vars, node, -1)
            else:  # a loop or a comprehension
                bind(node.target, node, -1)  # type: ignore[attr-defined]
        frozen = frozenset(called)
        for node in calls:
            t = backward_target(node, frozen)
            if t is not None:
                self.backward_calls.append(node)
                for sub in tree_walk.bfs(t):
                    if isinstance(sub, ast.Name | ast.Attribute):
                        d = known_names.dotted(sub)
                        if d:
                            self.consumed.add(d)
                path = known_names.dotted(t)
                if path:
                    self.targets.add(path)
                    if _scalar_backward(node):
                        self.scalar_targets.add(path)
        if (
            isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef)
            and root.name in TRAINING_STEP_NAMES
        ):
            # Lightning's training_step returns the loss its trainer calls backward on.
            for node in patterns.walk_scope(root):
                if isinstance(node, ast.Return) and node.value is not None:
                    value = node.value
                    if isinstance(value, ast.Dict):
                        value = next(
                            (
                                v
                                for k, v in zip(value.keys, value.values, strict=True)
                                if isinstance(k, ast.Constant) and k.value == "loss"
                            ),
                            value,
                        )
                    path = known_names.dotted(value)
                    if path:
                        self.targets.add(path)
        for lst in self.assigns.values():
            lst.sort(key=lambda x: x[0])

    @classmethod
    def of(cls, ctx: ChunkContext, root: ast.AST) -> GraphFlow:
        """The flow of ``root`` for one rule: the tables (backward calls, targets, bindings)
        built once per chunk analysis and shared by the rules that ask (DDP301, DDP302: the
        same functions), the taint queries' memo its own (a query's answer under a cycle
        depends on what was asked before it, so each rule keeps the order it asks in).
        Building the tables reads no module facts."""
        base: GraphFlow = ctx.memo(("graph flow", id(root)), lambda: cls(ctx, root))
        flow = copy.copy(base)
        flow._busy = set()
        flow._memo = {}
        return flow

    def _bind(self, target: ast.AST, stmt: ast.AST, elt: int | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for i, e in enumerate(target.elts):
                self._bind(e, stmt, -1 if elt == -1 else i)
            return
        if isinstance(target, ast.Starred):
            self._bind(target.value, stmt, -1)
            return
        path = known_names.dotted(target)
        if path:
            self.assigns.setdefault(path, []).append((_end(stmt), stmt, elt))

    # -- queries -------------------------------------------------------------------------------

    def has_backward_in(self, node: ast.AST) -> bool:
        if self.ctx.parent(node) is None:  # a top-level statement (or not of this chunk)
            return any(any(c is n for n in tree_walk.bfs(node)) for c in self.backward_calls)
        # Up from each backward call rather than down through the whole of ``node``.
        for c in self.backward_calls:
            if c is node or any(a is node for a in self.ctx.ancestors(c)):
                return True
        return False

    def taint(self, expr: ast.AST) -> Taint:
        key = id(expr)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy or len(self._busy) > _MAX_DEPTH:
            return UNKNOWN
        self._busy.add(key)
        try:
            result = self._taint(expr)
        finally:
            self._busy.discard(key)
        self._memo[key] = result
        return result

    def _taint(self, e: ast.AST) -> Taint:
        if isinstance(
            e, ast.Constant | ast.JoinedStr | ast.Compare | ast.Lambda | ast.FormattedValue
        ):
            return CLEAN
        if isinstance(e, ast.Name):
            return self._lookup(e.id, e)
        if isinstance(e, ast.Attribute):
            if e.attr in _CLEAN_ATTRS:
                return CLEAN
            path = known_names.dotted(e)
            if path is not None and path in self.assigns:
                return self._lookup(path, e)
            if path is not None and path in self.targets:
                return CARRY
            return self.taint(e.value)
        if isinstance(e, ast.Subscript):
            v = e.value
            if (
                isinstance(e.slice, ast.Constant)
                and e.slice.value == 1
                and isinstance(v, ast.Call)
                and self._callee_last(v) in _INDEX_PAIRS
            ):
                return CLEAN
            return self.taint(v)
        if isinstance(e, ast.BinOp):
            return merge(self.taint(e.left), self.taint(e.right))
        if isinstance(e, ast.UnaryOp):
            return CLEAN if isinstance(e.op, ast.Not) else self.taint(e.operand)
        if isinstance(e, ast.BoolOp):
            return merge(*(self.taint(v) for v in e.values))
        if isinstance(e, ast.IfExp):
            # `loss.item() if torch.is_tensor(loss) else loss`: only sure when both agree.
            body, orelse = self.taint(e.body), self.taint(e.orelse)
            return body if body is orelse else UNKNOWN
        if isinstance(e, ast.Tuple | ast.List | ast.Set):
            return merge(*(self.taint(x) for x in e.elts)) if e.elts else CLEAN
        if isinstance(e, ast.Dict):
            return merge(*(self.taint(x) for x in e.values)) if e.values else CLEAN
        if isinstance(e, ast.Starred):
            return self.taint(e.value)
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.NamedExpr):
            return self.taint(e.value)
        return UNKNOWN

    @staticmethod
    def _callee_last(call: ast.Call) -> str:
        return known_names.last_name(call) or ""

    def _args(self, call: ast.Call) -> Taint:
        parts = [self.taint(a) for a in call.args] + [self.taint(k.value) for k in call.keywords]
        return merge(*parts) if parts else CLEAN

    def _call(self, call: ast.Call) -> Taint:
        ctx = self.ctx
        func = call.func
        qual = ctx.qualname(func)
        last = self._callee_last(call)
        dotted = known_names.dotted(func) or ""
        if qual is not None and qual.startswith("torch."):
            if qual in _CLEAN_TORCH or qual.rsplit(".", 1)[-1] in _CLEAN_METHODS:
                return CLEAN
            kind = ctx.kind(func)
            if kind in (fact_model.DDP, fact_model.FSDP):
                return CARRY
            if qual.startswith("torch.nn.functional.") and (
                last.endswith("loss")
                or last
                in (
                    "cross_entropy",
                    "binary_cross_entropy",
                    "binary_cross_entropy_with_logits",
                    "kl_div",
                )
            ):
                args = self._args(call)
                return CLEAN if args is CLEAN else CARRY
            if qual.count(".") == 1 or qual.startswith(_MATH_NAMESPACES):
                return self._args(call)  # torch.stack(losses), F.softmax(out), ...
            return UNKNOWN  # torch.distributed.all_reduce(...) returns a work handle, ...
        if isinstance(func, ast.Name | ast.Attribute) and ctx.kind(func) in (
            fact_model.DDP,
            fact_model.FSDP,
        ):
            return CARRY
        if isinstance(func, ast.Name) and func.id in _CLEAN_BUILTINS or dotted in _CLEAN_BUILTINS:
            return CLEAN
        if isinstance(func, ast.Name) and func.id in _PASS_BUILTINS:
            return self._args(call)
        if isinstance(func, ast.Attribute):
            if last in _CLEAN_METHODS:
                return CLEAN
            receiver = self.taint(func.value)
            if receiver is CARRY:
                return CARRY
            if last in ("forward", "module") and self._model_like(func.value):
                return CARRY
        if self._model_like(func):
            return CARRY
        if "scaler" not in dotted.lower() and _CRITERION_NAME.match(last):
            args = self._args(call)
            if args is CARRY:
                return CARRY
            if args is UNKNOWN and _STRONG_CRITERION.match(last):
                return CARRY  # criterion(outputs, targets) in a training loop
            return args if args is CLEAN and call.args else UNKNOWN
        return UNKNOWN

    def _model_like(self, func: ast.AST) -> bool:
        if not isinstance(func, ast.Name | ast.Attribute):
            return False
        if self.ctx.kind(func) in (fact_model.DDP, fact_model.FSDP):
            return True
        dotted = known_names.dotted(func)
        if dotted is None:
            return False
        last = dotted.rsplit(".", 1)[-1]
        return (
            bool(_MODEL_NAME.match(last))
            and not _NOT_TRAINED.search(last)
            and not _FACTORY.match(last)
        )

    def _lookup(self, path: str, at: ast.AST) -> Taint:
        where = patterns.order(at)
        entries = self.assigns.get(path, [])
        prior = [x for x in entries if x[0] <= where]
        chosen = prior[-1] if prior else None
        if chosen is None:
            # Loop-carried: the last assignment later in an enclosing loop.
            for loop in self._loops_of(at):
                later = [x for x in entries if any(n is x[1] for n in tree_walk.bfs(loop))]
                if later:
                    chosen = later[-1]
                    break
        if chosen is None:
            return CARRY if path in self.targets else UNKNOWN
        # A loop-carried `x += 1` whose only binding is itself would look itself up forever.
        key = (path, id(chosen[1]))
        active: set[tuple[str, int]] = self.__dict__.setdefault("_active_lookups", set())
        if key in active:
            return CARRY if path in self.targets else UNKNOWN
        active.add(key)
        try:
            result = self._assigned(chosen[1], chosen[2], path)
        finally:
            active.discard(key)
        if result is UNKNOWN and path in self.targets:
            return CARRY
        return result

    def _loops_of(self, node: ast.AST) -> list[ast.AST]:
        out: list[ast.AST] = []
        for a in self.ctx.ancestors(node):
            if a is self.root or isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                break
            if isinstance(a, LOOPS):
                out.append(a)
        return out

    def _assigned(self, stmt: ast.AST, elt: int | None, path: str) -> Taint:
        if elt == -1:
            return UNKNOWN
        no_grad = under_no_grad(self.ctx, stmt)
        if isinstance(stmt, ast.AugAssign):
            old = self._lookup(path, stmt)
            new = self.taint(stmt.value)
            if no_grad:
                return old
            return merge(old, new)
        value = getattr(stmt, "value", None)
        if value is None:
            return UNKNOWN
        if elt is not None and isinstance(value, ast.Tuple | ast.List) and len(value.elts) > elt:
            value = value.elts[elt]
        if no_grad:
            # Computed without autograd; only an alias of a tensor that had a graph keeps it.
            return self.taint(value) if isinstance(value, ast.Name) else CLEAN
        return self.taint(value)

    def is_scalar(self, e: ast.AST) -> bool:
        """The value is a one-element tensor, so ``.item()`` works on it."""
        if isinstance(e, ast.Name | ast.Attribute):
            path = known_names.dotted(e)
            return path is not None and path in self.scalar_targets
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
            if e.func.attr in ("mean", "sum") and not e.args and not e.keywords:
                return True
            return False
        if isinstance(e, ast.UnaryOp):
            return self.is_scalar(e.operand)
        if isinstance(e, ast.BinOp):
            sides = (e.left, e.right)
            return any(self.is_scalar(s) for s in sides) and all(
                self.is_scalar(s) or self._plain_number(s) for s in sides
            )
        return False

    def _plain_number(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Constant):
            return isinstance(e.value, int | float) and not isinstance(e.value, bool)
        if isinstance(e, ast.Call):
            last = self._callee_last(e)
            return last in ("size", "len", "float", "int", "numel")
        if isinstance(e, ast.Subscript):
            return isinstance(e.value, ast.Attribute) and e.value.attr == "shape"
        if isinstance(e, ast.Name | ast.Attribute):
            return self.taint(e) is not CARRY and not (known_names.dotted(e) or "").endswith(
                ("weight", "weights", "mask")
            )
        return False
