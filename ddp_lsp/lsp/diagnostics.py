"""Findings -> LSP diagnostics, built as plain JSON-ready dicts.

Diagnostics are published on every keystroke, so they skip the attrs/cattrs round trip: a
dict per finding is all ``json.dumps`` needs. Every publication repeats the whole list (LSP's
rule), and a client pays for each JSON object of each publication (VS Code converts every
diagnostic; a Python client's collector scans every one it keeps), so a diagnostic carries what
a client shows and nothing more:

- no ``data``: a code action finds its finding among the server's current findings by range
  (``actions.py``), so there is nothing to carry back;
- ``tags`` only for the tags the client declared (``tagSupport.valueSet``) and
  ``relatedInformation`` only when it declared ``relatedInformation``, as LSP asks
  (:class:`DiagnosticSupport`); a client that cannot show them does not get them.

A diagnostic dict is never changed once published: the next analysis reuses it as it is for a
finding that stayed (``ServerState._render``), and :class:`PublicationEncoder` reuses its JSON
text, so a publication encodes only the diagnostics that are new.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ddp_lsp.core.types import Finding, Related
from ddp_lsp.lsp.convert import Codec

SOURCE = "ddp-lsp"


@dataclass(frozen=True)
class DiagnosticSupport:
    """What of a diagnostic the client declared it can show (``publishDiagnostics`` client
    capabilities): the ``tags`` it knows, and whether it takes ``relatedInformation``."""

    tags: frozenset[int] = frozenset({1, 2})
    related: bool = True


# Everything: the state's default until ``initialize`` says what the client shows (unit tests
# drive the state without one).
ALL = DiagnosticSupport()


def diagnostic_support(caps: Any) -> DiagnosticSupport:
    """From lsprotocol ``ClientCapabilities``: ``textDocument.publishDiagnostics``, and
    ``textDocument.diagnostic`` where the client declares the same for pulled diagnostics."""
    td = getattr(caps, "text_document", None)
    tags: set[int] = set()
    related = False
    for c in (getattr(td, "publish_diagnostics", None), getattr(td, "diagnostic", None)):
        if c is None:
            continue
        related = related or bool(getattr(c, "related_information", False))
        tag_support = getattr(c, "tag_support", None)
        for t in getattr(tag_support, "value_set", None) or ():
            tags.add(int(t))
    return DiagnosticSupport(frozenset(tags), related)


@lru_cache(maxsize=256)
def rule_url(rule_id: str) -> str | None:
    from ddp_lsp.core.registry import meta_by_id

    meta = meta_by_id(rule_id)
    return meta.url if meta is not None else None


def to_diagnostic(
    finding: Finding,
    lines: Sequence[str],
    codec: Codec,
    uri_for_line: Any = None,
    line_offset: int = 0,
    support: DiagnosticSupport = ALL,
) -> dict[str, Any]:
    """One diagnostic; ``line_offset`` maps a notebook's concatenated lines back to a cell."""
    span = finding.span
    start, end = span.start, span.end
    rng = codec.range_dict(lines, start, end)
    if line_offset:
        rng["start"]["line"] -= line_offset
        rng["end"]["line"] -= line_offset
    diag: dict[str, Any] = {
        "range": rng,
        "severity": int(finding.severity),
        "code": finding.rule_id,
        "source": SOURCE,
        "message": finding.message,
    }
    url = rule_url(finding.rule_id)
    if url:
        diag["codeDescription"] = {"href": url}
    if finding.tags:
        tags = [int(t) for t in finding.tags if int(t) in support.tags]
        if tags:
            diag["tags"] = tags
    if finding.related and support.related:
        related = []
        for rel in finding.related:
            if rel.path is not None:
                if os.path.isabs(rel.path):  # the core gives other files' absolute paths
                    related.append(_elsewhere(rel.path, rel))
                continue
            if uri_for_line is None:
                continue
            uri, offset = uri_for_line(rel.span.start.line)
            r = codec.range_dict(lines, rel.span.start, rel.span.end)
            r["start"]["line"] -= offset
            r["end"]["line"] -= offset
            related.append({"location": {"uri": uri, "range": r}, "message": rel.message})
        if related:
            diag["relatedInformation"] = related
    return diag


def _elsewhere(path: str, rel: Related) -> dict[str, Any]:
    """A related location in another file (the DDP wrap in main.py of a finding in engine.py).

    Its columns are code points of a text the server does not hold, so the location is its
    lines: from the start of the first to the start of the line after the last, which is
    exact in every position encoding.
    """
    span = rel.span
    rng = {
        "start": {"line": span.start.line, "character": 0},
        "end": {"line": span.end.line + 1, "character": 0},
    }
    return {"location": {"uri": Path(path).as_uri(), "range": rng}, "message": rel.message}


def as_lsp(d: dict[str, Any]) -> lsp.Diagnostic:
    """A published dict as an lsprotocol ``Diagnostic`` (for responses pygls serialises)."""
    diag = lsp.Diagnostic(
        range=_range(d["range"]),
        message=d["message"],
        severity=lsp.DiagnosticSeverity(d["severity"]),
        code=d["code"],
        source=d["source"],
    )
    if "codeDescription" in d:
        diag.code_description = lsp.CodeDescription(href=d["codeDescription"]["href"])
    if "tags" in d:
        diag.tags = [lsp.DiagnosticTag(t) for t in d["tags"]]
    if "relatedInformation" in d:
        diag.related_information = [
            lsp.DiagnosticRelatedInformation(
                location=lsp.Location(r["location"]["uri"], _range(r["location"]["range"])),
                message=r["message"],
            )
            for r in d["relatedInformation"]
        ]
    return diag


def _range(r: dict[str, Any]) -> lsp.Range:
    return lsp.Range(
        lsp.Position(r["start"]["line"], r["start"]["character"]),
        lsp.Position(r["end"]["line"], r["end"]["character"]),
    )


# -- reusing the diagnostics of the previous analysis ------------------------------------------
# ServerState._render reuses the diagnostic of a finding that is the very same object as
# before, and copies with its lines moved the one of a finding that moved with its chunk.

# A diagnostic as published: (finding, index, view URI, dict, text of the lines it covers).
Rendered = tuple[Finding, int, str, dict[str, Any], tuple[str, ...]]


def content_key(f: Finding) -> tuple[object, ...]:
    """What a diagnostic shows of a finding, with its lines (and those of its related
    locations in the same file) counted from its first line."""
    sp = f.span
    first = sp.start.line
    related = tuple(
        (
            r.message,
            r.path,
            r.span.start.line - (first if r.path is None else 0),
            r.span.start.col,
            r.span.end.line - (first if r.path is None else 0),
            r.span.end.col,
        )
        for r in f.related
    )
    return (
        f.rule_id,
        f.message,
        f.severity,
        f.tags,
        bool(f.fixes),
        sp.start.col,
        sp.end.col,
        sp.end.line - first,
        related,
    )


def covered_lines(f: Finding, lines: list[str]) -> tuple[str, ...]:
    """The text of the lines a finding's diagnostic covers: its own and its same-file related
    locations' (equal texts give equal columns in any position encoding)."""
    out = tuple(lines[f.span.start.line : f.span.end.line + 1])
    for r in f.related:
        if r.path is None:
            out += ("\n",) + tuple(lines[r.span.start.line : r.span.end.line + 1])
    return out


def moved_pool(
    cache: dict[int, Rendered], findings: tuple[Finding, ...]
) -> dict[tuple[object, ...], list[Rendered]]:
    """Diagnostics of the previous findings that are gone, by what they show but their lines."""
    # The cache holds its findings alive, so an id shared with a current finding is that
    # very finding (reused by identity, not moved).
    current = {id(f) for f in findings}
    pool: dict[tuple[object, ...], list[Rendered]] = {}
    for key, hit in cache.items():
        if key in current:
            continue
        pool.setdefault(content_key(hit[0]), []).append(hit)
    return pool


def reuse_moved(
    pool: dict[tuple[object, ...], list[Rendered]],
    f: Finding,
    lines: list[str],
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """A copy of a gone finding's diagnostic with its lines moved to ``f``'s, when ``f`` shows
    the same and the lines it covers hold the same text (else None, and those texts)."""
    candidates = pool.get(content_key(f))
    if not candidates:
        return None, ()
    texts = covered_lines(f, lines)
    for k, old in enumerate(candidates):
        if old[4] != texts:
            continue
        del candidates[k]
        src = old[3]
        delta = f.span.start.line - src["range"]["start"]["line"]
        diag = dict(src)
        diag["range"] = moved_range(src["range"], delta)
        if "relatedInformation" in src:
            # Same-file locations move with the finding; other files' do not. Entries are in
            # the order of ``f.related`` (see to_diagnostic; present only when the client
            # takes related information, and then one per shown location).
            moved_rel = []
            shown = [r for r in f.related if r.path is None or os.path.isabs(r.path)]
            for r, entry in zip(shown, src["relatedInformation"], strict=True):
                if r.path is None:
                    loc = entry["location"]
                    entry = {
                        "location": {"uri": loc["uri"], "range": moved_range(loc["range"], delta)},
                        "message": entry["message"],
                    }
                moved_rel.append(entry)
            diag["relatedInformation"] = moved_rel
        return diag, texts
    return None, texts


def moved_range(rng: dict[str, Any], delta: int) -> dict[str, Any]:
    return {
        "start": {"line": rng["start"]["line"] + delta, "character": rng["start"]["character"]},
        "end": {"line": rng["end"]["line"] + delta, "character": rng["end"]["character"]},
    }


# -- the publication's JSON ----------------------------------------------------------------------

_encode = json.JSONEncoder(separators=(",", ":")).encode


class PublicationEncoder:
    """``textDocument/publishDiagnostics`` as JSON text, each diagnostic encoded once.

    Keeps, per URI, the JSON of each diagnostic dict of its last publication (by identity: a
    published dict is never changed); the next publication of that URI encodes only the dicts
    it has not seen. ASCII output, as ``json.dumps`` writes it."""

    def __init__(self) -> None:
        self._held: dict[str, dict[int, tuple[dict[str, Any], str]]] = {}

    def encode(self, uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> str:
        old = self._held.get(uri, {})
        new: dict[int, tuple[dict[str, Any], str]] = {}
        parts: list[str] = []
        for d in diagnostics:
            hit = old.get(id(d))
            if hit is None or hit[0] is not d:
                hit = (d, _encode(d))
            new[id(d)] = hit
            parts.append(hit[1])
        if new:
            self._held[uri] = new
        else:
            self._held.pop(uri, None)  # closed, or nothing to show: nothing to keep
        head = '{"jsonrpc":"2.0","method":"textDocument/publishDiagnostics","params":{"uri":'
        ver = "" if version is None else f',"version":{int(version)}'
        return f'{head}{_encode(uri)}{ver},"diagnostics":[{",".join(parts)}]}}}}'
