"""ddp-lsp: review PyTorch distributed training code while it is being written.

One analysis core (:mod:`ddp_lsp.core` and :mod:`ddp_lsp.rules`, pure stdlib + libcst) serves a
language server (:mod:`ddp_lsp.lsp`), a CLI (:mod:`ddp_lsp.cli`) and a machine preflight
(:mod:`ddp_lsp.preflight`, which imports torch only in a child process).
"""

# No `from __future__ import annotations` here: that is a real import, done before
# ddp_lsp/__main__.py can take the working directory off sys.path (ddp_lsp/_isolation.py).
__version__ = "0.1.0"
