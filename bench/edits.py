"""Edits people make, for the latency benchmarks: ``char``, ``rename`` and ``type``.

- ``char``: a character typed into an identifier of a function body, then deleted;
- ``rename``: an identifier of a function body renamed (``model`` -> ``model_v2``), then back;
- ``type``: a statement typed key by key on a new line under a statement of a function body
  (most prefixes do not parse, as while a person types), then the line deleted.

Identifiers are drawn from the whole file, so edits land in fact-bearing names (an import
alias, a DDP-wrapped model, ``init_process_group``) as often as the file holds them. Every
group of edits restores the original text. The same seed gives the same edits to every server
(``bench/bench_lsp.py`` runs ddp-lsp and ruff's server on them side by side), and the kinds
match those of the shared harness's ``lsp_latency.py --edit-kinds char,rename,type``.
"""

from __future__ import annotations

import ast
import io
import keyword
import random
import tokenize
from dataclasses import dataclass

KINDS = ("char", "rename", "type")
# Ordinary training-loop lines; some add or change findings once complete.
TYPED = (
    "loss = criterion(model(inputs), targets)",
    "running_loss += loss.item()",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "with torch.cuda.amp.autocast():",
    "if dist.get_rank() == 0:",
    "dist.barrier()",
    "optimizer.zero_grad(set_to_none=True)",
    'print(f"step {step} loss {loss.item():.4f}")',
)
_SOFT = {"match", "case", "type", "_"}


@dataclass(frozen=True)
class Edit:
    kind: str  # char | rename | type, and "undo" for the edit that restores the text
    line: int  # 0-based; columns in code points
    col: int
    end_line: int
    end_col: int
    text: str


def _body_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            lines.update(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))
    return lines


class Planner:
    """Random edits of the given kinds over ``text``; ``apply`` keeps its copy in step."""

    def __init__(self, text: str, seed: int = 0, kinds: tuple[str, ...] = KINDS) -> None:
        self.lines = text.split("\n")
        self.rng = random.Random(seed)
        self.kinds = kinds
        tree = ast.parse(text)
        body = _body_lines(tree)
        self.names = [
            (tok.start[0] - 1, tok.start[1], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.NAME
            and not keyword.iskeyword(tok.string)
            and tok.string not in _SOFT
            and tok.start[0] in body
        ]
        self.statements = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for st in node.body:
                    if isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr, ast.Return)) and (
                        st.lineno == st.end_lineno
                    ):
                        line = self.lines[st.lineno - 1]
                        self.statements.append(
                            (st.lineno - 1, line[: len(line) - len(line.lstrip())])
                        )
        self._queue: list[Edit] = []

    def next(self) -> Edit:
        if self._queue:
            return self._queue.pop(0)
        kind = self.rng.choice(self.kinds)
        if kind == "type":
            line, indent = self.rng.choice(self.statements)
            stmt = self.rng.choice(TYPED)
            end = len(self.lines[line])
            group = [Edit("type", line, end, line, end, "\n" + indent)]
            for k, ch in enumerate(stmt):
                col = len(indent) + k
                group.append(Edit("type", line + 1, col, line + 1, col, ch))
            group.append(Edit("undo", line, end, line + 1, len(indent) + len(stmt), ""))
            self._queue = group[1:]
            return group[0]
        line, col, name = self.rng.choice(self.names)
        if kind == "char":
            off = self.rng.randint(1, len(name))  # never in front of the name
            ch = self.rng.choice("abcdefghijklmnopqrstuvwxyz_0123456789")
            if keyword.iskeyword(name[:off] + ch + name[off:]):
                ch = "_"
            self._queue = [Edit("undo", line, col + off, line, col + off + 1, "")]
            return Edit("char", line, col + off, line, col + off, ch)
        new = name + self.rng.choice(["_v2", "_tmp", "2", "_new", "_x"])
        self._queue = [Edit("undo", line, col, line, col + len(new), name)]
        return Edit("rename", line, col, line, col + len(name), new)

    def apply(self, e: Edit) -> None:
        first, last = self.lines[e.line], self.lines[e.end_line]
        self.lines[e.line : e.end_line + 1] = (first[: e.col] + e.text + last[e.end_col :]).split(
            "\n"
        )

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def plan(
    text: str, count: int, seed: int = 0, kinds: tuple[str, ...] = KINDS
) -> list[tuple[str, Edit]]:
    """``count`` edits (more, to finish the last group), each with the kind of its group (an
    undo counts as the kind it undoes). Applying them all gives ``text`` back."""
    planner = Planner(text, seed, kinds)
    out: list[tuple[str, Edit]] = []
    current = ""
    while len(out) < count or planner._queue:
        e = planner.next()
        if e.kind != "undo":
            current = e.kind
        out.append((current, e))
        planner.apply(e)
    assert planner.text == text
    return out
