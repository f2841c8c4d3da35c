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
k in keys]`: one array per key, not one object per sample), evaluation datasets (a class named
for evaluation, `nocaps_eval`, or one whose `__init__` names only val/test data files:
evaluation splits are small), containers with one entry per dataset (dataset objects appended
in a loop, `{i: 0 for i in range(len(datasets))}`), a subset or reordering of another
container (`[self.files[i] for i in order]`: judged by that container), records written under
literal keys (`cfg["ext"] = ".jpg"`: a configuration), and random stand-in data (`[(torch.rand(
20), torch.rand(1)) for _ in range(n)]`). Still reported although harmless: a short list of
files of a small training set (a few hundred images of one folder): the size of a folder is
not in the source.

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
from ddp_lsp.rules import _data as data_rules
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
# Builtins that copy what they are given into a new container (`sorted(x for x in files)`).
_COPIES = frozenset({"list", "sorted", "dict", "set", "tuple"})
# Flat storage: one object, one buffer.
_FLAT_PREFIXES = ("numpy.", "torch.", "pyarrow.", "pandas.", "np.", "pa.", "pd.")
# Lookup tables bounded by the label set or the vocabulary, not by the dataset: not reported.
_SMALL_NAME = re.compile(
    r"class|categor|label_?(map|names)|idx_?to|to_?idx|2idx|2id$|id2|idx2|to_ix|transform|"
    r"vocab|stoi|itos|tokenizer|mean|std"
)


def _literal_name(fn: ast.FunctionDef, name: str) -> bool:
    """``name`` is bound in ``fn`` only to literal lists / tuples (a handful of keys), never
    grown afterwards (``f = []`` then ``f += glob(...)`` is a list of files)."""
    values = []
    for node in patterns.walk_scope(fn):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            values.append(node.value)
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            return False
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend", "insert")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            return False
    return bool(values) and all(isinstance(v, (ast.List, ast.Tuple)) and v.elts for v in values)


# A data file named in `__init__` (`"coco_karpathy_val.json"`, `"msrvtt_test.jsonl"`).
_DATA_FILE = re.compile(
    r"([^/\\]+)\.(json|jsonl|txt|csv|tsv|pkl|pickle|lst|list|parquet|npy|npz|h5|hdf5|yaml|yml)$",
    re.IGNORECASE,
)
# Random generators: a comprehension of these alone builds stand-in data (tutorials, benchmarks).
_RANDOM = re.compile(
    r"^(torch\.(rand|randn|randint|randperm|normal|bernoulli)|"
    r"numpy\.random\.|np\.random\.|random\.)"
)


def _evaluation_dataset(cls: str, init: ast.FunctionDef) -> bool:
    """A dataset of evaluation splits only: named so (`nocaps_eval`, `ValDataset`), or every
    data file its `__init__` names is an evaluation split (`{"val": "x_val.json", "test":
    "x_test.json"}`, `"msrvtt_test.jsonl"`) and none a training one (F38)."""
    if data_rules.is_eval_name(cls):
        return True
    files = [
        m.group(1)
        for node in patterns.walk_scope(init)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for m in [_DATA_FILE.search(node.value.strip())]
        if m is not None
    ]
    return bool(files) and all(data_rules.is_eval_name(f) for f in files)


def _per_dataset(it: ast.expr) -> bool:
    """``datasets``, ``self.datasets``, ``range(len(datasets))``, ``enumerate(datasets)``: one
    entry per dataset of a blend, not one per sample (F38)."""
    while (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id in ("range", "len", "enumerate", "zip", "sorted", "list", "reversed")
        and len(it.args) >= 1
    ):
        it = it.args[-1] if it.func.id == "range" else it.args[0]
    p = path_of(it)
    return p is not None and p.rsplit(".", 1)[-1].lower().endswith("datasets")


def _makes_dataset(init: ast.FunctionDef, value: ast.expr, depth: int = 0) -> bool:
    """``FileDataset(path)`` or a local bound to one: an entry that is a whole dataset."""
    if isinstance(value, ast.Call):
        name = known_names.dotted(value.func) or ""
        return name.rsplit(".", 1)[-1].endswith("Dataset")
    if isinstance(value, ast.Name) and depth < 2:
        values = [
            node.value
            for node in patterns.walk_scope(init)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
        ]
        return bool(values) and all(_makes_dataset(init, v, depth + 1) for v in values)
    return False


def _record(init: ast.FunctionDef, path: str) -> bool:
    """``cfg["ext"] = ".jpg"``: a container written under literal keys is a record of named
    fields (a configuration), not one entry per sample (F38)."""
    for node in patterns.walk_scope(init):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Subscript)
                    and path_of(t.value) == path
                    and isinstance(t.slice, ast.Constant)
                    and isinstance(t.slice.value, str)
                ):
                    return True
    return False


def _stand_in(
    ctx: ChunkContext, comp: ast.ListComp | ast.DictComp | ast.SetComp | ast.GeneratorExp
) -> bool:
    """``[(torch.rand(20), torch.rand(1)) for _ in range(size)]``: random stand-in data of a
    tutorial or benchmark, made of random draws alone and independent of the loop (F38)."""
    targets = {
        n.id for gen in comp.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)
    }
    elts = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
    calls = [n for e in elts for n in ast.walk(e) if isinstance(n, ast.Call)]
    if not calls:
        return False
    if any(isinstance(n, ast.Name) and n.id in targets for e in elts for n in ast.walk(e)):
        return False
    return all(
        _RANDOM.match(ctx.call_qualname(c) or known_names.dotted(c.func) or "") for c in calls
    )


def _selection(comp: ast.expr) -> str | None:
    """``[self.files[i] for i in order]``: a subset or reordering of another container, as
    large as that container; its path."""
    if not isinstance(comp, ast.ListComp) or len(comp.generators) != 1:
        return None
    target = comp.generators[0].target
    elt = comp.elt
    if (
        isinstance(target, ast.Name)
        and isinstance(elt, ast.Subscript)
        and isinstance(elt.slice, ast.Name)
        and elt.slice.id == target.id
    ):
        return path_of(elt.value)
    return None


def _selection_index(value: ast.expr) -> str | None:
    """``order`` in ``[self.files[i] for i in order]`` (a selection), else None."""
    if isinstance(value, ast.ListComp) and _selection(value) is not None:
        return path_of(value.generators[0].iter)
    return None


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
            if cls is None or _evaluation_dataset(cls, fn):
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
        # `self.x = [self.x[i] for i in order]`: (target, the index path) per attribute.
        selections: dict[str, list[tuple[ast.AST, str]]] = {}
        for attr, assigns in stored.items():
            if _SMALL_NAME.search(attr[5:].lower()) or _record(init, attr):
                continue
            if any(self._flat(ctx, v) for _, v in assigns):
                continue  # converted to flat storage somewhere in __init__
            selections[attr] = [
                (target, index)
                for target, value in assigns
                if (index := _selection_index(value)) is not None
            ]
            for target, value in assigns:
                how = self._large(ctx, init, attr, value)
                if how is not None:
                    out.append((attr, target, how))
                    break
        # Parallel lists selected by the same indices as a large one are as long as it
        # (`self.labels = [self.labels[i] for i in irect]` beside `self.im_files`'s).
        large = {a for a, _, _ in out}
        shared = {index for a in large for _, index in selections.get(a, ())}
        for attr, sel in selections.items():
            if attr in large:
                continue
            for target, index in sel:
                if index in shared:
                    out.append((attr, target, "built by a comprehension"))
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
            source = _selection(value)
            if source is not None:
                # A subset or reordering of another container (or of this one, bound before):
                # as large as that container, judged by its own assignments.
                return self._large_source(ctx, init, source, value, depth)
            if (
                _stand_in(ctx, value)
                or any(_per_dataset(gen.iter) for gen in value.generators)
                or isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp))
                and _makes_dataset(init, value.elt)
            ):
                return None
            return "built by a comprehension" if self._over_data(value, init) else None
        if isinstance(value, ast.Call):
            name = ctx.call_qualname(value) or known_names.dotted(value.func) or ""
            if name in _LOADERS:
                return f"read with `{name.rsplit('.', 1)[-1]}`"
            if isinstance(value.func, ast.Attribute) and value.func.attr in _READ_METHODS:
                return f"read with `{value.func.attr}()`"
            if name.removeprefix("builtins.") in _COPIES and value.args:
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
            if _record(init, local):
                return None
            for node in patterns.walk_scope(init):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == local for t in node.targets
                ):
                    how = self._large(ctx, init, local, node.value, depth + 1)
                    if how is not None:
                        return how
        return None

    def _large_source(
        self, ctx: ChunkContext, init: ast.FunctionDef, path: str, exclude: ast.expr, depth: int
    ) -> str | None:
        """What makes ``path`` large, from its assignments in ``init`` other than ``exclude``."""
        if depth >= 2:
            return None
        for node in patterns.walk_scope(init):
            if (
                isinstance(node, ast.Assign)
                and node.value is not exclude
                and any(path_of(t) == path for t in node.targets)
            ):
                how = self._large(ctx, init, path, node.value, depth + 1)
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
                    if inner.args and all(_makes_dataset(init, a) for a in inner.args):
                        continue  # one dataset per entry (a file, a folder of a blend): F38
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
    Valid(
        _HEAD
        + """\
class CaptionEval(Dataset):
    def __init__(self, root, split):
        files = {"val": "captions_val.json", "test": "captions_test.json"}
        with open(os.path.join(root, files[split])) as f:
            self.samples = json.load(f)
"""
        + _GETITEM,
        note="F38: an evaluation dataset (every data file it names is a val/test split)",
    ),
    Valid(
        _HEAD
        + """\
class retrieval_eval(Dataset):
    def __init__(self, ann_file):
        with open(ann_file) as f:
            self.samples = json.load(f)
"""
        + _GETITEM,
        note="F38: a dataset named for evaluation",
    ),
    Invalid(
        _HEAD
        + """\
class Captions(Dataset):
    def __init__(self, root, train=True):
        name = "captions_trainval.txt" if train else "captions_test.txt"
        with open(os.path.join(root, name)) as f:
            «self.samples» = f.readlines()
"""
        + _GETITEM,
        fixed=None,
        note="a training split among the files it names: not an evaluation dataset",
    ),
    Valid(
        _HEAD
        + """\
class Blend(Dataset):
    def __init__(self, folders, datasets):
        self.parts = []
        for folder in folders:
            self.parts.append(ShardDataset(folder))
        part = ShardDataset(folders[0])
        self.parts.append(part)
        self.lengths = [len(d) for d in self.parts_datasets]
        self.consumed = {i: 0 for i in range(len(datasets))}
        self.samples = np.concatenate([np.arange(len(d)) for d in self.parts])
"""
        + _GETITEM,
        note="F38: one entry per dataset of a blend (dataset objects, per-dataset counters)",
    ),
    Valid(
        _HEAD
        + """\
class Frames(Dataset):
    def __init__(self, root, split):
        self.samples = self.list_files(root)
        keep = np.random.permutation(len(self.samples))[: len(self.samples) // 5]
        self.samples = [self.samples[i] for i in keep]
"""
        + _GETITEM,
        note="F38: a subset of a container judged by that container (here of unknown size)",
    ),
    Invalid(
        _HEAD
        + """\
class Frames(Dataset):
    def __init__(self, root, order):
        self.samples = sorted(os.path.join(root, f) for f in os.listdir(root))
        «self.samples» = [self.samples[i] for i in order]
"""
        + _GETITEM,
        fixed=None,
        note="a reordering of a listing of every file: as large as the listing",
    ),
    Invalid(
        _HEAD
        + """\
class Images(Dataset):
    def __init__(self, roots):
        files = []
        for root in roots:
            files += [os.path.join(root, f) for f in os.listdir(root)]
        «self.samples» = [f for f in files if f.endswith(".jpg")]
"""
        + _GETITEM,
        fixed=None,
        note="a list that starts empty and grows is data, not a literal list of keys",
    ),
    Valid(
        _HEAD
        + """\
class Retrieval(Dataset):
    def __init__(self, root):
        with open(os.path.join(root, "gnd.pkl"), "rb") as f:
            cfg = pickle.load(f)
        cfg["ext"] = ".jpg"
        cfg["dir_images"] = os.path.join(root, "jpg")
        self.cfg = cfg
        self.samples = np.array(cfg["imlist"])
"""
        + _GETITEM,
        note="F38: a record written under literal keys (a configuration), not per-sample",
    ),
    Valid(
        _HEAD
        + """\
class RandomPairs(Dataset):
    def __init__(self, size):
        self.size = size
        self.samples = [(torch.rand(20), torch.rand(1)) for _ in range(size)]
"""
        + _GETITEM,
        note="F38: random stand-in data of a tutorial or benchmark",
    ),
    Invalid(
        _HEAD
        + """\
class Noisy(Dataset):
    def __init__(self, paths):
        «self.samples» = [(p, torch.rand(1)) for p in paths]
"""
        + _GETITEM,
        fixed=None,
        note="one entry per input read, with random noise beside it: not stand-in data",
    ),
)
