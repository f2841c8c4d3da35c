"""Start-up hook that ``ddp-lsp smallrun`` and ``ddp-lsp feasibility`` put first on ``PYTHONPATH``.

Python imports ``sitecustomize`` in every interpreter it starts (unless ``-S`` or ``-I``).
Outside a supervised run it does nothing. Inside one it installs that run's hooks (stdlib only
until the script imports torch): :mod:`ddp_lsp.runtime._autoattach` for a small run
(``DDP_LSP_SMALLRUN_DIR``), :mod:`ddp_lsp.runtime.feasibility_hook` for a feasibility run
(``DDP_LSP_FEAS_DIR``); then it runs the ``sitecustomize`` this one shadows, if the environment
had one.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

# (environment variable naming the run's directory, hook module, what a failure is called)
_HOOKS = (
    ("DDP_LSP_SMALLRUN_DIR", "ddp_lsp.runtime._autoattach", "ddp-lsp smallrun: monitor"),
    ("DDP_LSP_FEAS_DIR", "ddp_lsp.runtime.feasibility_hook", "ddp-lsp feasibility: hooks"),
)


def _boot(variable: str, module_name: str, label: str) -> None:
    if not os.environ.get(variable):
        return
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        # The user's interpreter may not have ddp-lsp installed: use the supervisor's copy.
        root = os.environ.get("DDP_LSP_PACKAGE_ROOT")
        if not root:
            return
        if root not in sys.path:
            sys.path.append(root)
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return
    try:
        module.install_from_env()
    except Exception as exc:  # never stop the user's program from starting
        sys.stderr.write(f"{label} not attached: {exc!r}\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


for _hook in _HOOKS:
    _boot(*_hook)
_chain()
