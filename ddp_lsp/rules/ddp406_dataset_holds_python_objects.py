"""DDP406 dataset-holds-python-objects.

## What it does
Finds a map-style `Dataset` (a class with `__getitem__`) whose `__init__` stores a large
Python container of objects on `self`: a list or dict built by a comprehension over data, read
with `json.load` / `pickle.load` / `readlines()` / `os.listdir` / `glob`, or filled with
`self.items.append(...)` in a loop.

## Why is this bad?
DataLoader workers are forked and share the parent's memory copy-on-write. But CPython writes
to every object it touches: reading `self.samples[i]` increments the reference count of the
list item, which dirties the page holding it, so each worker gradually copies every page of
every object it reads. With N workers per rank and several ranks per node, host memory grows
epoch after epoch as if it leaked, until the OOM killer stops the job (pytorch/pytorch#13246).
A NumPy array, a tensor or an Arrow table is one object with one flat buffer: reading from it
copies nothing.

## Example
```python
class Captions(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.samples = json.load(f)  # a list of dicts

    def __getitem__(self, i):
        return self.samples[i]["caption"]
```

## Use instead
```python
class Captions(Dataset):
    def __init__(self, path):
        with open(path) as f:
            captions = [s["caption"] for s in json.load(f)]
        self.captions = np.array(captions)  # one buffer of fixed-width strings

    def __getitem__(self, i):
        return str(self.captions[i])
```

## Fix
None: the right layout (NumPy, tensors, Arrow, a memory-mapped file) depends on the data.

## Known false positives
The rule cannot yet see `num_workers` in other functions, nor which attributes `__getitem__`
reads when it is another method chunk: it reports any large container a map-style dataset
builds in `__init__`, which is harmless when the file runs without workers. Not reported:
containers converted afterwards (`self.x = np.array(self.x)`, `torch.tensor`, Arrow, pandas),
literal lists (class names), lookup tables named like class or label maps and vocabularies
(`class_to_idx`, `label2id`, `vocab`, `stoi`: bounded by the label set, not the data), and
comprehensions over literals or over a name bound to a literal list (`[np.asarray(f[k][:]) for
k in keys]`: one array per key, not one object per sample).

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://github.com/pytorch/pytorch/issues/13246
- https://docs.pytorch.org/docs/stable/data.html#multi-process-data-loading
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import LOOPS, ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _patterns as patterns

_DATASET_BASES = frozenset({"torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset"})
_NOT_MAP_BASES = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
# Calls that read many records into Python objects.
_LOADERS = frozenset(
    {
        "json.load",
        "json.loads",
        "pickle.load",
        "pickle.loads",
        "yaml.load",
        "yaml.safe_load",
        "yaml.full_load",
        "os.listdir",
        "glob.glob",
        "glob.iglob",
        "csv.reader",
        "csv.DictReader",
        "ujson.load",
        "orjson.loads",
    }
)
_READ_METHODS = frozenset({"readlines", "splitlines", "rglob", "glob", "iterdir"})
# Flat storage: one object, one buffer.
_FLAT_PREFIXES = ("numpy.", "torch.", "pyarrow.", "pandas.", "np.", "pa.", "pd.")
# Lookup tables bounded by the label set or the vocabulary, not by the dataset: not reported.
_SMALL_NAME = re.compile(
    r"class|categor|label_?(map|names)|idx_?to|to_?idx|2idx|2id$|id2|idx2|to_ix|transform|"
    r"vocab|stoi|itos|tokenizer|mean|std"
)


def _literal_name(fn: ast.FunctionDef, name: str) -> bool:
    """``name`` is bound in ``fn`` only to literal lists / tuples (a handful of keys)."""
    values = [
        node.value
        for node in patterns.walk_scope(fn)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    return bool(values) and all(isinstance(v, (ast.List, ast.Tuple)) for v in values)


class DatasetHoldsPythonObjects(Rule):
    meta = RuleMeta(
        id="DDP406",
        name="dataset-holds-python-objects",
        severity=Severity.INFORMATION,
        summary="Dataset keeps large Python lists/dicts: copy-on-write makes worker memory grow.",
        fix=FixAvailability.NONE,
        any_module=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for fn in ctx.nodes(ast.FunctionDef):
            if fn.name != "__init__":
                continue
            cls = self._dataset_class(ctx, fn)
            if cls is None:
                continue
            found = self._containers(ctx, fn)
            if not found:
                continue
            attr, node, how = found[0]
            others = [a for a, _, _ in found[1:]]
            also = f" (also {', '.join(f'`{o}`' for o in others)})" if others else ""
            # One process outside distributed code (a single-GPU script): no "every rank".
            ranks = " of every rank" if ctx.facts.distributed else ""
            yield ctx.finding(
                self,
                node,
                f"`{attr}` of dataset `{cls}` is a Python container {how}{also}: each "
                "DataLoader worker that reads it updates the reference counts of its objects, "
                f"so copy-on-write copies its pages into every worker{ranks} and host "
                "memory grows as if it leaked (pytorch/pytorch#13246); store it as a NumPy "
                "array, a tensor or an Arrow table",
            )

    # -- is this a map-style dataset? ----------------------------------------------------------

    def _dataset_class(self, ctx: ChunkContext, init: ast.FunctionDef) -> str | None:
        parent = ctx.parent(init)
        cls_node = parent if isinstance(parent, ast.ClassDef) else None
        if cls_node is not None:
            name = cls_node.name
        elif ctx.member_of is not None and ctx.enclosing_function(init) is None:
            name = ctx.member_of
        else:
            return None
        if f"{name}.__getitem__" not in ctx.facts.func_params:
            return None
        if cls_node is None:
            return name if "dataset" in name.lower() else None
        for base in cls_node.bases:
            qual = ctx.qualname(base) or ""
            spelled = known_names.dotted(base) or ""
            if qual in _NOT_MAP_BASES:
                return None
            if qual in _DATASET_BASES or spelled.endswith("Dataset"):
                return name
        return None

    # -- what __init__ stores ------------------------------------------------------------------

    def _containers(
        self, ctx: ChunkContext, init: ast.FunctionDef
    ) -> list[tuple[str, ast.AST, str]]:
        stored: dict[str, list[tuple[ast.AST, ast.expr]]] = {}
        for node in patterns.walk_scope(init):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    p = path_of(t)
                    if p and p.startswith("self."):
                        stored.setdefault(p, []).append((t, node.value))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                p = path_of(node.target)
                if p and p.startswith("self."):
                    stored.setdefault(p, []).append((node.target, node.value))
        out: list[tuple[str, ast.AST, str]] = []
        for attr, assigns in stored.items():
            if _SMALL_NAME.search(attr[5:].lower()):
                continue
            if any(self._flat(ctx, v) for _, v in assigns):
                continue  # converted to flat storage somewhere in __init__
            for target, value in assigns:
                how = self._large(ctx, init, attr, value)
                if how is not None:
                    out.append((attr, target, how))
                    break
        out.sort(key=lambda x: patterns.order(x[1]))
        return out

    @staticmethod
    def _flat(ctx: ChunkContext, value: ast.expr) -> bool:
        if not isinstance(value, ast.Call):
            return False
        qual = ctx.call_qualname(value) or known_names.dotted(value.func) or ""
        if qual.startswith(_FLAT_PREFIXES):
            return True
        # self.x = self.x.to_numpy() / .values / np-style methods
        return isinstance(value.func, ast.Attribute) and value.func.attr in (
            "to_numpy",
            "numpy",
            "astype",
        )

    def _large(
        self, ctx: ChunkContext, init: ast.FunctionDef, attr: str, value: ast.expr, depth: int = 0
    ) -> str | None:
        if isinstance(value, (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)):
            return "built by a comprehension" if self._over_data(value, init) else None
        if isinstance(value, ast.Call):
            name = ctx.call_qualname(value) or known_names.dotted(value.func) or ""
            if name in _LOADERS:
                return f"read with `{name.rsplit('.', 1)[-1]}`"
            if isinstance(value.func, ast.Attribute) and value.func.attr in _READ_METHODS:
                return f"read with `{value.func.attr}()`"
            if name in ("list", "sorted", "dict", "set", "tuple") and value.args:
                inner = self._large(ctx, init, attr, value.args[0], depth)
                if inner is not None:
                    return inner
            return None
        if isinstance(value, (ast.List, ast.Dict)) and not (
            value.elts if isinstance(value, ast.List) else value.keys
        ):
            if self._filled_in_loop(init, attr):
                return "filled in a loop"
            return None
        if isinstance(value, ast.Name) and depth < 2:
            local = value.id
            for node in patterns.walk_scope(init):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == local for t in node.targets
                ):
                    how = self._large(ctx, init, local, node.value, depth + 1)
                    if how is not None:
                        return how
        return None

    @staticmethod
    def _over_data(
        comp: ast.ListComp | ast.DictComp | ast.SetComp | ast.GeneratorExp,
        init: ast.FunctionDef | None = None,
    ) -> bool:
        for gen in comp.generators:
            it = gen.iter
            if isinstance(it, (ast.List, ast.Tuple, ast.Set, ast.Constant)):
                continue
            if isinstance(it, ast.Name) and init is not None and _literal_name(init, it.id):
                continue  # `for key in keys` with `keys = ["input_ids", ...]` (F39)
            if (
                isinstance(it, ast.Call)
                and known_names.dotted(it.func) == "range"
                and all(isinstance(a, ast.Constant) for a in it.args)
            ):
                continue
            return True
        return False

    @staticmethod
    def _filled_in_loop(init: ast.FunctionDef, path: str) -> bool:
        for node in patterns.walk_scope(init):
            if not isinstance(node, LOOPS):
                continue
            for inner in tree_walk.bfs(node):
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr in ("append", "extend", "insert", "update", "add")
                    and path_of(inner.func.value) == path
                ):
                    return True
                if isinstance(inner, ast.Assign):
                    for t in inner.targets:
                        if isinstance(t, ast.Subscript) and path_of(t.value) == path:
                            return True
        return False


_HEAD = """\
import json
import os

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

"""

_GETITEM = """
    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]
"""

DatasetHoldsPythonObjects.cases = (
    Valid(
        _HEAD
        + """\
class Paths(Dataset):
    def __init__(self, root):
        self.samples = np.array(sorted(os.listdir(root)))
"""
        + _GETITEM,
        note="strings stored as one NumPy array",
    ),
    Valid(
        _HEAD
        + """\
class Paths(Dataset):
    def __init__(self, root):
        self.samples = [os.path.join(root, f) for f in os.listdir(root)]
        self.samples = np.array(self.samples)
"""
        + _GETITEM,
        note="a list of strings converted to np.array",
    ),
    Valid(
        _HEAD
        + """\
class Shapes(Dataset):
    def __init__(self, n):
        self.classes = ["circle", "square", "triangle"]
        self.samples = torch.randn(n, 3, 32, 32)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
"""
        + _GETITEM,
        note="small constant lists, tensor storage, class maps",
    ),
    Valid(
        _HEAD
        + """\
class Tokens(Dataset):
    def __init__(self, path):
        self.samples = torch.from_numpy(np.load(path))
        self.offsets = [0, 128, 256]
"""
        + _GETITEM,
        note="tensor storage",
    ),
    Valid(
        _HEAD
        + """\
class Cache:
    def __init__(self, path):
        with open(path) as f:
            self.samples = json.load(f)
""",
        note="not a dataset",
    ),
    Valid(
        _HEAD
        + """\
class Tokens(Dataset):
    def __init__(self, path):
        with open(path) as f:
            data = json.load(f)
        self.vocab = {w: i for i, w in enumerate(data["vocab"])}
        self.samples = np.asarray([d["ids"] for d in data["samples"]], dtype=np.int32)
"""
        + _GETITEM,
        note="a vocabulary lookup table beside flat samples",
    ),
    Invalid(
        _HEAD
        + """\
class Captions(Dataset):
    def __init__(self, path):
        with open(path) as f:
            «self.samples» = json.load(f)
"""
        + _GETITEM,
        fixed=None,
    ),
    Invalid(
        _HEAD
        + """\
class Images(torch.utils.data.Dataset):
    def __init__(self, root, transform=None):
        self.transform = transform
        «self.samples» = []
        for dirpath, _, files in os.walk(root):
            for name in files:
                self.samples.append((os.path.join(dirpath, name), 0))
"""
        + _GETITEM,
        fixed=None,
        note="appended in a loop",
    ),
    Invalid(
        _HEAD
        + """\
class Lines(Dataset):
    def __init__(self, path):
        with open(path) as f:
            rows = [json.loads(line) for line in f]
        «self.samples» = rows
"""
        + _GETITEM,
        fixed=None,
        note="a comprehension through a local name",
    ),
    Valid(
        _HEAD
        + """\
class PretrainShard(Dataset):
    def __init__(self, path):
        f = h5py.File(path, "r")
        keys = ["input_ids", "input_mask", "segment_ids", "labels"]
        self.inputs = [np.asarray(f[key][:]) for key in keys]

    def __len__(self):
        return len(self.inputs[0])

    def __getitem__(self, i):
        return [x[i] for x in self.inputs]
""",
        note="F39: one array per key of a literal list, not one object per sample",
    ),
)
