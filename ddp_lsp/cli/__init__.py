"""The ``ddp-lsp`` command line: one table of commands, each run by its own module's ``main``.

Each command's module is imported only when it runs, so ``ddp-lsp check`` never pays for
pygls and no command imports torch in this process. To add a command, write a module with
``main(argv) -> int`` (the exit status) and add a row to :data:`COMMANDS`; the usage text is
made from the table.

The package (docs/architecture.md has the map):

- :mod:`~ddp_lsp.cli.check`: ``check`` and ``fix`` (arguments, running, reporting);
  :mod:`~ddp_lsp.cli.collect` finds their files and what each one's analysis knows,
  :mod:`~ddp_lsp.cli.jobs` checks one file and runs many in a process pool,
  :mod:`~ddp_lsp.cli.settings` resolves settings per directory;
- :mod:`~ddp_lsp.cli.rules`, :mod:`~ddp_lsp.cli.explain`: the rule catalogue;
- :mod:`~ddp_lsp.cli.common`: exit statuses, usage errors, the wrapper that turns every
  failure into an exit status.

Reading, decoding and writing sources back is :mod:`ddp_lsp.sources`; the project index the
check builds is :mod:`ddp_lsp.project.build`, shared with the server.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast


class CommandSpec:
    """A row of the table. (A plain class: making a dataclass costs every command, the
    language server's start among them, about a millisecond.)"""

    __slots__ = ("name", "summary", "target")

    def __init__(self, name: str, target: str, summary: str) -> None:
        self.name = name
        self.target = target  # "package.module:function": takes argv, returns the status
        self.summary = summary  # one line of the usage text

    def load(self) -> Callable[[Sequence[str]], int]:
        module, _, function = self.target.partition(":")
        return cast(
            Callable[[Sequence[str]], int], getattr(importlib.import_module(module), function)
        )


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        "check",
        "ddp_lsp.cli.check:main",
        "analyse files or directories (or - for stdin) and report findings",
    ),
    CommandSpec("fix", "ddp_lsp.cli.check:fix_main", "apply safe fixes (same as: check --fix)"),
    CommandSpec("rules", "ddp_lsp.cli.rules:main", "list every rule"),
    CommandSpec(
        "explain",
        "ddp_lsp.cli.explain:main",
        "print a rule's documentation (ddp-lsp explain DDP201)",
    ),
    CommandSpec("serve", "ddp_lsp.lsp.server:main", "run the language server (stdio by default)"),
    CommandSpec(
        "preflight",
        "ddp_lsp.preflight.cli:main",
        "probe this machine for distributed training (needs torch in --python)",
    ),
    CommandSpec(
        "env",
        "ddp_lsp.preflight.envinfo:main",
        "print torch/CUDA/NCCL/driver/GPU/CPU/RAM/package facts for a bug report",
    ),
    CommandSpec(
        "smallrun",
        "ddp_lsp.runtime.smallrun:main",
        "run a short training command under supervision (memory growth, crashes, hangs)",
    ),
    CommandSpec(
        "feasibility",
        "ddp_lsp.runtime.feasibility:main",
        "run ~50 steps of the training command alone and under DDP: is DDP worth it?",
    ),
)


def _usage(commands: Sequence[CommandSpec]) -> str:
    width = max(len(c.name) for c in commands)
    rows = "".join(f"  {c.name:<{width}}  {c.summary}\n" for c in commands)
    return (
        "usage: ddp-lsp <command> [options]\n\ncommands:\n"
        f"{rows}\nrun 'ddp-lsp <command> --help' for a command's options.\n"
    )


USAGE = _usage(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from ddp_lsp import __version__

        sys.stdout.write(f"ddp-lsp {__version__}\n")
        return 0
    command, rest = args[0], args[1:]
    for spec in COMMANDS:
        if spec.name == command:
            return spec.load()(rest)
    sys.stderr.write(f"ddp-lsp: unknown command {command!r}\n\n{USAGE}")
    return 2
