"""``python -m ddp_lsp.cli``: the command line (``python -m ddp_lsp`` is the usual way)."""

import sys

from ddp_lsp.cli import main

if __name__ == "__main__":
    sys.exit(main())
