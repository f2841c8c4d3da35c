"""The ``ddp-lsp`` command line: check | fix | rules | explain | serve | preflight | env |
smallrun | feasibility.

Each subcommand's implementation is imported only when it runs, so ``ddp-lsp check`` never
pays for pygls and no subcommand imports torch in this process.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: ddp-lsp <command> [options]

commands:
  check      analyse files or directories (or - for stdin) and report findings
  fix        apply safe fixes (same as: check --fix)
  rules      list every rule
  explain    print a rule's documentation (ddp-lsp explain DDP201)
  serve      run the language server (stdio by default)
  preflight  probe this machine for distributed training (needs torch in --python)
  env        print torch/CUDA/NCCL/driver/GPU/CPU/RAM/package facts for a bug report
  smallrun   run a short training command under supervision (memory growth, crashes, hangs)
  feasibility  run ~50 steps of the training command alone and under DDP: is DDP worth it?

run 'ddp-lsp <command> --help' for a command's options.
"""


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
    if command in ("check", "fix", "rules", "explain"):
        from ddp_lsp.checker import main as check_main

        return check_main(command, rest)
    if command == "serve":
        from ddp_lsp.lsp.server import main as serve_main

        return serve_main(rest)
    if command == "preflight":
        from ddp_lsp.preflight.cli import main as preflight_main

        return preflight_main(rest)
    if command == "env":
        from ddp_lsp.preflight.envinfo import main as env_main

        return env_main(rest)
    if command == "smallrun":
        from ddp_lsp.runtime.smallrun import main as smallrun_main

        return smallrun_main(rest)
    if command == "feasibility":
        from ddp_lsp.runtime.feasibility import main as feasibility_main

        return feasibility_main(rest)
    sys.stderr.write(f"ddp-lsp: unknown command {command!r}\n\n{USAGE}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
