"""Line suppressions: ``# ddp-lsp: ignore[DDP201]``, ``# ddp-lsp: ignore`` and ``# noqa``.

A finding is suppressed by a comment on its first line or on its last line (a multi-line call
is usually commented where it ends). ``# noqa: DDP201`` follows ruff and flake8; a bare
``# noqa`` silences every rule on the line, as it does for them.
"""

from __future__ import annotations

import re

_DDP = re.compile(r"#\s*ddp-lsp:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_NOQA = re.compile(
    r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE
)
ALL = "*"


def codes_on_line(line: str) -> frozenset[str]:
    """Rule ids suppressed on this line (``{"*"}`` for all)."""
    if "#" not in line:
        return frozenset()
    out: set[str] = set()
    for m in _DDP.finditer(line):
        codes = m.group("codes")
        if codes is None or not codes.strip():
            out.add(ALL)
        else:
            out.update(c.strip().upper() for c in re.split(r"[\s,]+", codes) if c.strip())
    for m in _NOQA.finditer(line):
        codes = m.group("codes")
        if codes is None:
            out.add(ALL)
        else:
            out.update(c.strip().upper() for c in re.split(r"[\s,]+", codes) if c.strip())
    return frozenset(out)


def is_suppressed(rule_id: str, lines: list[str], first: int, last: int) -> bool:
    for idx in {first, last}:
        if 0 <= idx < len(lines):
            codes = codes_on_line(lines[idx])
            if ALL in codes or rule_id in codes:
                return True
    return False


def add_suppression(line: str, rule_id: str) -> str:
    """The line with ``rule_id`` added to its ddp-lsp ignore comment (or a new one)."""
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    m = _DDP.search(body)
    if m is not None:
        codes = m.group("codes")
        if codes is None or not codes.strip():
            return line  # already ignores everything
        existing = [c.strip().upper() for c in re.split(r"[\s,]+", codes) if c.strip()]
        if rule_id in existing:
            return line
        new = f"# ddp-lsp: ignore[{', '.join([*existing, rule_id])}]"
        return body[: m.start()] + new + body[m.end() :] + ending
    return f"{body}  # ddp-lsp: ignore[{rule_id}]{ending}"
