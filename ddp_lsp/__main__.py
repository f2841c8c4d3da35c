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


def run() -> int:
    """The console script's entry: ``sys.path`` without the working directory, then the CLI."""
    drop_cwd()
    from ddp_lsp.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
