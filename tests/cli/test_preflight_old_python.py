"""``ddp-lsp preflight --python OLD``: a clear message naming the version needed, no traceback.

The child used to die on our ``from __future__ import annotations`` with a SyntaxError
traceback, shown raw. The bootstrap now checks the version first, in code that even Python 2
parses. The "old" interpreter here is this one with ``sys.version_info`` replaced before the
real bootstrap runs, so the test needs no second Python installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddp_lsp import cli
from ddp_lsp.preflight.client import MIN_PYTHON

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a shell-script interpreter")


def _old_python(tmp_path: Path, version: tuple[int, int]) -> Path:
    fake = tmp_path / f"python{version[0]}.{version[1]}"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "-E" ] && shift\n'
        '[ "$1" = "-I" ] && shift\n'
        '[ "$1" = "-c" ] && shift\n'
        'code="$1"; shift\n'
        f'exec "{sys.executable}" -E -c "import sys; '
        f"sys.version_info = ({version[0]}, {version[1]}, 0, 'final', 0); "
        'exec(sys.argv.pop(1))" "$code" "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def test_too_old_interpreter_is_named_with_the_version_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _old_python(tmp_path, (3, 8))
    rc = cli.main(["preflight", "--python", str(old)])
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert rc != 0
    need = ".".join(map(str, MIN_PYTHON))
    assert f"{old} is Python 3.8; the preflight needs Python {need} or newer" in text
    assert "Traceback" not in text and "SyntaxError" not in text
