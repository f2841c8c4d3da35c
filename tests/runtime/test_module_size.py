"""The runtime package stays readable: no module over 800 lines (split by responsibility)."""

from __future__ import annotations

from pathlib import Path

import ddp_lsp.runtime

LIMIT = 800


def test_no_runtime_module_is_over_800_lines() -> None:
    root = Path(ddp_lsp.runtime.__file__).parent
    sizes = {
        str(path.relative_to(root)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }
    assert len(sizes) >= 10  # the package was found
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
