"""ddp-lsp: review PyTorch distributed training code while it is being written.

One analysis core (:mod:`ddp_lsp.core` and :mod:`ddp_lsp.rules`, pure stdlib + libcst) serves a
language server (:mod:`ddp_lsp.lsp`), a CLI (:mod:`ddp_lsp.cli`) and a machine preflight
(:mod:`ddp_lsp.preflight`, which imports torch only in a child process).
"""

from __future__ import annotations

__version__ = "0.1.0"
