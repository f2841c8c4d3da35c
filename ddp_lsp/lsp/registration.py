"""The shape of the server's handler table: what one row says and how rows are registered.

A handler is a module-level function ``handler(ls, params)`` (a command: ``handler(ls, *args)``)
that reads and changes ``ls.state``; a row names the LSP method (or command) it answers and the
options the server advertises for it. A feature module exports its rows as a tuple (``HANDLERS``)
and ``server.py`` puts the tuples together into the one table ``build_server`` registers::

    # ddp_lsp/lsp/mything.py
    def inlay_hints(ls: DdpLanguageServer, params: T.InlayHintParams) -> list[T.InlayHint]: ...

    HANDLERS = (Feature(T.TEXT_DOCUMENT_INLAY_HINT, inlay_hints, T.InlayHintOptions()),)

    # ddp_lsp/lsp/server.py
    HANDLERS = (*LIFECYCLE, ..., *mything.HANDLERS)

pygls refuses a second handler for a method, so two rows cannot silently disagree. Keep the
analysis core out of a feature module's imports (import it inside the handler): the server
must answer ``initialize`` as fast as a bare pygls server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pygls.lsp.server import LanguageServer


@dataclass(frozen=True)
class Feature:
    """An LSP method (``lsprotocol.types`` constant), its handler, and its advertised options."""

    method: str
    handler: Callable[..., Any]
    options: Any = None


@dataclass(frozen=True)
class Command:
    """A ``workspace/executeCommand`` command (advertised in ``executeCommandProvider``)."""

    name: str
    handler: Callable[..., Any]


Handler = Feature | Command


def register(server: LanguageServer, handlers: Iterable[Handler]) -> None:
    """Register every row with pygls, in order."""
    for row in handlers:
        if isinstance(row, Command):
            server.command(row.name)(row.handler)
        else:
            server.feature(row.method, row.options)(row.handler)
