"""Applying fixes to text: single fixes, fix-all, and the imports fixes need.

Fix-all applies every chosen fix whose edits do not overlap an already accepted one, then
re-analyses and repeats (a fix can only be judged against the text it was computed for), up to
a bound; the result is a fixed point, so running it again changes nothing (idempotence).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ddp_lsp.core.edits import insert_at
from ddp_lsp.core.types import Edit, Finding, Fix, Pos

MAX_PASSES = 10


def _offsets(lines: Sequence[str]) -> list[int]:
    out = [0]
    for line in lines:
        out.append(out[-1] + len(line))
    return out


def _offset(pos: Pos, lines: Sequence[str], starts: list[int]) -> int:
    if pos.line >= len(lines):
        return starts[-1]
    body = len(lines[pos.line].rstrip("\r\n"))
    return starts[pos.line] + min(pos.col, body if pos.col <= body else len(lines[pos.line]))


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (positions refer to ``text``); identical edits apply once."""
    from ddp_lsp.core.document import split_lines

    lines = split_lines(text)
    starts = _offsets(lines)
    # Identical edits apply once; ties at one position keep the order the fix listed them in
    # (an insertion before a re-indent of the same line must stay first). sorted() is stable.
    unique = dict.fromkeys(
        (_offset(e.span.start, lines, starts), _offset(e.span.end, lines, starts), e.text)
        for e in edits
    )
    resolved = sorted(unique, key=lambda t: (t[0], t[1]))
    out: list[str] = []
    cursor = 0
    for a, b, new in resolved:
        if a < cursor:
            raise ValueError("overlapping edits")
        out.append(text[cursor:a])
        out.append(new)
        cursor = b
    out.append(text[cursor:])
    return "".join(out)


def _ranges(fix: Fix) -> list[tuple[Pos, Pos]]:
    return [(e.span.start, e.span.end) for e in fix.edits]


def _overlaps(a: tuple[Pos, Pos], b: tuple[Pos, Pos]) -> bool:
    # Two insertions at the same point conflict too (their order would be arbitrary).
    if a[0] == a[1] and b[0] == b[1]:
        return a[0] == b[0]
    return (
        a[0] < b[1]
        and b[0] < a[1]
        or (a[0] == a[1] and b[0] <= a[0] < b[1])
        or (b[0] == b[1] and a[0] <= b[0] < a[1])
    )


def select_non_overlapping(fixes: Iterable[Fix]) -> list[Fix]:
    accepted: list[Fix] = []
    taken: list[tuple[Pos, Pos]] = []
    taken_edits: set[Edit] = set()
    for fix in fixes:
        ranges = [r for e, r in zip(fix.edits, _ranges(fix), strict=True) if e not in taken_edits]
        if any(_overlaps(r, t) for r in ranges for t in taken):
            continue
        accepted.append(fix)
        for e in fix.edits:
            if e not in taken_edits:
                taken_edits.add(e)
                taken.append((e.span.start, e.span.end))
    return accepted


def _unchanged(text: str, fixes: Sequence[Fix]) -> set[int]:
    """The ids of ``fixes`` whose every edit writes what is already there (fixed nothing)."""
    from ddp_lsp.core.document import split_lines

    lines = split_lines(text)
    starts = _offsets(lines)
    out = set()
    for fix in fixes:
        if all(
            text[_offset(e.span.start, lines, starts) : _offset(e.span.end, lines, starts)]
            == e.text
            for e in fix.edits
        ):
            out.add(id(fix))
    return out


FixKey = tuple[str, str]  # (rule id, fix title): a finding's identity across passes


def fix_key(finding: Finding, fix: Fix) -> FixKey:
    # Positions move as fixes insert lines; the rule and the fix's title do not.
    return finding.rule_id, fix.title


@dataclass(frozen=True)
class FixStats:
    """How a fix-all went, so that "N fixable" before and "Fixed M" after can be reconciled.

    ``fixable``: findings with a chosen fix in the text as given (what ``check`` counts);
    ``applied``: fixes applied over every pass; ``late``: of those, fixes of findings that
    appeared only after other fixes (a fix that adds a call another rule then wants fixed);
    ``first``: the keys of the fixable findings as given; ``done``: the keys of every fix
    applied. :meth:`reconcile` adds what is left at the end."""

    fixable: int = 0
    applied: int = 0
    late: int = 0
    first: tuple[FixKey, ...] = ()
    done: tuple[FixKey, ...] = ()

    def reconcile(self, left: Iterable[FixKey]) -> tuple[int, int]:
        """(absorbed, left): of the findings fixable at first and not fixed by their own fix,
        how many went away with the fixes of others, and how many are still fixable at the
        end (their edits kept overlapping, or changed nothing)."""
        first, done = Counter(self.first), Counter(self.done)
        unfixed = first - done
        still = sum((unfixed & Counter(left)).values())
        return sum(unfixed.values()) - still, still


def fix_all(
    text: str,
    analyze: Callable[[str], Sequence[Finding]],
    choose: Callable[[Finding], Fix | None],
) -> tuple[str, int]:
    """Apply fixes until none applies; returns (new text, number of fixes applied)."""
    new, stats = fix_all_stats(text, analyze, choose)
    return new, stats.applied


def fix_all_stats(
    text: str,
    analyze: Callable[[str], Sequence[Finding]],
    choose: Callable[[Finding], Fix | None],
) -> tuple[str, FixStats]:
    """:func:`fix_all`, with the :class:`FixStats` of the run."""
    applied = 0
    first: list[FixKey] | None = None
    done: list[FixKey] = []
    for _ in range(MAX_PASSES):
        findings = analyze(text)
        pairs = [(x, f) for x, f in ((x, choose(x)) for x in findings) if f is not None]
        if first is None:
            first = [fix_key(x, f) for x, f in pairs]
        if not pairs:
            break
        chosen = select_non_overlapping([f for _, f in pairs])
        new = apply_edits(text, [e for f in chosen for e in f.edits])
        if new == text:
            break
        same = _unchanged(text, chosen)
        ids = {id(f) for f in chosen if id(f) not in same}
        fixed = [fix_key(x, f) for x, f in pairs if id(f) in ids]
        done.extend(fixed)  # a fix shared by two findings fixes both: each counts
        applied += len(fixed)
        text = new
    first = first or []
    late = sum((Counter(done) - Counter(first)).values())
    return text, FixStats(len(first), applied, late, tuple(first), tuple(done))


# -- imports --------------------------------------------------------------------------------


def import_insertion_line(body_chunks: Sequence[tuple[int, ast.Module | None, int]]) -> int:
    """The line after the module's leading docstring, ``__future__`` and import block.

    ``body_chunks`` are (chunk start line, tree, line base) of the first chunks.
    """
    return import_layout(body_chunks).end


# isort's (and ruff's) sections, in file order.
FUTURE, STDLIB, THIRD_PARTY, LOCAL = range(4)


@dataclass(frozen=True)
class ImportSlot:
    """One statement of the module's leading import block."""

    line: int  # 0-based, first line
    end_line: int  # 0-based, last line
    section: int
    key: tuple[int, str]  # isort's order inside a section: `import x` before `from x import`


@dataclass(frozen=True)
class ImportLayout:
    """The module's leading imports, to place a new import where isort would."""

    end: int  # the line after the docstring, __future__ and the import block
    slots: tuple[ImportSlot, ...] = ()


def import_layout(body_chunks: Sequence[tuple[int, ast.Module | None, int]]) -> ImportLayout:
    line = 0
    slots: list[ImportSlot] = []
    for start, tree, base in body_chunks:
        if tree is None:
            break
        done = False
        for stmt in tree.body:
            is_doc = (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
                and line == 0
            )
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) or is_doc:
                first = start + stmt.lineno - 1 + base
                line = start + (stmt.end_lineno or stmt.lineno) - 1 + base + 1
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    section, key = import_order(stmt)
                    slots.append(ImportSlot(first, line - 1, section, key))
                continue
            done = True
            break
        if done:
            break
    return ImportLayout(line, tuple(slots))


def import_order(node: ast.Import | ast.ImportFrom) -> tuple[int, tuple[int, str]]:
    """(section, sort key) as isort's default profile (and ruff's) orders imports."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return LOCAL, (1, "." * node.level + (node.module or "").lower())
        module, kind = node.module or "", 1
    else:
        module, kind = node.names[0].name, 0
    top = module.split(".")[0]
    if module == "__future__":
        section = FUTURE
    elif top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names:
        section = STDLIB
    else:
        section = THIRD_PARTY  # first-party modules cannot be told apart here: see _place
    return section, (kind, module.lower())


def _blocks(slots: Sequence[ImportSlot]) -> list[list[ImportSlot]]:
    """Runs of import statements with no blank line (or comment) between them."""
    out: list[list[ImportSlot]] = []
    for slot in slots:
        if out and out[-1][-1].end_line + 1 == slot.line:
            out[-1].append(slot)
        else:
            out.append([slot])
    return out


def _place(layout: ImportLayout, section: int, key: tuple[int, str]) -> tuple[int, str]:
    """(line to insert at, "" | "blank-after" | "blank-before") for a new import."""
    blocks = _blocks(layout.slots)
    # The first block that holds this section: a project's own modules usually form a later
    # block of their own, and a third-party import must not land among them.
    for block in blocks:
        same = [s for s in block if s.section == section]
        if same:
            after = next((s for s in same if s.key > key), None)
            return (after.line, "") if after is not None else (same[-1].end_line + 1, "")
    for block in blocks:
        for slot in block:
            if slot.section > section:
                if slot is block[0]:
                    return slot.line, "blank-after"  # a section of its own, before this one
                return slot.line, ""  # sections not separated in this file: keep it so
    if layout.slots:
        return layout.slots[-1].end_line + 1, "blank-before"
    return layout.end, ""


def import_edit(
    imports: Sequence[str], present: Callable[[str], bool], line: int, newline: str
) -> Edit | None:
    """All missing ``imports`` at one ``line`` (see :func:`import_edits` for isort's place)."""
    edits = import_edits(imports, present, ImportLayout(line), newline)
    return edits[0] if edits else None


def import_edits(
    imports: Sequence[str], present: Callable[[str], bool], layout: ImportLayout, newline: str
) -> tuple[Edit, ...]:
    """Edits adding the missing ``imports`` where isort would put them: in their section
    (``__future__``, standard library, third party, local), in order inside it, after the
    module docstring and ``from __future__`` imports; a section the module lacks becomes a
    block of its own, separated by a blank line."""
    missing: list[str] = []
    for stmt in imports:
        if stmt not in missing and not present(stmt):
            missing.append(stmt)
    groups: dict[int, list[tuple[int, tuple[int, str], str, str]]] = {}
    for stmt in missing:
        try:
            node = ast.parse(stmt).body[0]
        except SyntaxError:
            node = None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            section, key = import_order(node)
        else:
            section, key = THIRD_PARTY, (2, stmt)
        line, mode = _place(layout, section, key)
        groups.setdefault(line, []).append((section, key, stmt, mode))
    edits = []
    for line, items in sorted(groups.items()):
        # Several imports at one place: in isort's order, a blank line between sections.
        items.sort()
        text = newline if items[0][3] == "blank-before" else ""
        for i, (section, _, stmt, _) in enumerate(items):
            if i and section != items[i - 1][0]:
                text += newline
            text += stmt + newline
        if items[-1][3] == "blank-after":
            text += newline
        edits.append(insert_at(Pos(line, 0), text))
    return tuple(edits)
