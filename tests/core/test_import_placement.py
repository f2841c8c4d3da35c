"""Imports added by fixes go where isort (and ruff's ``I`` rules) would put them.

Each case is a module head, the imports a fix needs, and the expected head afterwards: in the
right section (``__future__``, standard library, third party, the project's own block), in
order inside it, a missing section as a block of its own. Where ruff is installed, its isort
check confirms the result needs no reordering.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from ddp_lsp.core import fixes as fix_engine
from ddp_lsp.core.engine import fix_text

CASES = {
    "stdlib-sorted-into-its-block": (
        "import os\nimport sys\n\nimport torch\n",
        ["import contextlib"],
        "import contextlib\nimport os\nimport sys\n\nimport torch\n",
    ),
    "third-party-after-its-peers": (
        "import os\n\nimport numpy as np\nimport torch\n",
        ["import torch.distributed as dist"],
        "import os\n\nimport numpy as np\nimport torch\nimport torch.distributed as dist\n",
    ),
    "from-import-after-plain-imports": (
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n",
        ["from torch.utils.data.distributed import DistributedSampler"],
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.utils.data.distributed import DistributedSampler\n",
    ),
    "missing-stdlib-section-above": (
        "import torch\nimport torch.distributed as dist\n",
        ["import os"],
        "import os\n\nimport torch\nimport torch.distributed as dist\n",
    ),
    "missing-third-party-section-below": (
        "import os\nimport sys\n",
        ["import torch.distributed as dist"],
        "import os\nimport sys\n\nimport torch.distributed as dist\n",
    ),
    "after-docstring-and-future": (
        '"""Train."""\n\nfrom __future__ import annotations\n',
        ["import os"],
        '"""Train."""\n\nfrom __future__ import annotations\n\nimport os\n',
    ),
    "two-sections-at-once": (
        "import torch.distributed as dist\n",
        ["import torch.cuda", "import os"],
        "import os\n\nimport torch.cuda\nimport torch.distributed as dist\n",
    ),
    "project-block-left-alone": (
        "import torch\n\nfrom mypkg.utils import setup\n",
        ["import torch.distributed as dist"],
        "import torch\nimport torch.distributed as dist\n\nfrom mypkg.utils import setup\n",
    ),
    "relative-imports-last": (
        "from .utils import setup\n",
        ["import os"],
        "import os\n\nfrom .utils import setup\n",
    ),
}


def _apply(head: str, imports: list[str]) -> str:
    tree = ast.parse(head)
    layout = fix_engine.import_layout([(0, tree, 0)])
    edits = fix_engine.import_edits(imports, lambda stmt: False, layout, "\n")
    return fix_engine.apply_edits(head, edits)


@pytest.mark.parametrize("case", sorted(CASES))
def test_placement(case: str) -> None:
    head, imports, expected = CASES[case]
    assert _apply(head, imports) == expected


def _ruff_isort_clean(text: str) -> bool | None:
    try:
        r = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "I", "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "No module named ruff" in r.stderr:
        return None
    return r.returncode == 0


@pytest.mark.parametrize(
    "case",
    # ruff cannot know mypkg is first-party without a project: that case is checked above only.
    sorted(c for c in CASES if c != "project-block-left-alone"),
)
def test_ruff_agrees(case: str) -> None:
    head, imports, expected = CASES[case]
    assert _ruff_isort_clean(head) in (True, None)  # the case starts sorted
    clean = _ruff_isort_clean(expected)
    if clean is None:
        pytest.skip("ruff is not installed")
    assert clean, expected


def test_a_real_fix_places_its_import() -> None:
    """DDP101's fix needs contextlib.nullcontext: the stdlib import goes above torch."""
    text = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "\n"
        "\n"
        "def train(model, loader, optimizer, accum):\n"
        "    model = DDP(model)\n"
        "    for i, (x, y) in enumerate(loader):\n"
        "        model(x).sum().backward()\n"
        "        if (i + 1) % accum == 0:\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n"
    )
    fixed, applied = fix_text(text, unsafe=True)
    assert applied and fixed.startswith("import contextlib\n\nimport torch\n"), fixed
    assert _ruff_isort_clean(fixed) in (True, None)
