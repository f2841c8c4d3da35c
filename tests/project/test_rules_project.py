"""Rules with facts from other files: each case is a small project, checked with and without
the project view (the "without" half shows what the per-file analysis misses or gets wrong)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Finding
from ddp_lsp.project import ProjectIndex, compute
from tests.project.helpers import FIXTURES

# Every rule, DDP501 (off by default) included.


def _write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


# Every rule, DDP304 (off by default) included.
ALL = Settings(select=("DDP", "DDP304", "DDP501", "DDP503"))


def _findings(root: Path, rel: str, project: bool = True) -> list[Finding]:
    text = (root / rel).read_text()
    if not project:
        return list(analyze(text, ALL).findings)
    facts = compute(ProjectIndex(root, cache_dir=False).build())
    return list(analyze(text, ALL, project=facts.for_path(rel)).findings)


def _ids(findings: list[Finding]) -> list[tuple[str, int]]:
    return [(f.rule_id, f.span.start.line + 1) for f in findings]


# -- DDP101: the DDP wrap is in another file ---------------------------------------------------


def test_ddp101_in_engine_cites_the_wrap_in_main() -> None:
    root = FIXTURES / "deit"
    assert "DDP101" not in {f.rule_id for f in _findings(root, "engine.py", project=False)}
    [f] = [f for f in _findings(root, "engine.py") if f.rule_id == "DDP101"]
    assert f.message.endswith("(model is wrapped in DistributedDataParallel at main.py:12)")
    elsewhere = [(Path(r.path).name, r.span.start.line + 1, r.message) for r in f.related if r.path]
    assert elsewhere == [
        ("main.py", 12, "model is wrapped in DistributedDataParallel"),
        ("main.py", 18, "main calls train_one_epoch(model=model)"),
    ]
    assert all(Path(r.path).is_absolute() for r in f.related if r.path)


def test_ddp101_shared_engine_fix_keeps_the_single_gpu_caller_working() -> None:
    root = FIXTURES / "shared"
    [f] = [f for f in _findings(root, "engine.py") if f.rule_id == "DDP101"]
    assert "at main_ddp.py:9; some callers pass one that is not)" in f.message
    facts = compute(ProjectIndex(root, cache_dir=False).build())
    fixed, n = fix_text((root / "engine.py").read_text(), project=facts.for_path("engine.py"))
    assert n == 1
    # train_single.py passes a plain nn.Module, which has no no_sync().
    assert 'with model.no_sync() if is_accumulating and hasattr(model, "no_sync") else' in fixed
    compile(fixed, "engine.py", "exec")
    # The single-GPU entry point itself gets nothing from the project.
    assert _findings(root, "train_single.py") == []


def test_ddp101_fix_is_plain_when_every_caller_wraps(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "engine.py": """\
            def train(model, loader, optimizer, accum):
                for i, batch in enumerate(loader):
                    model(batch).sum().backward()
                    if (i + 1) % accum == 0:
                        optimizer.step()
            """,
            "main.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            import engine

            dist.init_process_group("gloo")
            net = DDP(torch.nn.Linear(2, 2))
            engine.train(net, [], torch.optim.SGD(net.parameters(), lr=0.1), 4)
            """,
        },
    )
    facts = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    fixed, n = fix_text((tmp_path / "engine.py").read_text(), project=facts.for_path("engine.py"))
    assert n == 1 and "with model.no_sync() if is_accumulating else" in fixed
    [f] = [f for f in _findings(tmp_path, "engine.py") if f.rule_id == "DDP101"]
    assert "(net is wrapped in DistributedDataParallel at main.py:8)" in f.message


# -- DDP103: a collective in a helper of another module --------------------------------------------


def test_ddp103_rank_guarded_call_into_broadcasting_resume_helper() -> None:
    root = FIXTURES / "resume"
    assert "DDP103" not in {f.rule_id for f in _findings(root, "train.py", project=False)}
    found = [f for f in _findings(root, "train.py") if f.rule_id == "DDP103"]
    assert _ids(found) == [("DDP103", 12)]  # do_resume; load_weights (no collective) is fine
    assert "`resume_from` performs a collective at utils/checkpoint.py:7" in found[0].message
    assert any(r.path and r.path.endswith("utils/checkpoint.py") for r in found[0].related)


def test_trainer_package_class_hierarchy_across_modules() -> None:
    root = FIXTURES / "trainer"
    rel = "src/trainer/core/ddp_trainer.py"
    assert _findings(root, rel, project=False) == []
    found = {f.rule_id: f for f in _findings(root, rel)}
    assert _ids(list(found.values())) == [("DDP101", 10), ("DDP103", 19)]
    # self.model is set in BaseTrainer.__init__ (core/base.py) from launch.py's DDP(...).
    assert found["DDP101"].message.endswith(
        "(net is wrapped in DistributedDataParallel at src/trainer/launch.py:11)"
    )
    # self.sync is BaseTrainer.sync, which all-reduces through trainer/dist.py; is_leader is a
    # rank-0 predicate of trainer/dist.py.
    assert "`reduce_all` performs a collective at src/trainer/dist.py:5" in found["DDP103"].message
    assert "(`if is_leader():`)" in found["DDP103"].message


# -- DDP2xx: the scaler comes from a caller ---------------------------------------------------------

_AMP_MAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import engine
{imports}

dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(2, 2).cuda())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_scaler = {scaler}
engine.train(model, [], optimizer, loss_scaler)
"""

_AMP_ENGINE = """\
import torch


def train(model, loader, solver, loss_scaler):
    for batch in loader:
        loss = model(batch).sum()
        loss_scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        solver.step()
"""


def test_ddp201_ddp203_know_the_scaler_and_optimizer_from_the_caller(tmp_path: Path) -> None:
    main = _AMP_MAIN.format(imports="", scaler='torch.amp.GradScaler("cuda")')
    _write(tmp_path, {"main.py": main, "engine.py": _AMP_ENGINE})
    # Alone, engine.py is not distributed code (only the any-module rules run) and `solver` is
    # not known as an optimizer: the clip of scaled gradients is found, the step that bypasses
    # the scaler is missed, also when told the module is distributed.
    alone = _findings(tmp_path, "engine.py", project=False)
    assert {f.rule_id for f in alone} == {"DDP201"}
    told = analyze((tmp_path / "engine.py").read_text(), Settings(assume_distributed=True))
    assert {f.rule_id for f in told.findings} == {"DDP201"}
    found = {f.rule_id: f for f in _findings(tmp_path, "engine.py")}
    assert found["DDP201"].message.endswith("(loss_scaler is a GradScaler at main.py:11)")
    assert found["DDP203"].message.endswith(
        "(loss_scaler is a GradScaler at main.py:11; optimizer is an optimizer at main.py:10)"
    )
    assert [Path(r.path).name for r in found["DDP203"].related if r.path] == ["main.py"] * 4


_WRAPPER = """\
import torch


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def scale(self, loss):
        return self._scaler.scale(loss)

    def step(self, optimizer, clip=None, parameters=None):
        self._scaler.unscale_(optimizer)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(parameters, clip)
        self._scaler.step(optimizer)
        self._scaler.update()
"""


@pytest.mark.parametrize("imports", ["from utils.amp import NativeScaler", "from utils import amp"])
def test_scaler_wrapper_that_unscales_itself_is_not_a_grad_scaler(
    tmp_path: Path, imports: str
) -> None:
    scaler = "NativeScaler()" if "NativeScaler" in imports else "amp.NativeScaler()"
    engine = """\
    def train(model, loader, optimizer, loss_scaler):
        for batch in loader:
            loss = model(batch).sum()
            loss_scaler.scale(loss).backward()
            loss_scaler.step(optimizer, clip=1.0, parameters=model.parameters())
    """
    _write(
        tmp_path,
        {
            "main.py": _AMP_MAIN.format(imports=imports, scaler=scaler),
            "engine.py": engine,
            "utils/__init__.py": "",
            "utils/amp.py": _WRAPPER,
        },
    )
    # Alone, `loss_scaler.scale(...)` makes it look like a GradScaler stepped without update().
    told = analyze((tmp_path / "engine.py").read_text(), Settings(assume_distributed=True))
    assert "DDP202" in {f.rule_id for f in told.findings}
    assert "DDP202" not in {f.rule_id for f in _findings(tmp_path, "engine.py")}


# -- DDP501: who guards the save ---------------------------------------------------------------------

_SAVE_UTILS = """\
import torch
import torch.distributed as dist


def is_leader():
    return dist.get_rank() == 0


def save_on_master(*args, **kwargs):
    if is_leader():
        torch.save(*args, **kwargs)


def save_checkpoint(state, filename):
    torch.save(state, filename)
"""


def _save_project(tmp_path: Path, main_body: str) -> None:
    _write(
        tmp_path,
        {
            "utils.py": _SAVE_UTILS,
            "engine.py": """\
            import torch


            def export(model, path):
                torch.save(model.state_dict(), "export.pt")
            """,
            "main.py": textwrap.dedent(
                """\
                import torch
                import torch.distributed as dist

                import engine
                import utils

                dist.init_process_group("nccl")
                model = torch.nn.Linear(2, 2)
                """
            )
            + textwrap.dedent(main_body),
        },
    )


def test_ddp501_helper_of_another_file_saving_on_every_rank(tmp_path: Path) -> None:
    _save_project(
        tmp_path,
        """\
        utils.save_checkpoint(model.state_dict(), "last.pt")
        utils.save_on_master(model.state_dict(), "best.pt")
        if utils.is_leader():
            utils.save_checkpoint(model.state_dict(), "guarded.pt")
        utils.save_checkpoint(model.state_dict(), f"rank{dist.get_rank()}.pt")
        """,
    )
    assert "DDP501" not in {f.rule_id for f in _findings(tmp_path, "main.py", project=False)}
    found = [f for f in _findings(tmp_path, "main.py") if f.rule_id == "DDP501"]
    # Only the unguarded call of the helper that saves on every rank: save_on_master guards
    # itself, the second call is under a predicate defined in utils.py, the last is per rank.
    assert _ids(found) == [("DDP501", 9)]
    assert (
        "`save_checkpoint` saves to the path its caller passes, on every rank at utils.py:15"
        in (found[0].message)
    )
    fix = found[0].preferred_fix
    assert fix is not None and fix.edits[0].text.startswith("if ")


def test_ddp501_function_only_called_under_a_guard_from_another_file(tmp_path: Path) -> None:
    _save_project(
        tmp_path,
        """\
        if utils.is_leader():
            engine.export(model, "x")
        """,
    )
    assert (
        _ids([f for f in _findings(tmp_path, "engine.py", project=False)]) == []
    )  # not distributed alone
    # engine.py is distributed through main.py, and export() is only ever called on rank 0.
    assert [f for f in _findings(tmp_path, "engine.py") if f.rule_id == "DDP501"] == []


def test_ddp501_function_called_unguarded_from_another_file(tmp_path: Path) -> None:
    _save_project(tmp_path, 'engine.export(model, "x")\n')
    found = [f for f in _findings(tmp_path, "engine.py") if f.rule_id == "DDP501"]
    assert _ids(found) == [("DDP501", 5)]


# -- facts flow as the issue says ---------------------------------------------------------------------


def test_engine_without_distributed_imports_is_distributed_through_main() -> None:
    root = FIXTURES / "deit"
    facts = compute(ProjectIndex(root, cache_dir=False).build())
    engine = facts.for_path("engine.py")
    assert engine is not None and engine.distributed is not None
    assert str(engine.distributed) == "a process group is initialised at util/misc.py:36"
    # The unused tool is imported by nothing that runs under a process group.
    tool = facts.for_path("tools_unused.py")
    assert tool is not None and tool.distributed is None


def test_empty_project_facts_change_nothing() -> None:
    # The CLI sends no facts to a worker for a module the project says nothing about: that
    # must be the same analysis as with its (empty) facts.
    from ddp_lsp.core.crossfile import ModuleProjectFacts

    for name in ("main.py", "engine.py", "util/misc.py"):
        text = (FIXTURES / "deit" / name).read_text()
        empty = ModuleProjectFacts(name[:-3].replace("/", "."), name, root=str(FIXTURES))
        assert analyze(text, project=empty).findings == analyze(text).findings


def test_project_predicates_follow_edits(tmp_path: Path) -> None:
    _save_project(tmp_path, 'if utils.is_leader():\n    engine.export(model, "x")\n')
    index = ProjectIndex(tmp_path, cache_dir=False).build()
    assert index.project_predicates == {"is_leader"}

    def guarded() -> bool:
        [site] = [s for s in index.summaries["main.py"].dotted_sites if s.callee == "engine.export"]
        return site.guarded

    assert guarded()
    # is_leader stops being a rank-0 predicate: main.py is summarised again without it.
    index.update(tmp_path / "utils.py", _SAVE_UTILS.replace("== 0", "== 1"))
    assert index.project_predicates == frozenset() and not guarded()
    assert [f for f in _findings_of(index, tmp_path, "engine.py") if f.rule_id == "DDP501"]
    # ...and back (the editor's text of main.py, not the disk, is what gets re-read).
    index.update(tmp_path / "main.py", (tmp_path / "main.py").read_text() + "# edited\n")
    index.update(tmp_path / "utils.py", _SAVE_UTILS)
    assert guarded() and index.summaries["main.py"].lines == 12  # 10 lines + "# edited" + ""
    assert not [f for f in _findings_of(index, tmp_path, "engine.py") if f.rule_id == "DDP501"]


def _findings_of(index: ProjectIndex, root: Path, rel: str) -> list[Finding]:
    text = (root / rel).read_text()
    return list(analyze(text, ALL, project=compute(index).for_path(rel)).findings)


def test_ddp304_state_dict_of_a_model_wrapped_by_callers(tmp_path: Path) -> None:
    engine = """\
    import torch


    def save(model, path):
        torch.save(model.state_dict(), path)
    """
    ddp = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import engine

    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(2, 2))
    if dist.get_rank() == 0:
        engine.save(model, "m.pt")
    """
    _write(tmp_path, {"engine.py": engine, "main.py": ddp})
    [f] = [f for f in _findings(tmp_path, "engine.py") if f.rule_id == "DDP304"]
    assert f.message.endswith("(model is wrapped in DistributedDataParallel at main.py:8)")
    assert f.fixes[0].safe and f.fixes[0].edits[0].text == ".module"
    # A single-GPU entry point passes a plain model: `.module` would raise there, so the fix
    # unwraps only a wrapper, and stays safe.
    (tmp_path / "single.py").write_text(
        "import torch\nimport engine\n\nengine.save(torch.nn.Linear(2, 2), 'm.pt')\n"
    )
    [f] = [f for f in _findings(tmp_path, "engine.py") if f.rule_id == "DDP304"]
    assert "some callers pass one that is not" in f.message and f.fixes[0].safe
    assert [e.text for e in f.fixes[0].edits] == ['getattr(model, "module", model)']


def test_example_project_shows_what_only_the_project_view_finds() -> None:
    root = Path(__file__).parents[2] / "examples" / "project"
    found = {rel: _ids(_findings(root, rel)) for rel in ("main.py", "engine.py", "utils.py")}
    assert found == {
        "main.py": [("DDP103", 16), ("DDP501", 20)],
        "engine.py": [("DDP101", 9), ("DDP201", 11)],
        "utils.py": [],
    }
    # Alone no file is distributed code: only the clip of scaled gradients (DDP201, a bug in
    # any program) is found, not the accumulation that all-reduces every micro-step.
    alone = {rel: _ids(_findings(root, rel, project=False)) for rel in found}
    assert alone == {"main.py": [], "engine.py": [("DDP201", 11)], "utils.py": []}


def test_model_without_ddp_is_the_plain_model_across_files(tmp_path: Path) -> None:
    # DeiT/MAE: `model_without_ddp = model` before the wrap, `= model.module` after it; the
    # checkpoint helper in another file gets the plain model, its state dict has no `module.`.
    _write(
        tmp_path,
        {
            "main.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            import ckpt


            def main():
                dist.init_process_group("nccl")
                model = torch.nn.Linear(2, 2).cuda()
                model_without_ddp = model
                model = DDP(model)
                model_without_ddp = model.module
                if dist.get_rank() == 0:
                    ckpt.save(model_without_ddp, "m.pt")
                    ckpt.save_wrapped(model, "w.pt")
            """,
            "ckpt.py": """\
            import torch


            def save(net, path):
                torch.save(net.state_dict(), path)


            def save_wrapped(net, path):
                torch.save(net.state_dict(), path)
            """,
        },
    )
    assert _ids(_findings(tmp_path, "ckpt.py")) == [("DDP304", 9)]
    facts = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    main = facts.for_path("main.py")
    assert main is not None and ("main", "model_without_ddp") not in main.extra_kinds


def test_ddp104_and_ddp402_cite_the_caller_file(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "loop.py": """\
            import torch.distributed as dist


            def train(model, loader, sampler, optimizer, epochs):
                for epoch in range(epochs):
                    for x in loader:
                        model(x).sum().backward()
                        optimizer.step()
                if dist.get_rank() == 0:
                    print(model(x))
            """,
            "main.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, DistributedSampler

            import loop

            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(2, 2).cuda())
            sampler = DistributedSampler(range(10))
            data = DataLoader(range(10), sampler=sampler)
            loop.train(model, data, sampler, torch.optim.SGD(model.parameters()), 3)
            """,
        },
    )
    found = {f.rule_id: f for f in _findings(tmp_path, "loop.py")}
    assert found["DDP104"].message.endswith(
        "(model is wrapped in DistributedDataParallel at main.py:9)"
    )
    assert found["DDP402"].message.endswith("(sampler is a DistributedSampler at main.py:10)")
    assert any(r.path and r.path.endswith("main.py") for r in found["DDP402"].related)


_MAE_MISC = """\
import torch


class NativeScalerWithGradNormCount:
    state_dict_key = "amp_scaler"

    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            self._scaler.unscale_(optimizer)
            if clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()
"""

_MAE_ENGINE = """\
import torch


def train_one_epoch(model, data_loader, optimizer, loss_scaler, accum_iter):
    model.train(True)
    optimizer.zero_grad()
    for data_iter_step, (samples, _) in enumerate(data_loader):
        with torch.cuda.amp.autocast():
            loss = model(samples)
        loss_value = loss.item()
        loss /= accum_iter
        loss_scaler(loss, optimizer, parameters=model.parameters(),
                    update_grad=(data_iter_step + 1) % accum_iter == 0)
        if (data_iter_step + 1) % accum_iter == 0:
            optimizer.zero_grad()
    return loss_value
"""

_MAE_MAIN = """\
import torch
import torch.distributed as dist

import util.misc as misc
from engine_pretrain import train_one_epoch
from util.misc import NativeScalerWithGradNormCount as NativeScaler


def main(args):
    dist.init_process_group("nccl")
    model = torch.nn.Linear(8, 8).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_scaler = NativeScaler()
    for epoch in range(args.epochs):
        train_one_epoch(model, [], optimizer, loss_scaler, args.accum_iter)
"""


def test_ddp101_mae_loss_scaler_call_with_update_grad(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "util/__init__.py": "",
            "util/misc.py": _MAE_MISC,
            "engine_pretrain.py": _MAE_ENGINE,
            "main_pretrain.py": _MAE_MAIN,
        },
    )
    found = [f for f in _findings(tmp_path, "engine_pretrain.py") if f.rule_id == "DDP101"]
    assert _ids(found) == [("DDP101", 12)]
    assert "steps only when `(data_iter_step + 1) % accum_iter == 0` holds" in found[0].message
    assert found[0].message.endswith(
        "(model is wrapped in DistributedDataParallel at main_pretrain.py:12; "
        "loss_scaler is `NativeScalerWithGradNormCount`, a GradScaler wrapper that unscales "
        "itself at main_pretrain.py:14)"
    )
    # With no_sync on accumulation steps (or update_grad always true) there is nothing to say.
    synced = _MAE_ENGINE.replace(
        "        with torch.cuda.amp.autocast():",
        "        with torch.cuda.amp.autocast(), model.no_sync():",
    )
    (tmp_path / "engine_pretrain.py").write_text(synced)
    assert not [f for f in _findings(tmp_path, "engine_pretrain.py") if f.rule_id == "DDP101"]


def test_package_named_src_resolves_both_spellings(tmp_path: Path) -> None:
    # `src/utils.py` is the module `utils` (the src layout), and a project run from its root
    # imports it as `src.utils`: both spellings resolve, so the helper that starts the process
    # group is found and the checkpoint written on every rank is reported.
    _write(
        tmp_path,
        {
            "src/__init__.py": "",
            "src/utils.py": """
                import torch.distributed as dist

                def init_distributed_mode(args):
                    dist.init_process_group("nccl")
            """,
            "eval_linear.py": """
                import torch
                from src.utils import init_distributed_mode

                def main(args, model):
                    init_distributed_mode(args)
                    torch.save(model.state_dict(), "ckpt.pt")
            """,
        },
    )
    facts = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    main = facts.for_path("eval_linear.py")
    assert main.callee_props["init_distributed_mode"].target == ("utils", "init_distributed_mode")
    assert main.distributed is not None
    assert [f.rule_id for f in _findings(tmp_path, "eval_linear.py")].count("DDP501") == 1


# -- DDP103: arguments bound at a guarded call, through helpers of other files ----------------


def test_ddp103_module_reaching_torch_distributed_through_import_torch(tmp_path: Path) -> None:
    """`import torch` (or `import torch.distributed`, which binds `torch`) then
    `torch.distributed.barrier()` is distributed code: a rank-0 barrier there is reported,
    alone and in a project (issue 14, seeded barrier-under-rank0)."""
    _write(
        tmp_path,
        {
            "evals/adapter.py": """\
            import torch
            import torch.distributed

            class Adapter:
                def prepare(self, tasks):
                    if torch.distributed.is_initialized():
                        if torch.distributed.get_rank() == 0:
                            torch.distributed.barrier()
                    return tasks
            """,
        },
    )
    for project in (False, True):
        found = _findings(tmp_path, "evals/adapter.py", project)
        assert _ids([f for f in found if f.rule_id == "DDP103"]) == [("DDP103", 8)]


#: A zero-first context manager (barrier on the other ranks, run, barrier on rank 0) whose
#: rank -1 means a single process: no barrier at all.
ZERO_FIRST = """\
import contextlib
import torch.distributed as dist

@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()
"""


def test_ddp103_validation_helper_that_builds_its_loader_with_the_default_rank(
    tmp_path: Path,
) -> None:
    """A validation helper (its own file) builds a loader only when it is run as a script, and
    then through a loader helper (a third file) whose zero-first rank defaults to -1: no call
    of the helper makes a collective, so rank 0 calling it is fine; a helper that passes its
    rank on is still reported (issue 14, F2)."""
    _write(
        tmp_path,
        {
            "utils/torch_utils.py": ZERO_FIRST,
            "utils/data.py": """\
            import torch
            from utils.torch_utils import zero_first

            def make_loader(path, size, rank=-1, workers=8):
                with zero_first(rank):
                    return torch.load(path), size
            """,
            "val.py": """\
            from utils.data import make_loader

            def run(data, size=640, model=None, loader=None, workers=8):
                training = model is not None
                if not training:
                    loader = make_loader(data, size, workers=workers)[0]
                return [model(x) for x in loader]

            def run_ranked(data, rank, size=640):
                loader = make_loader(data, size, rank=rank)[0]
                return len(loader)
            """,
            "train.py": """\
            import os
            import torch.distributed as dist
            import val as validate

            RANK = int(os.environ["RANK"])

            def main(model, loader):
                dist.init_process_group("nccl")
                if RANK in (-1, 0):
                    validate.run("val", model=model, loader=loader)
                    validate.run_ranked("val", RANK)
            """,
        },
    )
    found = [f for f in _findings(tmp_path, "train.py") if f.rule_id == "DDP103"]
    assert _ids(found) == [("DDP103", 11)]


def test_ddp103_zero_first_helper_two_files_away_given_rank_minus_one(tmp_path: Path) -> None:
    """A loader helper (one file) wraps a zero-first context manager (another file) with the
    rank it is given: called with rank -1 (single process) from rank 0 it runs no barrier;
    called with rank 0 it does, and rank 0 waits alone (issue 14, F2)."""
    _write(
        tmp_path,
        {
            "utils/torch_utils.py": ZERO_FIRST,
            "utils/data.py": """\
            import torch
            from utils.torch_utils import zero_first

            def make_loader(path, rank=-1):
                with zero_first(rank):
                    return torch.load(path)
            """,
            "train.py": """\
            import os
            import torch.distributed as dist
            from utils.data import make_loader

            RANK = int(os.environ["RANK"])

            def main():
                dist.init_process_group("nccl")
                if RANK in (-1, 0):
                    val = make_loader("val", rank=-1)
                    test = make_loader("test")
                if RANK == 0:
                    again = make_loader("val", rank=RANK)
            """,
        },
    )
    found = [f for f in _findings(tmp_path, "train.py") if f.rule_id == "DDP103"]
    assert _ids(found) == [("DDP103", 13)]


# -- DDP402: the per-epoch helper that received the sampler lives in another file ---------------


def test_ddp402_sampler_handed_to_a_helper_of_another_file_that_never_sets_the_epoch(
    tmp_path: Path,
) -> None:
    helper = """\
        def train(model, loader, optimizer, epoch, sampler=None):
            if sampler:
                {line}
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
        """
    main = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler

        from utils import train


        def main(args):
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(2, 2).cuda())
            sampler = DistributedSampler(range(10), shuffle=True)
            kwargs = {"batch_size": 2, "sampler": sampler}
            loader = DataLoader(range(10), **kwargs)
            opt = torch.optim.SGD(model.parameters())
            for epoch in range(args.epochs):
                train(model, loader, opt, epoch, sampler=sampler)
        """
    files = {
        "utils/__init__.py": "from .train_utils import train\n",
        "utils/train_utils.py": helper.format(line="sampler.set_epoch(epoch)"),
        "main.py": main,
    }
    _write(tmp_path, files)
    assert "DDP402" not in {f.rule_id for f in _findings(tmp_path, "main.py")}
    files["utils/train_utils.py"] = helper.format(line="pass")
    _write(tmp_path, files)
    # Without the project the helper is unknown: silent; with it, the helper sets no epoch.
    assert "DDP402" not in {f.rule_id for f in _findings(tmp_path, "main.py", project=False)}
    [f] = [f for f in _findings(tmp_path, "main.py") if f.rule_id == "DDP402"]
    assert f.span.start.line + 1 == 12


# -- F16: test code of a distributed project (DDP401, DDP503) -------------------------------------


@pytest.mark.parametrize(
    ("rel", "test_code"),
    [
        ("train.py", False),
        ("pkg/tests/helpers.py", True),
        ("pkg/gpu_tests/ckpt_test.py", True),
        ("pkg/shampoo_test_utils.py", True),
        ("test_train.py", True),
        ("pkg/contest.py", False),
    ],
)
def test_distributed_test_code_gets_no_sampler_or_seed_findings(
    tmp_path: Path, rel: str, test_code: bool
) -> None:
    _write(
        tmp_path,
        {
            rel: """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, TensorDataset


            def run(model, data, epochs, seed=0, rank=0):
                dist.init_process_group("nccl")
                torch.manual_seed(seed)
                model = DDP(model.cuda())
                loader = DataLoader(TensorDataset(data), batch_size=4, shuffle=True)
                for epoch in range(epochs):
                    for (x,) in loader:
                        model(x).sum().backward()
            """
        },
    )
    ids = {f.rule_id for f in _findings(tmp_path, rel)}
    assert ("DDP401" in ids, "DDP503" in ids) == (not test_code, not test_code)


# -- F33: test code of a distributed project (DDP303) --------------------------------------------


@pytest.mark.parametrize(
    ("rel", "test_code"),
    [("train.py", False), ("tests/test_checkpoint.py", True), ("pkg/ckpt_test.py", True)],
)
def test_ddp303_is_silent_in_test_code(tmp_path: Path, rel: str, test_code: bool) -> None:
    _write(
        tmp_path,
        {
            rel: """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP


            def run(model, path):
                dist.init_process_group("nccl")
                model = DDP(model.cuda())
                if dist.get_rank() == 0:
                    torch.save(model.module.state_dict(), path)
                dist.barrier()
                model.module.load_state_dict(torch.load(path))
            """
        },
    )
    ids = {f.rule_id for f in _findings(tmp_path, rel)}
    assert ("DDP303" in ids) == (not test_code)


def test_ddp501_helper_imported_through_a_folder_put_on_sys_path(tmp_path: Path) -> None:
    # app/training/main.py puts app/ on sys.path and imports app/utils/utils.py as
    # `utils.utils`: its only call of the save helper is under a rank-0 guard (F11).
    helper = """\
        import os

        import torch


        def save_hf_format(model, args, sub_folder=""):
            out = os.path.join(args.output_dir, sub_folder)
            torch.save(model.state_dict(), os.path.join(out, "pytorch_model.bin"))
        """
    main = """\
        import os
        import sys

        import torch
        import torch.distributed as dist

        sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), os.path.pardir)))
        from utils.utils import save_hf_format


        def main(args):
            dist.init_process_group("nccl")
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
            for epoch in range(3):
                if args.global_rank == 0:
                    save_hf_format(model, args, f"epoch-{epoch}")
        """
    _write(tmp_path, {"app/utils/utils.py": helper, "app/training/main.py": main})
    assert [f for f in _findings(tmp_path, "app/utils/utils.py") if f.rule_id == "DDP501"] == []
    # The same helper called on every rank is reported where it saves.
    _write(
        tmp_path,
        {"app/training/main.py": main.replace("if args.global_rank == 0:", "if True:")},
    )
    found = [f for f in _findings(tmp_path, "app/utils/utils.py") if f.rule_id == "DDP501"]
    assert _ids(found) == [("DDP501", 8)]
