"""Processes that end badly without a Python exception, for ``ddp-lsp smallrun`` tests (no torch).

modes: segv (a crash in native code) | orphan (starts a detached grandchild, then exits 0).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys


def crash_in_native_code() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def main() -> None:
    if sys.argv[1] == "segv":
        crash_in_native_code()
    else:
        # A helper in a session of its own, as a careless launcher or a daemon would leave.
        # Not a Python process: it never registers itself with the supervisor.
        subprocess.Popen(["sleep", "300"], start_new_session=True)


if __name__ == "__main__":
    main()
