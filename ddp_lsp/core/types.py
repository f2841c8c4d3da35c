"""Value types shared by the core, the rules and every front end.

Positions are 0-based lines and *code-point* columns: the LSP adapter is the only place that
knows about UTF-16, and the CLI converts to 1-based rows and columns when it prints.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace


class Severity(enum.IntEnum):
    """Diagnostic severity; the values are the LSP ``DiagnosticSeverity`` numbers."""

    ERROR = 1
    WARNING = 2
    INFORMATION = 3
    HINT = 4

    @property
    def label(self) -> str:
        return _SEVERITY_LABELS[self]

    @classmethod
    def parse(cls, value: str) -> Severity:
        """``"error"``, ``"warning"``, ``"information"`` (or ``"info"``), ``"hint"``."""
        key = value.strip().lower()
        if key == "info":
            key = "information"
        for sev, label in _SEVERITY_LABELS.items():
            if label == key:
                return sev
        raise ValueError(
            f"unknown severity {value!r} (expected error, warning, information or hint)"
        )


_SEVERITY_LABELS = {
    Severity.ERROR: "error",
    Severity.WARNING: "warning",
    Severity.INFORMATION: "information",
    Severity.HINT: "hint",
}


class Tag(enum.IntEnum):
    """Diagnostic tags; the values are the LSP ``DiagnosticTag`` numbers."""

    UNNECESSARY = 1
    DEPRECATED = 2


class FixAvailability(enum.Enum):
    NONE = "none"
    SOMETIMES = "sometimes"
    ALWAYS = "always"


@dataclass(frozen=True, order=True)
class Pos:
    line: int
    col: int


@dataclass(frozen=True, order=True)
class Span:
    """A half-open text range: 0-based lines, code-point columns."""

    start: Pos
    end: Pos

    @classmethod
    def of(cls, line: int, col: int, end_line: int, end_col: int) -> Span:
        return cls(Pos(line, col), Pos(end_line, end_col))

    def shifted(self, lines: int) -> Span:
        if lines == 0:
            return self
        return Span(
            Pos(self.start.line + lines, self.start.col), Pos(self.end.line + lines, self.end.col)
        )

    def contains(self, pos: Pos) -> bool:
        return self.start <= pos <= self.end


@dataclass(frozen=True)
class Edit:
    """Replace the text in ``span`` by ``text`` (an insertion when the span is empty)."""

    span: Span
    text: str

    def shifted(self, lines: int) -> Edit:
        return self if lines == 0 else Edit(self.span.shifted(lines), self.text)


@dataclass(frozen=True)
class Fix:
    """One way to resolve a finding.

    ``imports`` are import statements the fix needs (``"import contextlib"``,
    ``"import torch.distributed as dist"``); they are turned into edits against the whole
    document when the finding is published, so an import is added once however many fixes
    need it, and never when the module already has it.
    """

    title: str
    edits: tuple[Edit, ...]
    safe: bool = True
    preferred: bool = False
    imports: tuple[str, ...] = ()

    def shifted(self, lines: int) -> Fix:
        if lines == 0:
            return self
        return replace(self, edits=tuple(e.shifted(lines) for e in self.edits))


@dataclass(frozen=True)
class Related:
    """A place that explains a finding (the rank guard of DDP103, the DDP wrap of DDP101)."""

    span: Span
    message: str
    path: str | None = None  # None: the same document


@dataclass(frozen=True)
class Finding:
    rule_id: str
    span: Span
    message: str
    severity: Severity
    fixes: tuple[Fix, ...] = ()
    related: tuple[Related, ...] = ()
    tags: tuple[Tag, ...] = ()
    name: str = ""  # the rule's kebab-case name, filled in by the engine

    def shifted(self, lines: int) -> Finding:
        if lines == 0:
            return self
        return replace(
            self,
            span=self.span.shifted(lines),
            fixes=tuple(f.shifted(lines) for f in self.fixes),
            related=tuple(
                r if r.path is not None else replace(r, span=r.span.shifted(lines))
                for r in self.related
            ),
        )

    @property
    def preferred_fix(self) -> Fix | None:
        for fix in self.fixes:
            if fix.preferred:
                return fix
        return self.fixes[0] if self.fixes else None

    @property
    def safe_fix(self) -> Fix | None:
        """The fix that fix-all applies: the preferred one if safe, else the first safe one."""
        preferred = self.preferred_fix
        if preferred is not None and preferred.safe:
            return preferred
        for fix in self.fixes:
            if fix.safe:
                return fix
        return None


@dataclass(frozen=True)
class RuleMeta:
    id: str  # "DDP201"
    name: str  # "clip-without-unscale"
    severity: Severity
    summary: str  # one line, shown by `ddp-lsp rules`
    fix: FixAvailability = FixAvailability.NONE
    tags: tuple[Tag, ...] = ()
    # The bug exists only where several ranks run the code (an unguarded save, a hard-coded
    # device): silent in the functions the project finds single-process (project/reach.py).
    # False: a bug in any process (a scaler misuse, a deprecated API, a data-loading cost).
    distributed_only: bool = False
    # The bug is a bug in any PyTorch program (a scaler misuse, a graph kept alive, a
    # deprecated API, a data-loading cost): the rule also runs in modules that are not
    # distributed code at all (a single-GPU script, a benchmark, a test), where the engine
    # runs no other rule. Never together with ``distributed_only``.
    any_module: bool = False
    # False: off by default, for a rule whose findings on real code are mostly false alarms
    # (docs/accuracy.md): it runs only where `select` names it by its full id (`DDP304`), not
    # through a prefix (`DDP`, `DDP3`). docs/rules and `ddp-lsp rules` say so.
    default_on: bool = True

    @property
    def url(self) -> str:
        return f"{DOCS_BASE_URL}/{self.id}.md"


DOCS_BASE_URL = "https://github.com/ddp-lsp/ddp-lsp/blob/main/docs/rules"


@dataclass(frozen=True)
class InternalError:
    """A rule that raised: reported to logs (and ``--verbose``), never as a finding."""

    rule_id: str
    message: str
    line: int = 0


@dataclass(frozen=True)
class NotAnalysed:
    """Code the analysis skipped: it parses only in a newer Python grammar than the one running
    (PEP 695 ``def f[T](x: T)`` or ``type X = int`` under Python 3.11). Lines are 0-based and
    inclusive; front ends say so instead of reporting an unexamined file as clean."""

    line: int
    end_line: int
    reason: str


@dataclass(frozen=True)
class AnalysisResult:
    findings: tuple[Finding, ...]
    errors: tuple[InternalError, ...] = field(default=())
    not_analysed: tuple[NotAnalysed, ...] = field(default=())
