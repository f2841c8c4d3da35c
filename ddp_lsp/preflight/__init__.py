"""Machine preflight for PyTorch distributed training.

Layout: :mod:`schema` (result dataclasses, JSON ``ddp-lsp-preflight/1``), :mod:`client` (run
the child from the CLI or the language server, stream results, cancel, cache), :mod:`report`
(text, Markdown, hover facts, :class:`~ddp_lsp.preflight.report.MachineFacts`), :mod:`runner`
(the child process itself), :mod:`probes` (one small unit per fact), :mod:`multinode` (the
same probes on every node under torchrun). Only the runner and the probes import torch, and
only inside the child process.
"""

from __future__ import annotations
