"""``ddp-lsp rules``: every rule, as a table or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ddp_lsp.cli.common import EXIT_OK, Parser, guarded


def main(argv: Sequence[str]) -> int:
    return guarded(lambda a, out, _err: run_rules(a, out), argv)


def run_rules(argv: Sequence[str], out: TextIO) -> int:
    import json

    from ddp_lsp.core.registry import all_meta

    p = Parser(prog="ddp-lsp rules", description="List every rule.")
    p.add_argument(
        "--format", "--output-format", choices=("text", "json"), default="text", dest="format"
    )
    args = p.parse_args(list(argv))
    metas = all_meta()
    if args.format == "json":
        rows = [
            {
                "code": m.id,
                "name": m.name,
                "severity": m.severity.label,
                "fix": m.fix.value,
                "summary": m.summary,
                "default_on": m.default_on,
                "url": m.url,
            }
            for m in metas
        ]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    header = ("id", "name", "severity", "fix", "summary")
    table = [header] + [
        (
            m.id,
            m.name,
            m.severity.label,
            m.fix.value,
            m.summary if m.default_on else f"{m.summary} (off by default: select {m.id})",
        )
        for m in metas
    ]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        out.write("  ".join(cells) + "  " + row[4] + "\n")
    return EXIT_OK
