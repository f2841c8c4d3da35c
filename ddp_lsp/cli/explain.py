"""``ddp-lsp explain RULE...``: a rule's documentation, as ``docs/rules`` holds it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ddp_lsp.cli.common import EXIT_ERROR, EXIT_OK, Parser, guarded


def main(argv: Sequence[str]) -> int:
    return guarded(run_explain, argv)


def run_explain(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    from ddp_lsp import docs

    p = Parser(prog="ddp-lsp explain", description="Print a rule's documentation.")
    p.add_argument("rule", nargs="+", help="a rule id (DDP201) or name (clip-without-unscale)")
    args = p.parse_args(list(argv))
    texts = []
    for rule in args.rule:
        text = docs.rule_markdown(rule)
        if text is None:
            err.write(f"ddp-lsp explain: unknown rule {rule!r}; `ddp-lsp rules` lists them all\n")
            return EXIT_ERROR
        texts.append(text)
    out.write("\n".join(texts))
    return EXIT_OK
