"""The process-group backend a call to ``init_process_group`` names, read from the code.

One reader for DDP508 (the backend the code fixes is not on the machine) and the preflight's
script reader (``ddp_lsp/preflight/scriptinfo.py``: which backend the job needs probed).
"""

from __future__ import annotations

import ast


def backend_argument(call: ast.Call) -> ast.expr | None:
    """What ``init_process_group(...)`` is given as its backend: the ``backend=`` keyword, else
    the first positional argument (None when there is neither, or it is a ``*args``)."""
    for kw in call.keywords:
        if kw.arg == "backend":
            return kw.value
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return None


def literal_backend(text: str) -> str:
    """The backend a string names, lower-cased; ``"nccl"`` whenever NCCL is in it: a
    per-device string (``"cuda:nccl,cpu:gloo"``) still needs NCCL to start on a CUDA device."""
    value = text.lower()
    return "nccl" if "nccl" in value else value
