"""A bare pygls server: the floor that ``ddp-lsp serve``'s cold start and memory are judged by.

Run it under the shared harness exactly as the real server (docs/performance.md, "Cold start"
and "Memory")::

    python3 ../shared/bench/lsp_latency.py --file big20000.py --edits 100 \
        --edit-kinds char,rename,type -- .venv/bin/python bench/bare_pygls_server.py

It answers ``initialize`` in the style of ddp-lsp's server (pygls 2's ``LanguageServer``,
incremental text sync, the same notebook selector) and publishes an empty diagnostics list
for every version of every document, so the harness's first-diagnostics and edit timings run
to the end; it analyses nothing and starts no child process. Everything it costs over the
interpreter is pygls and lsprotocol: the part of ddp-lsp's cold start that is not ours.
"""

from __future__ import annotations

import sys

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer


def build() -> LanguageServer:
    server = LanguageServer(
        "bare-pygls",
        "0",
        text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
        notebook_document_sync=lsp.NotebookDocumentSyncOptions(
            notebook_selector=[
                lsp.NotebookDocumentFilterWithCells(
                    notebook="jupyter-notebook",
                    cells=[lsp.NotebookCellLanguage(language="python")],
                )
            ]
        ),
    )

    def publish(uri: str, version: int | None) -> None:
        server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[], version=version)
        )

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri, params.text_document.version)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
        # pygls applies the incremental change to its workspace copy, as a real server needs.
        publish(params.text_document.uri, params.text_document.version)

    return server


def main() -> int:
    build().start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
