"""The training command ``ddp-lsp feasibility`` is given, understood as an entry point.

``python [opts] train.py args``, ``python -m pkg.train args`` or ``torchrun [opts] train.py
args`` become an :class:`Entry` that feasibility runs under ``torchrun --standalone`` at the
process counts it needs (one process, then the DDP ranks). Launchers that start their own
processes (``accelerate launch``, ``deepspeed``) are refused with the command to give instead.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: torchrun options that take no value (everything else before the script takes one).
_TORCHRUN_FLAGS = {
    "--standalone",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--module",
    "-m",
    "--tee-log",
    "--virtual-local-rank",
    "--virtual_local_rank",
}
_TORCHRUN_NAMES = {"torchrun"}


class CommandError(ValueError):
    """The training command cannot be run the way feasibility needs."""


@dataclass(frozen=True)
class Entry:
    """The user's entry point: the interpreter, ``-m module`` or a script, and its arguments."""

    python: str
    target: str
    module: bool
    args: tuple[str, ...]
    python_opts: tuple[str, ...] = ()

    def torchrun(self, nproc: int) -> list[str]:
        cmd = [self.python, *self.python_opts, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node", str(nproc)]
        if self.module:
            cmd.append("-m")
        return [*cmd, self.target, *self.args]


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def parse_command(command: Sequence[str]) -> Entry:
    """Find the entry point in ``python train.py ...``, ``python -m pkg.train ...``,
    ``train.py ...`` or ``torchrun [options] train.py ...`` (also ``python -m
    torch.distributed.run``): torchrun's own options are dropped, feasibility chooses the
    number of processes itself."""
    words = list(command)
    if not words:
        raise CommandError("no training command after '--'")
    python = sys.executable
    opts: list[str] = []
    if _is_python(words[0]):
        python = words[0]
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            if words[0] in ("-c", "-"):
                raise CommandError("give the training script or module, not -c code or stdin")
            opts.append(words[0])
            if words[0] in ("-W", "-X"):
                opts.append(words[1] if len(words) > 1 else "")
                words = words[1:]
            words = words[1:]
        if words[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            words = ["torchrun", *words[2:]]
    elif os.path.basename(words[0]) in _TORCHRUN_NAMES:
        found = shutil.which(words[0])
        if found:
            sibling = Path(found).resolve().parent / "python"
            if sibling.exists():
                python = str(sibling)
    if words and os.path.basename(words[0]) in _TORCHRUN_NAMES:
        words = words[1:]
        module = False
        while words and words[0].startswith("-"):
            flag = words[0]
            words = words[1:]
            if flag in ("-m", "--module"):
                module = True
            elif flag in ("--no-python", "--no_python"):
                raise CommandError("torchrun --no-python runs a non-Python program: not supported")
            elif "=" in flag or flag in _TORCHRUN_FLAGS:
                continue
            elif words:
                words = words[1:]  # the option's value
        if not words:
            raise CommandError("torchrun command without a training script")
        return Entry(python, words[0], module, tuple(words[1:]), tuple(opts))
    if not words:
        raise CommandError("no training script in the command")
    if words[0] == "-m":
        if len(words) < 2:
            raise CommandError("python -m without a module")
        return Entry(python, words[1], True, tuple(words[2:]), tuple(opts))
    first = os.path.basename(words[0])
    if first in ("accelerate", "deepspeed", "lightning", "srun", "mpirun"):
        raise CommandError(
            f"{first} launches its own processes: give the command that runs the training "
            "script itself (python train.py ...)"
        )
    if not words[0].endswith(".py") and not Path(words[0]).is_file():
        raise CommandError(f"{words[0]!r} is not a Python script, a module (-m) or torchrun")
    return Entry(python, words[0], False, tuple(words[1:]), tuple(opts))
