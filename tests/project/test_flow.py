"""Facts across files: parameter kinds, callee properties, distributed, provenance, order."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lsp.core import facts as fact_model
from ddp_lsp.project import ModuleProjectFacts, ProjectFacts, compute

from .helpers import FIXTURES, build, facts_of, plain


@pytest.fixture(scope="module")
def deit() -> ProjectFacts:
    return facts_of(FIXTURES / "deit")


def _m(pf: ProjectFacts, name: str) -> ModuleProjectFacts:
    return pf.modules[name]


def test_engine_parameters_get_their_callers_kinds(deit: ProjectFacts) -> None:
    engine = _m(deit, "engine")
    model = engine.extra_kinds[("train_one_epoch", "model")]
    assert model.kind == fact_model.DDP
    assert (
        str(model.origin) == "model is wrapped in DistributedDataParallel at main.py:12"
    )  # not :11, `model = Linear`
    assert [v.path for v in model.via] == ["main.py"]
    assert model.via[0].line == 18  # the call, not `def main`
    assert not model.mixed
    assert engine.extra_kinds[("train_one_epoch", "loss_scaler")].kind == fact_model.SCALER
    assert engine.extra_kinds[("train_one_epoch", "optimizer")].kind == fact_model.OPTIMIZER
    # Through a second call inside engine.py: evaluate(net) -> log_stats(net).
    deep = engine.extra_kinds[("log_stats", "net")]
    assert deep.kind == fact_model.DDP
    assert [(v.path, v.line) for v in deep.via] == [("main.py", 19), ("engine.py", 24)]
    # main.py's own kinds are the core's, not extra.
    assert not _m(deit, "main").extra_kinds


def test_helper_properties_by_the_importers_spelling(deit: ProjectFacts) -> None:
    main = _m(deit, "main")
    assert fact_model.GUARDS_ITSELF in main.callee_props["utils.save_on_master"].props
    engine = _m(deit, "engine")
    assert engine.callee_props["arm"].target == ("util.misc", "all_reduce_mean")
    assert fact_model.COLLECTIVE in engine.callee_props["arm"].props
    assert fact_model.RANK_PREDICATE in engine.callee_props["misc.is_main_process"].props
    # Transitive across files: train_one_epoch reaches all_reduce in util/misc.py.
    tre = main.callee_props["train_one_epoch"]
    assert fact_model.COLLECTIVE in tre.props
    assert tre.origins[fact_model.COLLECTIVE].path == "util/misc.py"
    # init_process_group stays direct, as in the core: main() is not the initialiser.
    assert fact_model.INITS_PG in main.callee_props["utils.init_distributed_mode"].props
    assert fact_model.INITS_PG not in main.callee_props["train_one_epoch"].props


def test_distributed_reaches_every_imported_module(deit: ProjectFacts) -> None:
    for name in ("main", "engine", "util", "util.misc"):
        d = _m(deit, name).distributed
        assert d is not None and d.path == "util/misc.py", name
    assert _m(deit, "tools_unused").distributed is None


def test_collective_helper_called_under_a_rank_guard_from_another_module() -> None:
    pf = facts_of(FIXTURES / "resume")
    train = _m(pf, "train")
    resume = train.callee_props["do_resume"]
    assert resume.target == ("utils.checkpoint", "resume_from")
    assert fact_model.COLLECTIVE in resume.props
    # The broadcast itself, not the `def` line.
    assert str(resume.origins[fact_model.COLLECTIVE]).endswith("utils/checkpoint.py:7")
    assert fact_model.COLLECTIVE not in train.callee_props["load_weights"].props
    assert _m(pf, "utils.checkpoint").distributed is not None


def test_trainer_package_with_relative_imports_and_a_class_hierarchy() -> None:
    pf = facts_of(FIXTURES / "trainer")
    base = _m(pf, "trainer.core.base")
    # launch.py: DDPTrainer(net, scaler) runs BaseTrainer.__init__, which stores them on self.
    assert base.extra_kinds[("BaseTrainer", "self.model")].kind == fact_model.DDP
    assert base.extra_kinds[("BaseTrainer", "self.scaler")].kind == fact_model.SCALER
    origin = base.extra_kinds[("BaseTrainer", "self.model")].origin
    assert (origin.path, origin.line) == ("src/trainer/launch.py", 11)
    via = base.extra_kinds[("BaseTrainer", "self.model")].via
    assert [(v.path, v.line) for v in via] == [("src/trainer/launch.py", 13)]
    sub = _m(pf, "trainer.core.ddp_trainer")
    # self.sync() in DDPTrainer is BaseTrainer.sync, collective through trainer/dist.py.
    assert sub.callee_props["DDPTrainer.sync"].target == ("trainer.core.base", "BaseTrainer.sync")
    assert fact_model.COLLECTIVE in sub.callee_props["DDPTrainer.sync"].props
    assert all(m.distributed is not None for m in pf.modules.values())
    # Attributes set in the base class (another module) are the subclass's too.
    inherited = sub.extra_kinds[("DDPTrainer", "self.model")]
    assert inherited == base.extra_kinds[("BaseTrainer", "self.model")]


def test_shared_engine_ddp_and_single_gpu_entry_points() -> None:
    # Decision (ddp_lsp/project/flow.py): the engine's parameter is "ddp", marked mixed, with
    # the DDP caller in its provenance; the single-GPU entry point stays non-distributed.
    pf = facts_of(FIXTURES / "shared")
    model = _m(pf, "engine").extra_kinds[("train_one_epoch", "model")]
    assert model.kind == fact_model.DDP and model.mixed
    assert model.origin.path == "main_ddp.py" and [v.path for v in model.via] == ["main_ddp.py"]
    opt = _m(pf, "engine").extra_kinds[("train_one_epoch", "optimizer")]
    assert opt.kind == fact_model.OPTIMIZER and not opt.mixed  # both callers pass an optimizer
    assert _m(pf, "engine").distributed is not None
    assert _m(pf, "main_ddp").distributed is not None
    assert _m(pf, "train_single").distributed is None


@pytest.mark.parametrize("name", ["deit", "resume", "trainer", "shared"])
def test_same_facts_whatever_order_files_are_read_in(name: str) -> None:
    reference = plain(compute(build(FIXTURES / name)))
    for seed in range(6):
        assert plain(compute(build(FIXTURES / name, seed=seed))) == reference


def test_call_cycles_across_modules_converge(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text(
        "import torch\nimport torch.distributed as dist\nimport b\n\n"
        "def start(m):\n    dist.init_process_group('nccl')\n"
        "    m = torch.nn.parallel.DistributedDataParallel(m)\n    ping(m, 3)\n\n"
        "def ping(model, n):\n    if n:\n        b.pong(model, n - 1)\n"
    )
    (tmp_path / "b.py").write_text(
        "import a\nimport torch.distributed as dist\n\n"
        "def pong(net, n):\n    dist.barrier()\n    a.ping(net, n)\n"
    )
    pf = compute(build(tmp_path))
    assert pf.rounds < 10
    assert _m(pf, "b").extra_kinds[("pong", "net")].kind == fact_model.DDP
    assert fact_model.COLLECTIVE in _m(pf, "a").callee_props["b.pong"].props
    # ping is collective through pong, and pong through ping: both, without looping.
    assert fact_model.COLLECTIVE in _m(pf, "b").callee_props["a.ping"].props


def test_an_edit_changes_the_facts(tmp_path: Path) -> None:
    # Removing the DDP wrap from main.py removes the engine's fact; putting it back restores it.
    (tmp_path / ".git").mkdir()
    engine = "def train(model):\n    model.train()\n"
    wrapped = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nimport engine\n\n"
        "def main(m):\n    m = DDP(m)\n    engine.train(m)\n"
    )
    (tmp_path / "engine.py").write_text(engine)
    (tmp_path / "main.py").write_text(wrapped)
    index = build(tmp_path)
    pk = compute(index).modules["engine"].extra_kinds[("train", "model")]
    assert [(v.path, v.line) for v in pk.via] == [("main.py", 6)]  # engine.train(m)
    index.update(tmp_path / "main.py", wrapped.replace("m = DDP(m)", "m = m"))
    assert not compute(index).modules["engine"].extra_kinds
    index.update(tmp_path / "main.py", wrapped)
    assert ("train", "model") in compute(index).modules["engine"].extra_kinds


def test_conflicting_callers_resolve_the_same_way_in_any_order(tmp_path: Path) -> None:
    # Two entry points pass differently wrapped models to one engine: the pick is by sorting
    # (kind, then provenance), never by which file was read first.
    (tmp_path / ".git").mkdir()
    (tmp_path / "engine.py").write_text("def train(model):\n    model.train()\n")
    for name, wrapper in (("z_ddp", "DistributedDataParallel"), ("a_fsdp", "fsdp")):
        imp = (
            "from torch.nn.parallel import DistributedDataParallel\n"
            if wrapper == "DistributedDataParallel"
            else "from torch.distributed.fsdp import FullyShardedDataParallel as fsdp\n"
        )
        (tmp_path / f"{name}.py").write_text(
            f"{imp}import engine\n\ndef main(m):\n    m = {wrapper}(m)\n    engine.train(m)\n"
        )
    seen = set()
    for seed in range(8):
        pk = compute(build(tmp_path, seed=seed)).modules["engine"].extra_kinds[("train", "model")]
        seen.add((pk.kind, pk.origin, pk.via, pk.mixed))
    assert len(seen) == 1
    assert next(iter(seen))[0] == fact_model.DDP


def _chain(root: Path, n: int) -> None:
    """c0 wraps a model in DDP and passes it down c1.step ... c{n-1}.step; the last one
    performs a collective: the kind travels n-1 calls down, the property n-1 calls up."""
    (root / ".git").mkdir()
    (root / "c0.py").write_text(
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\nimport c1\n\n"
        "def run(m):\n    dist.init_process_group('nccl')\n    m = DDP(m)\n    c1.step(m)\n"
    )
    for i in range(1, n - 1):
        (root / f"c{i}.py").write_text(
            f"import c{i + 1}\n\ndef step(model):\n    c{i + 1}.step(model)\n"
        )
    (root / f"c{n - 1}.py").write_text(
        "import torch.distributed as dist\n\ndef step(model):\n    dist.barrier()\n"
    )


def test_propagation_costs_the_project_size_not_size_times_chain_length(tmp_path: Path) -> None:
    # Each round of the fixed point looks only at what reads a fact that changed in the round
    # before (semi-naive evaluation): along a chain of n modules the rounds together look at
    # each call a bounded number of times. Re-evaluating every call in every round, as
    # before, looked at about n * n of them.
    n = 30
    _chain(tmp_path, n)
    pf = compute(build(tmp_path))
    last = _m(pf, f"c{n - 1}").extra_kinds[("step", "model")]
    assert last.kind == fact_model.DDP
    assert len(last.via) == n - 1
    assert fact_model.COLLECTIVE in _m(pf, "c0").callee_props["c1.step"].props
    assert all(_m(pf, f"c{i}").distributed is not None for i in range(n))
    assert pf.rounds >= n - 1  # one hop per round
    assert pf.evaluations <= 6 * n, pf.evaluations


def test_an_edit_in_a_body_reuses_import_resolution(tmp_path: Path) -> None:
    # The server's indexer recomputes after each edit: an edit inside a function body keeps
    # every module's imports, functions and classes, so resolution is reused and only the
    # edited module's tables are rebuilt (before, a new resolver rebuilt them for all).
    n = 30
    _chain(tmp_path, n)
    index = build(tmp_path)
    first = compute(index)
    res = first.resolver
    assert res is not None
    built = res.tables_built
    assert built >= n
    mid = tmp_path / "c10.py"
    index.update(mid, mid.read_text().replace("c11.step(model)", "c11.step(model)\n    x = 1"))
    again = compute(index, first)
    assert again.resolver is res
    assert res.tables_built - built <= 2  # c10's aliases and functions
    assert first.prepared == n and again.prepared == 1  # only c10's call sites resolved again
    assert plain(again) == plain(compute(index))


def test_single_process_reuses_each_modules_edges_until_its_summary_changes(
    tmp_path: Path,
) -> None:
    # reach.single_process's call graph is kept per module between computations with one
    # resolver (the server's indexer after an edit in a body); an edited module's edges are
    # built again. Reusing c0's old edges would leave `tool` single-process code after
    # c0.run starts calling it (and distributed code after the call is guarded again).
    _chain(tmp_path, 4)
    c0 = tmp_path / "c0.py"
    c0.write_text("import tool\n" + c0.read_text())
    (tmp_path / "tool.py").write_text(
        "import torch\n\ndef save_it(m):\n    torch.save(m, 'm.pt')\n\n"
        "def main():\n    save_it(None)\n"
    )
    index = build(tmp_path)
    pf = compute(index)
    first = pf
    base = c0.read_text()
    edits = [
        base.replace("    c1.step(m)\n", "    c1.step(m)\n    tool.main()\n"),
        base.replace(
            "    c1.step(m)\n",
            "    c1.step(m)\n    if dist.get_rank() == 0:\n        tool.main()\n",
        ),
        base.replace("    c1.step(m)\n", "    c1.step(m)\n    tool.main()\n"),
        base,
    ]
    seen = set()
    for text in edits:
        before = pf
        index.update(c0, text)
        pf = compute(index, pf)
        full = compute(index)
        assert pf.resolver is first.resolver  # resolution reused: the edges may be kept
        assert {m: f.single_process for m, f in pf.modules.items()} == {
            m: f.single_process for m, f in full.modules.items()
        }, text
        assert plain(pf) == plain(full)
        assert pf.edges["c0"] is not before.edges["c0"]
        assert all(pf.edges[m] is before.edges[m] for m in pf.edges if m != "c0")
        seen.add(full.modules["tool"].single_process)
    # The edits changed what is single-process code in `tool` (the test can fail).
    assert frozenset({"save_it", "main"}) <= max(seen, key=len)
    assert len(seen) >= 2


def test_incremental_equals_full_through_a_sequence_of_edits(tmp_path: Path) -> None:
    n = 12
    _chain(tmp_path, n)
    index = build(tmp_path)
    pf = compute(index)
    c5 = tmp_path / "c5.py"
    edits: list[tuple[Path, str | None]] = [
        # Body only (resolution reused), then the chain cut, then restored.
        (c5, "import c6\n\ndef step(model):\n    y = model\n    c6.step(y)\n"),
        (c5, "import c6\n\ndef step(model):\n    pass\n"),
        (c5, "import c6\n\ndef step(model):\n    c6.step(model)\n"),
        # A signature changes (a new resolver), an import is added, a module comes and goes.
        (c5, "import c6\n\ndef step(net, extra=0):\n    c6.step(net)\n"),
        (tmp_path / "c3.py", "import c4\nimport c9\n\ndef step(model):\n    c9.step(model)\n"),
        (tmp_path / "extra.py", "import c1\n\ndef go(m):\n    c1.step(m)\n"),
        (tmp_path / "extra.py", None),
        (tmp_path / "c0.py", (tmp_path / "c0.py").read_text().replace("m = DDP(m)", "m = m")),
    ]
    for path, text in edits:
        index.update(path, text)
        pf = compute(index, pf)
        full = compute(index)
        assert plain(pf) == plain(full), (path.name, text)
        assert {m: f.only_called_guarded for m, f in pf.modules.items()} == {
            m: f.only_called_guarded for m, f in full.modules.items()
        }
