"""Client-side helpers for the language-server tests.

They apply LSP edits to the client's copy of a text with their own position arithmetic (not the
server's ``convert.py``), so a column bug in the server cannot hide behind the same bug here.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types as lsp
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

SERVER_CMD = [sys.executable, "-m", "ddp_lsp", "serve"]
PROFILES = ["neovim", "visual_studio_code"]
TIMEOUT = 20.0

TRAIN = """import torch
import torch.distributed as dist


def train(model, loader, optimizer, scaler):
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""
CLIP_LINE = 8  # 0-based line of the clip call in TRAIN


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines without their breaks, split on CRLF, CR and LF as LSP does."""
    return _LINE_BREAK.split(text)


def units(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def to_index(text: str, line: int, character: int, encoding: str) -> int:
    """String index of an LSP position in ``text`` (no clamping: tests send valid positions)."""
    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    base = starts[line]
    body = split_lines(text)[line]
    i = 0
    while i < len(body) and units(body[: i + 1], encoding) <= character:
        i += 1
    return base + i


def position(text: str, index: int, encoding: str) -> lsp.Position:
    head = text[:index]
    lines = split_lines(head)
    return lsp.Position(len(lines) - 1, units(lines[-1], encoding))


def apply_text_edits(text: str, edits: list[lsp.TextEdit], encoding: str) -> str:
    spans = []
    for e in edits:
        a = to_index(text, e.range.start.line, e.range.start.character, encoding)
        b = to_index(text, e.range.end.line, e.range.end.character, encoding)
        spans.append((a, b, e.new_text))
    for a, b, new in sorted(spans, key=lambda s: (s[0], s[1]), reverse=True):
        text = text[:a] + new + text[b:]
    return text


def edits_for(edit: lsp.WorkspaceEdit, uri: str) -> list[lsp.TextEdit]:
    out: list[lsp.TextEdit] = []
    if edit.document_changes:
        for dc in edit.document_changes:
            assert isinstance(dc, lsp.TextDocumentEdit)
            if dc.text_document.uri == uri:
                out.extend(e for e in dc.edits if isinstance(e, lsp.TextEdit))
    if edit.changes:
        out.extend(edit.changes.get(uri, []))
    return out


@dataclass
class Published:
    uri: str
    version: int | None
    diagnostics: list[lsp.Diagnostic]


@dataclass
class Recorder:
    published: list[Published] = field(default_factory=list)
    applied: list[lsp.WorkspaceEdit] = field(default_factory=list)
    registrations: list[lsp.Registration] = field(default_factory=list)
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    lens_refreshes: int = 0
    diagnostic_refreshes: int = 0
    diagnostic_refreshed: asyncio.Event = field(default_factory=asyncio.Event)
    inlay_hint_refreshes: int = 0  # the rank view's hints (lsp/rankview.py)
    inlay_hint_refreshed: asyncio.Event = field(default_factory=asyncio.Event)
    semantic_token_refreshes: int = 0
    # Either refresh: the server re-read its settings (it sends both after a change).
    view_refreshed: asyncio.Event = field(default_factory=asyncio.Event)


def make_client() -> LanguageClient:
    """pytest-lsp's client, also recording diagnostic versions and applying workspace edits."""
    client = LanguageClient(converter_factory=default_converter)
    rec = Recorder()
    client.recorder = rec  # type: ignore[attr-defined]
    features = dict(DEFAULT_CLIENT_FEATURES)

    def publish(c: LanguageClient, params: lsp.PublishDiagnosticsParams) -> None:
        c.diagnostics[params.uri] = params.diagnostics
        rec.published.append(Published(params.uri, params.version, list(params.diagnostics)))

    def apply_edit(
        c: LanguageClient, params: lsp.ApplyWorkspaceEditParams
    ) -> lsp.ApplyWorkspaceEditResult:
        rec.applied.append(params.edit)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    def register(c: LanguageClient, params: lsp.RegistrationParams) -> None:
        rec.registrations.extend(params.registrations)
        rec.registered.set()

    def lens_refresh(c: LanguageClient, params: None) -> None:
        rec.lens_refreshes += 1

    def diagnostic_refresh(c: LanguageClient, params: None) -> None:
        rec.diagnostic_refreshes += 1
        rec.diagnostic_refreshed.set()

    def inlay_hint_refresh(c: LanguageClient, params: None) -> None:
        rec.inlay_hint_refreshes += 1
        rec.inlay_hint_refreshed.set()
        rec.view_refreshed.set()

    def semantic_tokens_refresh(c: LanguageClient, params: None) -> None:
        rec.semantic_token_refreshes += 1
        rec.view_refreshed.set()

    features[lsp.WORKSPACE_CODE_LENS_REFRESH] = lens_refresh
    features[lsp.WORKSPACE_INLAY_HINT_REFRESH] = inlay_hint_refresh
    features[lsp.WORKSPACE_SEMANTIC_TOKENS_REFRESH] = semantic_tokens_refresh
    features[lsp.WORKSPACE_DIAGNOSTIC_REFRESH] = diagnostic_refresh
    features[lsp.CLIENT_REGISTER_CAPABILITY] = register
    features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish
    features[lsp.WORKSPACE_APPLY_EDIT] = apply_edit
    register_lsp_features(client, features)
    return client


CONFIG = ClientServerConfig(server_command=SERVER_CMD, client_factory=make_client)


def capabilities(profile: str, refresh: bool = False) -> lsp.ClientCapabilities:
    """A recorded profile; ``refresh`` adds ``workspace.diagnostics.refreshSupport`` (VS Code
    has it; the recorded profile predates it)."""
    caps = client_capabilities(profile)
    if refresh:
        ws = caps.workspace or lsp.WorkspaceClientCapabilities()
        ws.diagnostics = lsp.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
        caps.workspace = ws
    return caps


async def wait_for_message(client: LanguageClient, pred: Any, timeout: float = TIMEOUT) -> Any:
    """The first ``window/showMessage`` satisfying ``pred``, waiting for it."""

    async def loop() -> Any:
        while True:
            for m in client.messages:
                if pred(m):
                    return m
            await client.wait_for_notification(lsp.WINDOW_SHOW_MESSAGE)

    return await asyncio.wait_for(loop(), timeout)


async def wait_for_refresh(client: LanguageClient, timeout: float = TIMEOUT) -> None:
    """Wait for a ``workspace/diagnostic/refresh`` request (and consume it)."""
    rec: Recorder = client.recorder  # type: ignore[attr-defined]
    await asyncio.wait_for(rec.diagnostic_refreshed.wait(), timeout)
    rec.diagnostic_refreshed.clear()


async def wait_for_diagnostics(
    client: LanguageClient,
    uri: str,
    version: int | None = None,
    pred: Any = None,
    timeout: float = TIMEOUT,
) -> Published:
    """The first publication for ``uri`` (at ``version``) satisfying ``pred``, waiting for it."""
    rec: Recorder = client.recorder  # type: ignore[attr-defined]
    seen = 0

    async def loop() -> Published:
        nonlocal seen
        while True:
            for p in rec.published[seen:]:
                if (
                    p.uri == uri
                    and (version is None or p.version == version)
                    and (pred is None or pred(p.diagnostics))
                ):
                    return p
            seen = len(rec.published)
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(loop(), timeout)


def ddp(diags: list[lsp.Diagnostic], code: str = "DDP201") -> list[lsp.Diagnostic]:
    return [d for d in diags if d.code == code and d.source == "ddp-lsp"]


class Doc:
    """The client's copy of an open document; sends incremental changes like an editor."""

    def __init__(
        self, client: LanguageClient, uri: str, text: str, encoding: str, language: str = "python"
    ) -> None:
        self.client, self.uri, self.text, self.encoding = client, uri, text, encoding
        self.version = 1
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, language, 1, text))
        )

    def apply(self, edits: list[lsp.TextEdit]) -> int:
        """Send ``edits`` (positions in the current text) one change at a time, last first."""
        ordered = sorted(
            edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True
        )
        changes = []
        for e in ordered:
            changes.append(lsp.TextDocumentContentChangePartial(range=e.range, text=e.new_text))
            self.text = apply_text_edits(self.text, [e], self.encoding)
        self.version += 1
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version), changes
            )
        )
        return self.version

    def replace(self, start: int, end: int, new: str) -> int:
        """Replace text[start:end] (string indices) with ``new``."""
        rng = lsp.Range(
            position(self.text, start, self.encoding), position(self.text, end, self.encoding)
        )
        return self.apply([lsp.TextEdit(rng, new)])

    def close(self) -> None:
        self.client.text_document_did_close(
            lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(self.uri))
        )
