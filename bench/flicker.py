"""Do untouched chunks' findings flicker while a statement is half typed? Typed into real code.

    .venv/bin/python bench/flicker.py --workdir /work/corpus --trials 300 --seed 5

For each trial: a corpus file that uses ``torch.distributed`` (100-1,500 lines, parses), a line
at a statement start inside a block (its indent kept), and a statement that carries facts
(a collective, a DDP wrap, an optimizer step); a blank line is inserted there and the
statement typed key by key into a :class:`~ddp_lsp.core.document.Document`, analysed after each
key. A *flicker* is a key after which the chunk holding the line does not parse and the
findings outside that chunk (as it was before typing) differ from those after the last key
that parsed: the half-typed statement changed what the rest of the module is told. A
statement that parses may change them (``dist.barrier()`` typed in full is a new collective).
Printed: one line per flicker (file, line, the text typed so far, the findings that changed)
and the count. The corpus is the triage corpus laid out by ``bench/triage.py``; its files are
only read.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddp_lsp.core import chunks  # noqa: E402
from ddp_lsp.core.document import Document, quiet_parses  # noqa: E402
from ddp_lsp.core.engine import analyze  # noqa: E402
from ddp_lsp.core.settings import Settings  # noqa: E402
from ddp_lsp.core.types import Pos  # noqa: E402

STATEMENTS = (
    "dist.all_reduce(loss, op=dist.ReduceOp.SUM)",
    "dist.barrier(device_ids=[0])",
    "model = DDP(model, device_ids=[rank])",
    "z = criterion(out, y)",
    "with torch.no_grad():",
    "if dist.get_rank() == 0:",
    "dist.barrier()",
    "opt.step()",
)


def corpus_files(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "dist." in text and 100 < text.count("\n") < 1500:
            out.append(path)
    return out


def statement_starts(lines: list[str]) -> list[int]:
    """Indented lines where a statement starts (no bracket, string or continuation open)."""
    out = []
    depth, quote, cont = 0, None, False
    for i, line in enumerate(lines):
        text = line.strip()
        if (
            depth == 0
            and quote is None
            and not cont
            and line.startswith("    ")
            and text
            and not text.startswith(("#", ")", "]", "}", "else", "elif", "except", "finally"))
        ):
            out.append(i)
        depth, quote, cont = chunks.scan_line(line, depth, quote)
    return out


def trial(text: str, at: int, stmt: str, settings: Settings) -> tuple[str, set[object]] | None:
    """The first flicker of typing ``stmt`` at line ``at``: (typed so far, changed findings)."""
    doc = Document(text, settings.rank_model)
    line = doc.lines[at]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    doc.apply_edit(Pos(at, 0), Pos(at, 0), indent + "\n")
    starts = [s for s, _ in doc.chunks()]
    lo = max(s for s in starts if s <= at)
    hi = min((s for s in starts if s > at), default=doc.line_count) - 1

    def outside() -> list[tuple[object, ...]]:
        found = analyze(doc, settings).findings
        return [(f.rule_id, f.span, f.message) for f in found if not lo <= f.span.start.line <= hi]

    good = outside()
    for k in range(1, len(stmt) + 1):
        end = len(doc.lines[at].rstrip("\r\n"))
        doc.apply_edit(Pos(at, len(indent)), Pos(at, end), stmt[:k])
        now = outside()
        broken = any(c.problem is not None for s, c in doc.chunks() if s <= at < s + len(c.lines))
        if not broken:
            good = now
        elif now != good:
            return stmt[:k], set(now) ^ set(good)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/work/corpus"))
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    settings = Settings()
    files = corpus_files(args.workdir)
    rng.shuffle(files)
    flickers = trials = 0
    with quiet_parses():
        for path in files[: args.trials]:
            text = path.read_text(encoding="utf-8")
            try:
                ast.parse(text)
            except (SyntaxError, ValueError):
                continue
            starts = statement_starts(text.splitlines(True))
            if not starts:
                continue
            at, stmt = rng.choice(starts), rng.choice(STATEMENTS)
            trials += 1
            got = trial(text, at, stmt, settings)
            if got is not None:
                flickers += 1
                rel = os.path.relpath(path, args.workdir)
                print(f"flicker: {rel}:{at + 1} after {got[0]!r}: {sorted(map(str, got[1]))}")
    print(f"{trials} trials over {len(files)} files (seed {args.seed}): {flickers} flickers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
