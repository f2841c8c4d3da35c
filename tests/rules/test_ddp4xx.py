"""DDP401-DDP406 beyond their own cases: DDP405 with explicit machine and launch facts, fix
chains through fix-all (DDP401's sampler, then DDP402's set_epoch), keyword removal and
insertion in every call layout, CRLF files, suppressions, and the golden script fixed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.env import Environment, LaunchInfo, MachineInfo
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

DATA = Settings(select=("DDP4",))
HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

"""


def found(code: str, rule: str, env: Environment | None = None) -> list:
    result = analyze(code, Settings(select=(rule,)), env)
    assert not result.errors, result.errors
    return [f for f in result.findings if f.rule_id == rule]


def env(cpus: int | None, procs: int | None = None, gpus: int | None = None) -> Environment:
    launch = (
        LaunchInfo(nproc_per_node=procs, launcher="torchrun", sources=("run.sh",))
        if procs
        else None
    )
    return Environment(
        machine=MachineInfo(cpu_count=cpus, source="preflight on gpu01", gpu_count=gpus),
        launch=launch,
    )


# -- DDP405: the machine and the launch ------------------------------------------------------------

WORKERS_8 = (
    HEAD
    + """\
def main(dataset, sampler):
    return DataLoader(dataset, sampler=sampler, num_workers=8)
"""
)


def test_ddp405_counts_processes_per_node_from_the_launch_config() -> None:
    (f,) = found(WORKERS_8, "DDP405", env(16, procs=4))
    assert "num_workers=8 × 4 processes per node (run.sh) = 32 worker processes" in f.message
    assert "16 CPUs (preflight on gpu01)" in f.message
    assert "max(1, cpus // procs - 1) = 3" in f.message
    assert f.fixes == ()


def test_ddp405_quiet_when_the_node_has_room() -> None:
    assert found(WORKERS_8, "DDP405", env(64, procs=4)) == []
    assert found(WORKERS_8, "DDP405", env(32, procs=4)) == []  # exactly full is not over


def test_ddp405_unknown_launch_counts_one_process_and_says_so() -> None:
    assert found(WORKERS_8, "DDP405", env(16)) == []
    (f,) = found(WORKERS_8, "DDP405", env(4))
    assert "num_workers=8 starts 8 worker processes in each rank" in f.message
    assert "processes per node unknown: counted 1) for 4 CPUs" in f.message
    assert "max(1, cpus // procs - 1) = 3" in f.message


def test_ddp405_uses_the_gpu_count_when_no_launch_config() -> None:
    (f,) = found(WORKERS_8, "DDP405", env(16, gpus=8))
    assert "8 GPUs (preflight on gpu01)" in f.message
    assert "= 64 worker processes" in f.message


def test_ddp405_unknown_cpu_count_is_quiet() -> None:
    assert found(WORKERS_8, "DDP405", env(None, procs=8)) == []


def test_ddp405_never_uses_the_cpus_of_the_machine_running_the_linter() -> None:
    code = HEAD + "loader = DataLoader(ds, sampler=s, num_workers=100000)\n"
    assert found(code, "DDP405") == []  # no preflight report: no CPU count to compare with
    assert found(code, "DDP405", Environment(launch=LaunchInfo(nproc_per_node=8))) == []
    (f,) = found(code, "DDP405", env(16))
    assert "for 16 CPUs (preflight on gpu01)" in f.message


def test_ddp405_without_a_report_reports_every_cpu_in_each_of_several_processes() -> None:
    code = (
        "import os\n"
        + HEAD
        + "def main(dataset, sampler):\n"
        + "    return DataLoader(dataset, sampler=sampler, num_workers=os.cpu_count())\n"
    )
    torchrun_8 = Environment(
        launch=LaunchInfo(nproc_per_node=8, launcher="torchrun", sources=("run.sh",))
    )
    (f,) = found(code, "DDP405", torchrun_8)
    assert "num_workers=os.cpu_count() (every CPU) × 8 processes per node (run.sh)" in f.message
    assert "use at most max(1, os.cpu_count() // 8 - 1)" in f.message
    assert found(code, "DDP405") == []  # one process (as far as anyone knows) may use them all


def test_ddp405_resolves_a_local_name_and_says_where_the_number_came_from() -> None:
    code = (
        HEAD
        + """\
def main(dataset, sampler):
    workers = 12
    return DataLoader(dataset, sampler=sampler, num_workers=workers)
"""
    )
    (f,) = found(code, "DDP405", env(8, procs=2))
    assert "num_workers=12 (`workers = 12`) × 2 processes per node" in f.message


def test_ddp405_reassigned_name_is_not_guessed() -> None:
    code = (
        HEAD
        + """\
def main(dataset, sampler, fast):
    workers = 12
    if fast:
        workers = 2
    return DataLoader(dataset, sampler=sampler, num_workers=workers)
"""
    )
    assert found(code, "DDP405", env(8, procs=2)) == []


# -- fix chains ------------------------------------------------------------------------------------

CHAIN = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def main(train_set, model, optimizer, epochs):
    loader = DataLoader(train_set, batch_size=32, shuffle=True)
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
"""

CHAIN_FIXED = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main(train_set, model, optimizer, epochs):
    loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
"""


def test_fix_all_adds_the_sampler_then_set_epoch() -> None:
    fixed, n = fix_text(CHAIN, DATA, unsafe=True)
    assert fixed == CHAIN_FIXED
    assert n == 2
    assert [f.rule_id for f in analyze(fixed, DATA).findings] == []
    again, n_again = fix_text(fixed, DATA, unsafe=True)
    assert again == fixed and n_again == 0


def test_safe_fix_all_leaves_the_sampler_choice_to_the_user() -> None:
    fixed, _ = fix_text(CHAIN, DATA)
    assert fixed == CHAIN  # DDP401's fix changes steps per epoch: unsafe, never automatic
    (f,) = analyze(CHAIN, DATA).findings
    assert f.rule_id == "DDP401" and f.fixes and not f.fixes[0].safe


def test_two_loaders_share_one_import() -> None:
    code = """\
import torch.distributed as dist
from torch.utils.data import DataLoader


def main(train_a, train_b):
    loader_a = DataLoader(train_a, shuffle=True)
    loader_b = DataLoader(train_b, shuffle=True)
    return loader_a, loader_b
"""
    fixed, _ = fix_text(code, Settings(select=("DDP401",)), unsafe=True)
    assert fixed.count("from torch.utils.data.distributed import DistributedSampler") == 1
    assert "DataLoader(train_a, sampler=DistributedSampler(train_a))" in fixed
    assert "DataLoader(train_b, sampler=DistributedSampler(train_b))" in fixed
    ast.parse(fixed)


def test_ddp401_spells_the_sampler_through_a_module_alias() -> None:
    code = """\
import torch
import torch.distributed as dist
import torch.utils.data as tud


class DistributedSampler:
    def __iter__(self):
        return iter(())


def main(train_set):
    return tud.DataLoader(train_set, shuffle=True)
"""
    (f,) = found(code, "DDP401")
    fixed = apply_edits(code, f.fixes[0].edits)
    assert "tud.DataLoader(train_set, sampler=tud.DistributedSampler(train_set))" in fixed
    assert "import torch.utils.data.distributed" not in fixed


# -- removing and adding arguments ----------------------------------------------------------------

REMOVALS = [
    ("DataLoader(ds, shuffle=True, sampler=s)", "DataLoader(ds, sampler=s)"),
    ("DataLoader(ds, sampler=s, shuffle=True)", "DataLoader(ds, sampler=s)"),
    ("DataLoader(ds, sampler=s, shuffle=True,)", "DataLoader(ds, sampler=s,)"),
    ("DataLoader(ds,\n    shuffle=True,\n    sampler=s)", "DataLoader(ds,\n    sampler=s)"),
    ("DataLoader(ds,\n    sampler=s,\n    shuffle=True)", "DataLoader(ds,\n    sampler=s)"),
    (
        "DataLoader(\n    ds,\n    sampler=s,\n    shuffle=True\n)",
        "DataLoader(\n    ds,\n    sampler=s,\n)",
    ),
    (
        "DataLoader(\n    ds,\n    sampler=s,\n    shuffle=True,  # why not\n)",
        "DataLoader(\n    ds,\n    sampler=s,\n    # why not\n)",
    ),
    (
        "DataLoader(ds,  # data\n    sampler=s, shuffle=True)",
        "DataLoader(ds,  # data\n    sampler=s)",
    ),
    (
        "DataLoader(ds, sampler=s,  # sampler\n    shuffle=True)",
        "DataLoader(ds, sampler=s,  # sampler\n    )",
    ),
    (
        "DataLoader(dataset=ds, shuffle=True, sampler=s, num_workers=2)",
        "DataLoader(dataset=ds, sampler=s, num_workers=2)",
    ),
]


@pytest.mark.parametrize(("call", "expected"), REMOVALS)
def test_ddp403_removal_keeps_the_call_valid(call: str, expected: str) -> None:
    code = HEAD + "def f(ds, s):\n    return " + call.replace("\n", "\n    ") + "\n"
    (f,) = found(code, "DDP403")
    fixed = apply_edits(code, f.fixes[0].edits)
    assert fixed == HEAD + "def f(ds, s):\n    return " + expected.replace("\n", "\n    ") + "\n"
    ast.parse(fixed)
    assert found(fixed, "DDP403") == []


ADDITIONS = [
    (
        "DataLoader(ds, sampler=s, num_workers=4)",
        "DataLoader(ds, sampler=s, num_workers=4, pin_memory=True)",
    ),
    (
        "DataLoader(\n    ds,\n    sampler=s,\n    num_workers=4,\n)",
        "DataLoader(\n    ds,\n    sampler=s,\n    num_workers=4,\n    pin_memory=True,\n)",
    ),
    (
        "DataLoader(\n    ds,\n    num_workers=4  # cpu bound\n)",
        "DataLoader(\n    ds,\n    num_workers=4,  # cpu bound\n    pin_memory=True\n)",
    ),
    ("DataLoader(ds,\n    num_workers=4)", "DataLoader(ds,\n    num_workers=4, pin_memory=True)"),
]


@pytest.mark.parametrize(("call", "expected"), ADDITIONS)
def test_ddp404_addition_follows_the_call_layout(call: str, expected: str) -> None:
    def wrap(c: str) -> str:
        return (
            HEAD
            + "def f(ds, s, rank):\n    loader = "
            + c.replace("\n", "\n    ")
            + "\n    for x in loader:\n        x.cuda(rank)\n"
        )

    code = wrap(call)
    (f,) = found(code, "DDP404")
    fixed = apply_edits(code, f.fixes[0].edits)
    assert fixed == wrap(expected)
    assert found(fixed, "DDP404") == []


def test_crlf_file_keeps_its_line_endings() -> None:
    code = (
        HEAD + "def f(ds, s, rank):\n    loader = DataLoader(\n        ds,\n        shuffle=True,\n"
        "        sampler=s,\n        num_workers=4,\n    )\n    for x in loader:\n        x.cuda(rank)\n"
    ).replace("\n", "\r\n")
    fixed, n = fix_text(code, DATA)
    assert n == 2
    assert "\n" not in fixed.replace("\r\n", "")
    assert "shuffle" not in fixed and "        pin_memory=True,\r\n" in fixed
    ast.parse(fixed)


def test_line_suppression() -> None:
    code = CHAIN.replace(
        "    for epoch in range(epochs):\n", "    for epoch in range(epochs):\n"
    ).replace("shuffle=True)", "shuffle=True)  # ddp-lsp: ignore[DDP401]")
    assert found(code, "DDP401") == []


# -- DDP402 edge cases ---------------------------------------------------------------------------


def test_ddp402_set_epoch_on_another_sampler_does_not_count() -> None:
    code = (
        HEAD
        + """\
def main(ds_a, ds_b, model):
    sampler_a = DistributedSampler(ds_a)
    sampler_b = DistributedSampler(ds_b)
    loader_a = DataLoader(ds_a, sampler=sampler_a)
    loader_b = DataLoader(ds_b, sampler=sampler_b)
    for epoch in range(10):
        sampler_a.set_epoch(epoch)
        for x in loader_a:
            model(x)
        for x in loader_b:
            model(x)
"""
    )
    (f,) = found(code, "DDP402")
    assert "sampler_b.set_epoch(epoch)" in f.message


def test_ddp402_unknown_set_epoch_receiver_counts() -> None:
    code = (
        HEAD
        + """\
def main(ds, model, samplers):
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    for epoch in range(10):
        for s in samplers:
            s.set_epoch(epoch)
        for x in loader:
            model(x)
"""
    )
    assert found(code, "DDP402") == []


def test_ddp402_helper_with_a_sampler_parameter_counts() -> None:
    code = (
        HEAD
        + """\
def run_epoch(model, loader, train_sampler, epoch):
    for x in loader:
        model(x)


def main(ds, model):
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    for epoch in range(10):
        run_epoch(model, loader, None, epoch)
"""
    )
    assert found(code, "DDP402") == []


def test_ddp402_lightning_file_is_quiet() -> None:
    code = (
        "import pytorch_lightning as pl\n"
        + HEAD
        + """\
def main(ds, model):
    loader = DataLoader(ds, sampler=DistributedSampler(ds))
    for epoch in range(10):
        for x in loader:
            model(x)
"""
    )
    assert found(code, "DDP402") == []


# -- DDP406 across chunks --------------------------------------------------------------------------


def test_ddp406_init_split_from_the_class_line() -> None:
    code = """\
import json
import torch.distributed as dist
from torch.utils.data import Dataset


class RecordDataset(Dataset):
    def __len__(self):
        return len(self.records)

    def __init__(self, path):
        with open(path) as f:
            self.records = json.load(f)

    def __getitem__(self, i):
        return self.records[i]
"""
    (f,) = found(code, "DDP406")
    assert "`self.records` of dataset `RecordDataset`" in f.message


def test_ddp406_needs_getitem() -> None:
    code = """\
import json
import torch.distributed as dist
from torch.utils.data import Dataset


class RecordDataset(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.records = json.load(f)

    def __iter__(self):
        return iter(self.records)
"""
    assert found(code, "DDP406") == []


# -- the golden script, fixed ------------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "data_train.py"
GOLDEN_ENV = Environment(
    machine=MachineInfo(cpu_count=16, source="preflight on gpu01"),
    launch=LaunchInfo(nproc_per_node=4, launcher="torchrun", sources=("run.sh",)),
)


def test_golden_script_fix_all() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    fixed, n = fix_text(text, DATA, unsafe=True, env=GOLDEN_ENV)
    ast.parse(fixed)
    left = sorted({f.rule_id for f in analyze(fixed, DATA, GOLDEN_ENV).findings})
    assert left == ["DDP405", "DDP406"]  # no fixes: the numbers and the layout are the user's
    assert "        train_sampler.set_epoch(epoch)\n" in fixed
    assert "# new order every epoch" in fixed and "shuffle=True,  #" not in fixed
    assert fixed.count("pin_memory=True") == 3
    assert "sampler=DistributedSampler(packed)" in fixed
    assert fix_text(fixed, DATA, unsafe=True, env=GOLDEN_ENV) == (fixed, 0)
    assert n >= 5


# -- any call layout: generated ------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KWS = ["batch_size=8", "sampler=s", "shuffle=True", "num_workers=4", "drop_last=True"]
_SEPS = [", ", ",\n        ", ",  # note\n        ", "\n        , "]


@st.composite
def loader_calls(draw: st.DrawFn) -> str:
    kws = draw(st.permutations(_KWS))
    items = ["ds", *kws]
    text = "DataLoader(" + draw(st.sampled_from(["", "\n        ", "  # open\n        "]))
    for i, item in enumerate(items):
        text += item
        if i + 1 < len(items):
            text += draw(st.sampled_from(_SEPS))
    text += draw(st.sampled_from(["", ",", ",  # end\n    ", "\n    ", ",\n    "]))
    return text + ")"


def _wrap(call: str) -> str:
    return (
        HEAD
        + "def f(ds, s, rank):\n    loader = "
        + call
        + "\n    for x in loader:\n        x.cuda(rank)\n"
    )


def _keywords(code: str) -> list[str]:
    tree = ast.parse(code)
    call = next(
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "DataLoader"
    )
    return sorted(ast.unparse(k) for k in call.keywords)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loader_calls())
def test_ddp403_and_ddp404_fixes_in_any_layout(call: str) -> None:
    code = _wrap(call)
    ast.parse(code)
    before = _keywords(code)
    (f403,) = found(code, "DDP403")
    removed = apply_edits(code, f403.fixes[0].edits)
    assert _keywords(removed) == [k for k in before if k != "shuffle=True"], removed
    assert removed.count("#") == code.count("#"), removed
    assert found(removed, "DDP403") == []
    (f404,) = found(code, "DDP404")
    added = apply_edits(code, f404.fixes[0].edits)
    assert _keywords(added) == sorted([*before, "pin_memory=True"]), added
    assert added.count("#") == code.count("#"), added
    assert found(added, "DDP404") == []


# -- incremental analysis equals a fresh one ---------------------------------------------------------

from ddp_lsp.core.document import Document, split_lines  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402

SCRIPT_STYLE = (
    HEAD
    + """\
train_set = torch.utils.data.TensorDataset(torch.randn(64, 8))
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=8, sampler=sampler, num_workers=4)

for epoch in range(3):
    for (x,) in loader:
        x = x.cuda(non_blocking=True)
"""
)
_DATA_FRAGMENTS = st.sampled_from(
    [
        "",
        "\n",
        "(",
        ")",
        "    ",
        "shuffle=True, ",
        "num_workers=64, ",
        "pin_memory=True, ",
        "sampler.set_epoch(epoch)\n",
        "    train_sampler.set_epoch(epoch)\n",
        "import accelerate\n",
        "def __getitem__(self, i):\n    return i\n",
        "val_",
        "for epoch in range(2):\n",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.sampled_from(["golden", "script"]))
def test_incremental_equals_full_for_data_rules(data: st.DataObject, which: str) -> None:
    text = GOLDEN.read_text(encoding="utf-8") if which == "golden" else SCRIPT_STYLE
    doc = Document(text, DATA.rank_model)

    def key(t: str | Document) -> list[tuple[object, ...]]:
        res = analyze(t, DATA, GOLDEN_ENV)
        return [(f.rule_id, f.span, f.message, f.fixes) for f in res.findings]

    key(doc)
    for _ in range(data.draw(st.integers(min_value=1, max_value=6), label="edits")):
        lines = split_lines(text)
        line = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="line")
        col = data.draw(st.integers(min_value=0, max_value=len(lines[line])), label="col")
        col = min(col, len(lines[line].rstrip("\r\n")))
        frag = data.draw(_DATA_FRAGMENTS, label="text")
        offset = sum(len(x) for x in lines[:line]) + col
        text = text[:offset] + frag + text[offset:]
        doc.apply_edit(Pos(line, col), Pos(line, col), frag)
        assert doc.text == text
        assert key(doc) == key(text)


def test_ddp405_cpu_count_in_every_process() -> None:
    code = (
        "import os\n"
        + HEAD
        + "def main(dataset, sampler):\n"
        + "    return DataLoader(dataset, sampler=sampler, num_workers=os.cpu_count())\n"
    )
    (f,) = found(code, "DDP405", env(32, procs=8))
    assert "num_workers=os.cpu_count() (all 32 CPUs) × 8 processes per node (run.sh)" in f.message
    assert "= 256 worker processes" in f.message and "= 3" in f.message
    assert found(code, "DDP405", env(32)) == []  # one process may use every CPU


def test_ddp402_loader_from_a_project_helper_that_builds_the_sampler(tmp_path: Path) -> None:
    """M14: the DistributedSampler is built in a data module and reached as `loader.sampler`."""
    from ddp_lsp.project import ProjectIndex, compute

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text(
        "from .build import make_loaders as _make\n\n\ndef loaders(cfg, ds):\n    return _make(cfg, ds)\n"
    )
    (tmp_path / "data" / "build.py").write_text(
        "from torch.utils.data import DataLoader, DistributedSampler\n\n\n"
        "def make_loaders(cfg, ds):\n"
        "    sampler = DistributedSampler(ds, shuffle=True)\n"
        "    return ds, DataLoader(ds, sampler=sampler, batch_size=cfg.bs)\n"
    )
    main = (
        "import torch.distributed as dist\n"
        "from data import loaders\n\n\n"
        "def main(cfg, model, ds):\n"
        "    dist.init_process_group('nccl')\n"
        "    _, train_loader = loaders(cfg, ds)\n"
        "    for epoch in range(cfg.epochs):\n"
        "        for batch in train_loader:\n"
        "            model(batch).sum().backward()\n"
    )
    (tmp_path / "main.py").write_text(main)
    facts = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    result = analyze(main, project=facts.for_path("main.py"))
    got = [f for f in result.findings if f.rule_id == "DDP402"]
    assert [f.span.start.line for f in got] == [7]
    assert "train_loader.sampler.set_epoch(epoch)" in got[0].message
    fixed, _ = fix_text(main, Settings(select=("DDP402",)), project=facts.for_path("main.py"))
    assert 'if hasattr(getattr(train_loader, "sampler", None), "set_epoch"):' in fixed
    kept = main.replace(
        "        for batch", "        train_loader.sampler.set_epoch(epoch)\n        for batch"
    )
    again = analyze(kept, project=facts.for_path("main.py"))
    assert not [f for f in again.findings if f.rule_id == "DDP402"]


def test_ddp406_parallel_lists_reordered_with_a_large_one_are_named_with_it() -> None:
    """`[self.x[i] for i in order]` is judged by `self.x`'s own source (F38), and lists
    reordered by the same indices as a large one are as long as it (YOLO's datasets)."""
    code = """\
import os

from torch.utils.data import Dataset


class Images(Dataset):
    def __init__(self, root, cache, order):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
        labels, shapes = zip(*cache.values())
        self.labels = list(labels)
        self.kept = self.load(root)
        self.files = [self.files[i] for i in order]
        self.labels = [self.labels[i] for i in order]
        self.kept = [self.kept[i] for i in range(0, len(self.kept), 2)]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.files[i], self.labels[i], self.kept[i]
"""
    (f,) = found(code, "DDP406")
    assert f.message.startswith("`self.files` of dataset `Images`")
    assert "(also `self.labels`)" in f.message
