"""Notebooks: the code cells of an ``.ipynb`` analysed together, mapped back to their cells.

People launch DDP from notebooks (``accelerate.notebook_launcher``), so the training function is
spread over cells: an import in the first cell decides what a call in the fifth one means. The
code cells are concatenated in order into one module (each cell starting on a fresh line), the
module is analysed like any file, and every finding, fix edit and related location is mapped
back to the cell and the cell-relative line it came from.

IPython magics (``%time``, ``!pip install``) are not Python: their lines are turned into
comments of the same length, so columns still line up, and a cell magic (``%%bash``) comments
out its whole cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lsprotocol import types as lsp

from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.convert import Codec


def split_lines(text: str) -> list[str]:
    from ddp_lsp.core.document import split_lines as split  # the core loads after initialize

    return split(text)


CODE_CELL = 2  # lsprotocol NotebookCellKind.Code


@dataclass
class Cell:
    uri: str
    kind: int
    text: str = ""
    version: int | None = None
    language: str = "python"

    @property
    def is_python(self) -> bool:
        return self.kind == CODE_CELL and self.language in ("python", "")


@dataclass
class CellView:
    """Where a code cell sits in the concatenated module."""

    cell: Cell
    start: int  # first line in the module
    count: int  # number of lines the cell contributes


@dataclass
class Notebook:
    uri: str
    version: int | None
    cells: list[Cell] = field(default_factory=list)
    views: list[CellView] = field(default_factory=list)

    def cell(self, uri: str) -> Cell | None:
        for c in self.cells:
            if c.uri == uri:
                return c
        return None

    def source(self) -> str:
        """The concatenated module; also recomputes where each code cell sits in it."""
        parts: list[str] = []
        views: list[CellView] = []
        line = 0
        for c in self.cells:
            if not c.is_python:
                continue
            text = _neutralise_magics(c.text)
            if text and not text.endswith(("\n", "\r")):
                text += "\n"
            count = len(split_lines(text)) - 1 if text else 0
            views.append(CellView(c, line, count))
            parts.append(text)
            line += count
        self.views = views
        return "".join(parts)

    def view_of(self, uri: str) -> CellView | None:
        for v in self.views:
            if v.cell.uri == uri:
                return v
        return None

    def view_at(self, line: int) -> CellView | None:
        """The cell owning a module line (the last cell owns the module's final empty line)."""
        for v in self.views:
            if v.start <= line < v.start + v.count:
                return v
        return self.views[-1] if self.views else None


def _neutralise_magics(text: str) -> str:
    if not text:
        return text
    lines = split_lines(text)
    if lines[0].lstrip().startswith("%%"):
        return "".join("#" + ln[1:] if ln.strip() else ln for ln in lines)
    out = []
    for ln in lines:
        stripped = ln.lstrip()
        if stripped.startswith(("%", "!")):
            indent = len(ln) - len(stripped)
            ln = ln[:indent] + "#" + ln[indent + 1 :]
        out.append(ln)
    return "".join(out)


def apply_change(
    text: str, start: tuple[int, int], end: tuple[int, int], new: str, codec: Codec
) -> str:
    """``text`` with the LSP range ``start..end`` (in ``codec``'s encoding) replaced."""
    lines = split_lines(text)
    a = codec.to_core(lines, *start)
    b = codec.to_core(lines, *end)
    if b < a:
        a, b = b, a
    return text[: _offset(lines, a)] + new + text[_offset(lines, b) :]


def _offset(lines: Sequence[str], pos: Pos) -> int:
    return sum(len(ln) for ln in lines[: pos.line]) + pos.col


def apply_notebook_change(
    nb: Notebook, change: lsp.NotebookDocumentChangeEvent, codec: Codec
) -> list[str]:
    """Apply a ``notebookDocument/didChange`` event; returns the URIs of closed cells."""
    closed: list[str] = []
    cells = change.cells
    if cells is None:
        return closed
    if cells.structure is not None:
        opened = {d.uri: d for d in cells.structure.did_open or []}
        arr = cells.structure.array
        new_cells = []
        for c in arr.cells or []:
            item = opened.get(c.document)
            old = nb.cell(c.document)
            new_cells.append(
                Cell(
                    c.document,
                    int(c.kind),
                    item.text if item else (old.text if old else ""),
                    item.version if item else (old.version if old else None),
                    item.language_id if item else (old.language if old else "python"),
                )
            )
        nb.cells[arr.start : arr.start + arr.delete_count] = new_cells
        closed.extend(d.uri for d in cells.structure.did_close or [])
    for c in cells.data or []:
        existing = nb.cell(c.document)
        if existing is not None:
            existing.kind = int(c.kind)
    for content in cells.text_content or []:
        cell = nb.cell(content.document.uri)
        if cell is None:
            continue
        for ch in content.changes:
            rng = getattr(ch, "range", None)
            if rng is None:
                cell.text = ch.text
            else:
                cell.text = apply_change(
                    cell.text,
                    (rng.start.line, rng.start.character),
                    (rng.end.line, rng.end.character),
                    ch.text,
                    codec,
                )
        cell.version = content.document.version
    return closed
