"""``python -m ddp_lsp.preflight``: the preflight child (see :mod:`ddp_lsp.preflight.runner`)."""

from __future__ import annotations

import sys

from ddp_lsp.preflight.runner import main

if __name__ == "__main__":
    sys.exit(main())
