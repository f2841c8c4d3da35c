"""Small checks shared by the command-line front ends (preflight, smallrun).

They run before any work starts: a long preflight or training run must not end in a traceback
because ``--json`` names a folder that does not exist, or run with a timeout of -1 s.
"""

from __future__ import annotations

import argparse
import math
import os


def positive_seconds(text: str) -> float:
    """An ``argparse`` type: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds above 0")
    return value


def unwritable_reason(path: str) -> str | None:
    """Why ``path`` cannot be written as an output file, or None when it can."""
    if path == "-":
        return None
    if os.path.isdir(path):
        return f"{path} is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"the folder {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"the folder {parent} is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    return None
