"""What every ``ddp-lsp`` command of this package shares: exit statuses, usage errors, the
argument parser that raises them, and the wrapper that turns every failure into an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from ddp_lsp.config import ConfigError

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """A bad command line (exit 2, message on stderr)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().rstrip()}")


Command = Callable[[Sequence[str], TextIO, TextIO], int]


def guarded(run: Command, argv: Sequence[str]) -> int:
    """Run a command with stdout and stderr; returns the exit status, never raises."""
    out, err = sys.stdout, sys.stderr
    try:
        return run(argv, out, err)
    except UsageError as exc:
        err.write(f"{exc}\n")
        return EXIT_ERROR
    except ConfigError as exc:
        err.write(f"ddp-lsp: configuration error: {exc}\n")
        return EXIT_ERROR
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except KeyboardInterrupt:
        err.write("ddp-lsp: interrupted\n")
        return 130
    except BrokenPipeError:
        # `ddp-lsp check | head`: the reader left; nothing more to say to it.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FINDINGS
    except Exception:
        err.write("ddp-lsp: internal error (please report it):\n" + traceback.format_exc())
        return EXIT_ERROR


def display(path: Path, cwd: Path) -> str:
    """A path as the user should read it: relative to the working directory when under it."""
    if path.is_absolute():
        try:
            return path.relative_to(cwd).as_posix()
        except ValueError:
            return str(path)
    return path.as_posix()


def resolved(path: Path) -> str:
    """The absolute, symlink-free path; a symlink loop, or a link to something that is not a
    regular file, stays the link itself (Path.resolve raises on a loop), so that reading it
    reports what the link is."""
    try:
        full = str(path.resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)
    # A link to a device or a FIFO keeps its own name, so its error names what was checked.
    return full if os.path.isfile(full) or not os.path.islink(path) else os.path.abspath(path)
