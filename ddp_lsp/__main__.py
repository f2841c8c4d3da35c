"""``python -m ddp_lsp``: the same entry point as the ``ddp-lsp`` console script.

``python -m`` puts the working directory first on ``sys.path``, and editors start servers in
the project root: it is dropped before anything else is imported, so that a repository's
``json.py`` or ``struct.py`` is never imported in place of the standard library's. No
``from __future__`` import here or in ``ddp_lsp/__init__.py``: it would import a module named
``__future__`` from the working directory first. (Python itself resolved ``ddp_lsp`` before
this file ran: the editor configs we ship use ``python3 -I -m ddp_lsp``, which never puts the
working directory on ``sys.path``; see ddp_lsp/_isolation.py.)
"""

import sys

from ddp_lsp._isolation import drop_cwd

# Commands that end with the project's index in memory: millions of objects (2,040 files:
# summaries, facts, the flow's stages), which a normal exit frees one by one, and walks again
# in the collection that ends the interpreter.
_HARD_EXIT = ("check", "fix")


def run() -> int:
    """The console script's entry: ``sys.path`` without the working directory, then the CLI."""
    drop_cwd()
    from ddp_lsp.cli import main

    code = main()
    if sys.argv[1:2] and sys.argv[1] in _HARD_EXIT:
        _hard_exit(code)
    return code


def _hard_exit(code: int) -> None:
    """Leave without freeing what the command built (as mypy does): the output flushed, the
    logging handlers closed, then ``os._exit``. A cold ``check`` of 2,040 files spent about
    2 CPU s after its report, freeing its index. Returns (a normal exit follows) when the
    output cannot be flushed: its error is then reported as Python reports it. Returns too
    under a profiler or tracer (``python -m cProfile``, coverage), which report at exit."""
    import logging
    import os

    if sys.getprofile() is not None or sys.gettrace() is not None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
    except Exception:
        return
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
