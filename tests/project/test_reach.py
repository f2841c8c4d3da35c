"""Distributed code per function (project/reach.py): a distributed training script next to a
tokenizer and a plotting script of the same project, and ranks started by ``mp.spawn``.

Each project is checked with and without the project view: alone, a module that imports
``torch.distributed`` is taken for distributed code; in its project, a function no distributed
entry point reaches on every rank (and that does nothing distributed itself) is not, and the
rules that only apply to distributed code stay silent there."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Finding
from ddp_lsp.project import ProjectIndex, compute

# Every rule, DDP501 (off by default) included: the distributed-only rule these tests watch.
_ALL = Settings(select=("DDP", "DDP501"))

UTILS = """
import torch.distributed as dist


def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def setup():
    dist.init_process_group("nccl")
"""

TRAIN = """
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from plots import plot_curves
from tokenizer import encode
from utils import get_rank, setup


def main():
    setup()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(4, 4).cuda(local_rank), device_ids=[local_rank])
    ids = encode("hello world")
    history = []
    for step in range(10):
        loss = model(torch.randn(2, 4).cuda(local_rank)).sum()
        loss.backward()
        history.append(loss.detach())
    torch.save(model.module.state_dict(), "model.pt")
    if get_rank() == 0:
        plot_curves(history, "curves.png")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

# Imports the project's utilities (and so torch.distributed): alone it looks distributed.
TOKENIZER = """
import sys

import torch

from utils import get_rank


def encode(text):
    return [hash(w) % 1000 for w in text.split()]


def save_vocab(words, path):
    torch.save(sorted(set(words)), path)


if __name__ == "__main__":
    save_vocab(open(sys.argv[1]).read().split(), sys.argv[2])
"""

# Called by the training script on rank 0 only, and run alone from its command line.
PLOTS = """
import sys

import torch
import torch.distributed as dist


def plot_curves(history, path):
    torch.save({"loss": history}, path + ".pt")


def main():
    with torch.cuda.amp.autocast():
        stats = torch.load(sys.argv[1])
    plot_curves(stats["loss"], sys.argv[2])


if __name__ == "__main__":
    main()
"""


def _write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for rel, text in files.items():
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))


def _found(root: Path, rel: str, project: bool = True) -> list[tuple[str, int]]:
    text = (root / rel).read_text()
    facts = compute(ProjectIndex(root, cache_dir=False).build()).for_path(rel) if project else None
    found: list[Finding] = list(analyze(text, _ALL, project=facts).findings)
    return sorted((f.rule_id, f.span.start.line + 1) for f in found)


def test_tool_modules_of_a_distributed_project_get_only_any_module_rules(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"utils.py": UTILS, "train.py": TRAIN, "tokenizer.py": TOKENIZER, "plots.py": PLOTS},
    )
    # Both tools are in the distributed program (the training script imports them), and the
    # plotting script alone looks distributed (it imports torch.distributed).
    pf = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    for rel in ("plots.py", "tokenizer.py"):
        facts = pf.for_path(rel)
        assert facts is not None and facts.distributed is not None
    alone = _found(tmp_path, "plots.py", project=False)
    assert ("DDP501", 8) in alone and ("DDP303", 13) in alone
    # In the project: the plotting function runs on rank 0 only, `main` and `save_vocab` run as
    # one process; what is left is the deprecated autocast (a bug in any process).
    assert _found(tmp_path, "plots.py") == [("DDP205", 12)]
    assert _found(tmp_path, "tokenizer.py") == []
    # The training script keeps its unguarded save: `main` initialises the process group.
    assert ("DDP501", 23) in _found(tmp_path, "train.py")


def test_tokenizer_is_distributed_code_when_every_rank_calls_it(tmp_path: Path) -> None:
    train = TRAIN.replace('ids = encode("hello world")', 'save_vocab(["a"], "vocab.pt")').replace(
        "from tokenizer import encode", "from tokenizer import save_vocab"
    )
    tokenizer = TOKENIZER.replace(
        "torch.save(sorted(set(words)), path)", 'torch.save(sorted(set(words)), "vocab.pt")'
    )
    _write(
        tmp_path,
        {"utils.py": UTILS, "train.py": train, "tokenizer.py": tokenizer, "plots.py": PLOTS},
    )
    assert ("DDP501", 13) in _found(tmp_path, "tokenizer.py")


def test_function_handed_to_mp_spawn_makes_its_module_distributed(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "launcher.py": """
                import torch
                import torch.distributed as dist


                def run(rank, world_size, fn):
                    torch.cuda.set_device(rank)
                    dist.init_process_group("nccl", rank=rank, world_size=world_size)
                    fn(rank)
                    dist.destroy_process_group()
            """,
            # No distributed import, nothing imports it from the initialising module.
            "trainer.py": """
                import torch


                def train(rank):
                    model = torch.nn.Linear(4, 4).cuda(rank)
                    torch.save(model.state_dict(), "model.pt")
            """,
            "main.py": """
                import torch.multiprocessing as mp

                from launcher import run
                from trainer import train

                if __name__ == "__main__":
                    mp.spawn(run, args=(2, train), nprocs=2)
            """,
        },
    )
    assert _found(tmp_path, "trainer.py", project=False) == []
    assert _found(tmp_path, "trainer.py") == [("DDP501", 6)]


def test_launcher_helper_that_receives_the_training_function(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "launch.py": """
                import torch.distributed as dist
                import torch.multiprocessing as mp


                def _worker(rank, main_func, world_size):
                    dist.init_process_group("gloo", rank=rank, world_size=world_size)
                    main_func()


                def launch(main_func, world_size):
                    mp.spawn(_worker, args=(main_func, world_size), nprocs=world_size)
            """,
            "train_net.py": """
                import torch

                from launch import launch


                def main():
                    model = torch.nn.Linear(4, 4)
                    torch.save(model.state_dict(), "model.pt")


                if __name__ == "__main__":
                    launch(main, 2)
            """,
        },
    )
    assert _found(tmp_path, "train_net.py", project=False) == []
    assert _found(tmp_path, "train_net.py") == [("DDP501", 8)]


# Rules whose bug is a bug in any process: they also report in single-process code.
ANY_MODULE = {r.meta.id for r in all_rules() if r.meta.any_module}


def test_distributed_only_rules_say_so() -> None:
    only = {r.meta.id for r in all_rules() if r.meta.distributed_only}
    assert only == {"DDP303", "DDP401", "DDP501", "DDP502", "DDP503", "DDP504"}
    for r in all_rules():
        doc = sys.modules[type(r).__module__].__doc__ or ""
        assert ("Distributed code only:" in doc) == r.meta.distributed_only, r.meta.id
        if r.meta.id in ANY_MODULE:
            assert "Any module:" in doc and not r.meta.distributed_only, r.meta.id


def test_methods_of_a_built_class_run_when_called_by_name(tmp_path: Path) -> None:
    # The training script builds the tokenizer and calls `encode` on every rank; nothing
    # distributed calls `save_pretrained` (a tool's method): it is single-process code.
    _write(
        tmp_path,
        {
            "utils.py": UTILS,
            "tok.py": """
                import torch


                class Tokenizer:
                    def __init__(self, vocab):
                        self.vocab = vocab
                        torch.save(vocab, "vocab-cache.pt")

                    def encode(self, text):
                        torch.save(text, "last-text.pt")
                        return [self.vocab.get(w, 0) for w in text.split()]

                    def save_pretrained(self, dest):
                        torch.save(self.vocab, dest + "/vocab.pt")
            """,
            "train.py": """
                from tok import Tokenizer
                from utils import setup


                def main():
                    setup()
                    tok = Tokenizer({"a": 1})
                    return tok.encode("a b")
            """,
        },
    )
    assert _found(tmp_path, "tok.py") == [("DDP501", 7), ("DDP501", 10)]


def test_code_nothing_refers_to_keeps_its_module_context(tmp_path: Path) -> None:
    # `LegacyLoss` is built by no file of the project (another launch may build it), in a
    # module whose other class the training loop builds: unknown, so still distributed code.
    # The unit test's function is called by nothing either, in a module nothing distributed
    # reaches: single-process.
    _write(
        tmp_path,
        {
            "utils.py": UTILS,
            "loss.py": """
                import torch


                class Loss:
                    def __call__(self, x):
                        return x.sum()


                class LegacyLoss(Loss):
                    def __init__(self):
                        super(LegacyLoss, self).__init__()

                    def __call__(self, x):
                        return (x - torch.zeros(1, device="cuda:0")).sum()
            """,
            "train.py": """
                from loss import Loss
                from utils import setup


                def main(x):
                    setup()
                    return Loss()(x)
            """,
            "test_loss.py": """
                import torch
                import torch.distributed as dist

                from loss import Loss


                def test_loss():
                    x = torch.ones(2, device="cuda:0")
                    assert Loss()(x) == 2
            """,
        },
    )
    assert ("DDP504", 14) in _found(tmp_path, "loss.py")
    assert ("DDP504", 8) in _found(tmp_path, "test_loss.py", project=False)
    assert _found(tmp_path, "test_loss.py") == []


def test_overrides_a_framework_base_calls_and_inherited_methods_stay_distributed(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        {
            "utils.py": UTILS,
            "ckpt.py": """
                import torch
                from fvcore.common.checkpoint import Checkpointer


                class MyCheckpointer(Checkpointer):
                    def _load_file(self, f):
                        return torch.load(f)


                class Pretrained:
                    @classmethod
                    def from_checkpoint(cls, path):
                        return torch.load(path)


                class Bert(Pretrained):
                    pass
            """,
            "train.py": """
                from ckpt import Bert, MyCheckpointer
                from utils import setup


                def main(model, path):
                    setup()
                    MyCheckpointer(model).resume_or_load(path)
                    return Bert.from_checkpoint(path)
            """,
        },
    )
    # The base class (not in the project) calls `_load_file`; `from_checkpoint` is inherited.
    # (Not `from_pretrained`: DDP303 reads that as a loader of released weights, F32.)
    assert _found(tmp_path, "ckpt.py") == [("DDP303", 7), ("DDP303", 13)]


def test_single_process_change_reruns_the_rules_of_a_cached_document() -> None:
    from dataclasses import replace

    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.core.document import Document

    text = textwrap.dedent(
        """
        import torch
        import torch.distributed as dist


        def export(model, path):
            torch.save(model.state_dict(), "exported.pt")
        """
    ).lstrip("\n")
    doc = Document(text, Settings().rank_model)
    facts = ModuleProjectFacts("tool", "tool.py")
    ids = lambda r: [f.rule_id for f in r.findings]  # noqa: E731
    assert ids(analyze(doc, _ALL, project=facts)) == ["DDP501"]
    quiet = replace(facts, single_process=frozenset({"export"}))
    assert ids(analyze(doc, _ALL, project=quiet)) == []
    assert ids(analyze(doc, _ALL, project=facts)) == ["DDP501"]


def test_big_model_placement_is_not_distributed_code(tmp_path: Path) -> None:
    # A vendored quantisation library: it spreads one model over the devices of one process.
    _write(
        tmp_path,
        {
            "utils.py": UTILS,
            "quant.py": """
                import accelerate
                import torch


                def load(model, path):
                    with accelerate.init_empty_weights():
                        pass
                    accelerate.cpu_offload_with_hook(model, 0)
                    return accelerate.infer_auto_device_map(model)


                class Quantized:
                    def save_quantized(self, path):
                        torch.save(self.state, path + "/model.pt")
            """,
            "train.py": """
                from utils import setup


                def main():
                    setup()
            """,
        },
    )
    assert _found(tmp_path, "quant.py", project=False) == [("DDP501", 14)]
    assert _found(tmp_path, "quant.py") == []


def test_single_process_calls_come_from_the_framework_tables(tmp_path: Path) -> None:
    # A profiling tool that only calls a DeepSpeed memory helper: distributed code by default
    # (it calls into deepspeed), a tool once the project's tables mark the helper
    # `single-process` (the built-in entries, `deepspeed.accelerator`, are the same data).
    from ddp_lsp.config import settings_from_mapping

    _write(
        tmp_path,
        {
            "utils.py": UTILS,
            "profile_tool.py": """
                import torch
                from deepspeed.accelerator import get_accelerator
                from deepspeed.runtime.utils import see_memory_usage


                def report(model, path):
                    see_memory_usage("after build", force=True)
                    torch.save(model.state_dict(), path)


                def device():
                    return get_accelerator().device_name()
            """,
            "train.py": """
                from utils import setup


                def main():
                    setup()
            """,
        },
    )

    def found(settings: object) -> list[str]:
        index = ProjectIndex(tmp_path, settings=settings, cache_dir=False)  # type: ignore[arg-type]
        facts = compute(index.build()).for_path("profile_tool.py")
        text = (tmp_path / "profile_tool.py").read_text()
        return [f.rule_id for f in analyze(text, _ALL, project=facts).findings]

    entry = [{"call": "deepspeed.runtime.utils", "means": ["single-process"]}]
    assert found(settings_from_mapping({})) == ["DDP501"]
    assert found(settings_from_mapping({"framework": entry})) == []
