"""Start-up hook that ``ddp-lsp feasibility`` puts first on ``PYTHONPATH``.

Python imports ``sitecustomize`` in every interpreter it starts (unless ``-S`` or ``-I``).
Outside a feasibility run (no ``DDP_LSP_FEAS_DIR``) it does nothing. Inside one it installs
the step-timing hooks of :mod:`ddp_lsp.runtime.feasibility_hook` (stdlib only until the script
imports torch), then runs the ``sitecustomize`` this one shadows, if the environment had one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _boot() -> None:
    if not os.environ.get("DDP_LSP_FEAS_DIR"):
        return
    try:
        from ddp_lsp.runtime import feasibility_hook
    except ImportError:
        # The user's interpreter may not have ddp-lsp installed: use the supervisor's copy.
        root = os.environ.get("DDP_LSP_PACKAGE_ROOT")
        if not root:
            return
        sys.path.append(root)
        try:
            from ddp_lsp.runtime import feasibility_hook
        except ImportError:
            return
    try:
        feasibility_hook.install_from_env()
    except Exception as exc:  # never stop the user's program from starting
        sys.stderr.write(f"ddp-lsp feasibility: hooks not attached: {exc!r}\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_boot()
_chain()
