"""The core and the rules never load pygls, lsprotocol or torch (DESIGN.md: pure and fast)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import ddp_lsp.core
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
import ddp_lsp.docs
assert all_rules()
analyze("import torch.distributed as dist\\nx = 1\\n")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pygls", "lsprotocol", "torch", "numpy"))
print(",".join(heavy))
"""


def test_core_and_rules_import_nothing_heavy() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules loaded: {out.stdout.strip()}"


def test_rule_modules_import_only_the_core() -> None:
    import ast
    from pathlib import Path

    import ddp_lsp.rules

    for path in Path(ddp_lsp.rules.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
            elif isinstance(node, ast.Import):
                mod = node.names[0].name
            else:
                continue
            top = mod.split(".")[0]
            assert top not in ("pygls", "lsprotocol", "torch"), f"{path.name} imports {mod}"
            if top == "ddp_lsp":
                assert mod.startswith(("ddp_lsp.core", "ddp_lsp.rules")), f"{path.name}: {mod}"
