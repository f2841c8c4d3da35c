"""Keep the user's repository off ``sys.path``: ddp-lsp never imports the code it reviews.

Python puts a directory first on ``sys.path`` when it starts: the working directory for
``python -m`` and ``python -c``, the script's folder for ``python script.py``. Editors start
language servers in the project root, so a repository file named ``struct.py``, ``json.py`` or a
``ddp_lsp/`` folder would be imported in place of ours and run as soon as the folder is opened.

Two defences, both here:

- :func:`drop_cwd` removes the working directory (``''``, ``'.'`` and its absolute spelling)
  from this process's ``sys.path``. The entry points call it first (``python -m ddp_lsp`` and
  the ``ddp-lsp`` console script), so nothing imported later (pygls, libcst, ``json`` inside a
  handler) can come from the repository. It cannot undo what Python resolved before our code
  ran (with ``python -m ddp_lsp``, the ``ddp_lsp`` package itself): the editor configs we ship
  start the server with ``python3 -I -m ddp_lsp`` or the console script, neither of which puts
  the working directory on ``sys.path``.
- :func:`python_argv` builds the command line of a child that runs one of our own modules:
  ``<this interpreter> -I -c <bootstrap> <paths> <module>``. ``-I`` (isolated mode) adds
  neither the working directory nor ``PYTHONPATH`` nor the user's site directory, and ignores
  ``PYTHON*`` variables such as ``PYTHONSTARTUP``; the bootstrap then sets ``sys.path`` to this
  process's own (the working directory dropped), so the child imports ddp-lsp and its
  dependencies from exactly where the parent did, even from a ``--user`` install or a
  ``PYTHONPATH`` checkout. Callers start it in :data:`NEUTRAL_CWD`.

This module runs before the working directory is off ``sys.path``: it imports nothing that is
not already loaded when Python starts (``os``, ``sys``), and so has no ``from __future__``
import (that is a real import of a module named ``__future__``).
"""

import os
import sys

#: The working directory our own children start in: the filesystem root, never the project.
NEUTRAL_CWD = os.path.abspath(os.sep)

# Runs under -I: json and importlib come from the standard library (nothing else is on the path
# yet), then sys.path becomes the parent's and the module's main() runs.
_BOOTSTRAP = (
    "import sys, json, importlib; "
    "sys.path[:] = json.loads(sys.argv.pop(1)); "
    "sys.exit(importlib.import_module(sys.argv.pop(1)).main())"
)


def _is_dir(entry: str, cwd: str) -> bool:
    if entry in ("", "."):
        return True
    try:
        return os.path.samefile(entry, cwd)
    except (OSError, ValueError):
        return os.path.abspath(entry) == cwd


def clean_path(path: list[str], cwd: str | None = None) -> list[str]:
    """``path`` without the working directory (``''``, ``'.'`` or its absolute spelling)."""
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:  # the working directory was deleted: only '' and '.' can name it
            return [p for p in path if p not in ("", ".")]
    return [p for p in path if not _is_dir(p, cwd)]


def drop_cwd() -> None:
    """Remove the working directory from this process's ``sys.path`` (entry points only: a
    library must not edit its host's path)."""
    sys.path[:] = clean_path(list(sys.path))


def python_argv(module: str) -> list[str]:
    """The command line of a child interpreter that runs ``module.main()`` (one of ours) with an
    isolated ``sys.path``; start it with ``cwd=NEUTRAL_CWD``."""
    import json

    return [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(clean_path(list(sys.path))), module]
