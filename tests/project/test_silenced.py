"""Output silenced by an entry point in another file (docs/accuracy.md F13, DDP502).

The entry script starts the process group and installs a rank-0 logging filter (or replaces
``builtins.print``) through a set-up helper; the trainer module it imports only logs. The
project view tells the trainer that its output is rank-0 only already
(``ModuleProjectFacts.silenced``); a module no silencing entry imports keeps its findings."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.settings import Settings
from ddp_lsp.project import ProjectIndex, compute

SETTINGS = Settings(select=("DDP502",))

LOGSETUP = """
import logging


def setup_logging():
    handler = logging.StreamHandler()

    def rank0_filter(record):
        if record.levelno > logging.INFO:
            return 1
        return 1 if getattr(record, "global_rank", 0) == 0 else 0

    handler.addFilter(rank0_filter)
    logging.basicConfig(handlers=[handler], level=logging.INFO)


def quiet_print(is_master):
    import builtins

    plain = builtins.print

    def gated(*args, **kwargs):
        if is_master:
            plain(*args, **kwargs)

    builtins.print = gated
"""

TRAINER = """
import logging

import torch.distributed as dist

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, model, loader, optimizer):
        self.model, self.loader, self.optimizer = model, loader, optimizer

    def fit(self, epochs):
        for epoch in range(epochs):
            for step, batch in enumerate(self.loader):
                loss = self.model(batch).sum()
                loss.backward()
                self.optimizer.step()
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            print(f"epoch {epoch} done, loss {loss.item():.4f}")
"""

ENTRY = """
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from logsetup import setup_logging
from trainer import Trainer


def main(loader):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(4, 1).cuda(local_rank), device_ids=[local_rank])
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
    trainer.fit(3)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    setup_logging()
    main(None)
"""

# A second launcher that starts the group and silences nothing: only its own module and what
# it imports are affected (the trainer is still run silenced by ENTRY).
OTHER = """
import logging

import torch
import torch.distributed as dist

from logsetup import quiet_print

log = logging.getLogger(__name__)


def run(loader, model, optimizer):
    dist.init_process_group("nccl")
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        log.info("step %d loss %.4f", step, loss.item())
"""


def _project(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for rel, text in files.items():
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))


def _lines(root: Path, rel: str, project: bool = True) -> list[int]:
    text = (root / rel).read_text()
    facts = compute(ProjectIndex(root, cache_dir=False).build()).for_path(rel) if project else None
    found = analyze(text, SETTINGS, project=facts).findings
    return sorted(f.span.start.line + 1 for f in found)


def _line(root: Path, rel: str, needle: str) -> int:
    lines = (root / rel).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if needle in line)


def test_logging_silenced_by_the_entry_script_that_imports_the_trainer(tmp_path: Path) -> None:
    _project(
        tmp_path,
        {"logsetup.py": LOGSETUP, "trainer.py": TRAINER, "train.py": ENTRY, "other.py": OTHER},
    )
    facts = compute(ProjectIndex(tmp_path, cache_dir=False).build())
    trainer = facts.for_path("trainer.py")
    assert trainer is not None
    assert trainer.silenced == frozenset({fact_model.SILENCES_LOGGING})
    # Alone, both lines of the trainer are reported; in the project the `log.info` is not
    # (the entry's filter drops it on the other ranks) and the `print` still is (the filter
    # is logging's: nothing replaced `print`).
    log_line = _line(tmp_path, "trainer.py", "log.info(")
    print_line = _line(tmp_path, "trainer.py", "print(")
    assert _lines(tmp_path, "trainer.py", project=False) == [log_line, print_line]
    assert _lines(tmp_path, "trainer.py") == [print_line]
    # The other launcher installs no filter (it imports the print silencer but never calls
    # it): its own loop is reported.
    other = facts.for_path("other.py")
    assert other is not None and other.silenced == frozenset()
    assert _lines(tmp_path, "other.py") == [_line(tmp_path, "other.py", "log.info(")]


def test_print_silenced_by_the_worker_that_starts_the_group(tmp_path: Path) -> None:
    entry = ENTRY.replace("from logsetup import setup_logging", "from logsetup import quiet_print")
    entry = entry.replace("    setup_logging()\n", "    quiet_print(dist.get_rank() == 0)\n")
    _project(tmp_path, {"logsetup.py": LOGSETUP, "trainer.py": TRAINER, "train.py": entry})
    trainer = compute(ProjectIndex(tmp_path, cache_dir=False).build()).for_path("trainer.py")
    assert trainer is not None and trainer.silenced == frozenset({fact_model.SILENCES_PRINT})
    assert _lines(tmp_path, "trainer.py") == [_line(tmp_path, "trainer.py", "log.info(")]


def test_a_silencer_outside_any_entry_point_silences_nothing(tmp_path: Path) -> None:
    # The set-up runs in a tool that starts no process group: the trainer run by the
    # distributed entry point logs on every rank.
    entry = ENTRY.replace("    setup_logging()\n", "")
    tool = "from logsetup import setup_logging\nimport trainer\n\nsetup_logging()\n"
    _project(
        tmp_path,
        {"logsetup.py": LOGSETUP, "trainer.py": TRAINER, "train.py": entry, "tool.py": tool},
    )
    trainer = compute(ProjectIndex(tmp_path, cache_dir=False).build()).for_path("trainer.py")
    assert trainer is not None and trainer.silenced == frozenset()
    assert len(_lines(tmp_path, "trainer.py")) == 2
