"""``python -m ddp_lsp``: the same entry point as the ``ddp-lsp`` console script."""

from __future__ import annotations

import sys

from ddp_lsp.cli import main

if __name__ == "__main__":
    sys.exit(main())
