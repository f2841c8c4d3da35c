"""Everything ddp-lsp takes from pygls beyond its public API, in one module.

pygls 2.x gives no public way to do a few things the server needs, so this module reaches
into pygls' private names, and no other module does (``tests/lsp/test_pygls_adapter.py`` pins
the behaviour relied on here, so a pygls upgrade that changes it fails that test first):

- ``JsonRPCProtocol._send_data(dict)`` writes one message: protocol errors are answered for
  messages pygls never parsed (see ``transport.py``); ``writer``, ``_include_headers``,
  ``CONTENT_TYPE`` and ``CHARSET``: diagnostics go out as JSON the server encoded itself,
  framed as ``_send_data`` frames a message (``send_json``);
- ``JsonRPCProtocol._shutdown``: set by ``shutdown``; ``lsp_exit`` exits 0 when it is set;
- ``JsonRPCProtocol._request_futures`` (message id -> future, both ways) and ``msg_id``
  (the request being handled): shutdown cancels what is pending, except itself;
- ``JsonRPCProtocol._handle_response``: a late answer to a request we gave up is dropped;
- ``JsonRPCProtocol._server`` (the ``LanguageServer``) and ``_converter``;
- ``pygls.protocol.language_server._prepare_command_arguments`` and ``lsp_method``: our own
  ``workspace/executeCommand``, one task per request;
- ``ProgressManager.tokens``: the future ``window/workDoneProgress/cancel`` cancels.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import _prepare_command_arguments, lsp_method

if TYPE_CHECKING:
    from concurrent.futures import Future

    from pygls.lsp.server import LanguageServer

log = logging.getLogger("ddp_lsp.lsp")


class DdpProtocol(LanguageServerProtocol):
    """pygls' protocol without its own copy of every document, and with a clean lifecycle.

    pygls keeps a ``Workspace`` copy of each open text, updated on every change (a full line
    split per edit); our state keeps the incremental core document instead, so the built-in
    text-sync handlers here only forward to ours.

    Lifecycle. pygls runs a command as a generator that hands the command to a second task:
    ``$/cancelRequest`` (and shutdown) cancelled only the outer future, so a preflight went on
    running, and its child with it. Commands run here as one task per request, so cancelling
    the request cancels the command. Shutdown cancels what is pending over a copy of the
    futures (pygls iterated the live dict, which a cancel callback changes), and ``exit``
    kills what we started (the server's ``stop_children``) and drops anything written after
    the output is closed (tasks that asyncio cancels on the way out used to log a traceback
    per message they tried to send).
    """

    _closed = False

    @lsp_method(lsp.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(  # type: ignore[override]
        self, params: lsp.ExecuteCommandParams
    ) -> Any:
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams.of(
                ValueError(f"Command name {params.command!r} is not defined")
            )
        try:
            args, kwargs = _prepare_command_arguments(handler, params, self._converter)
        except Exception as exc:
            raise JsonRpcInvalidParams.of(exc) from exc
        result = handler(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    @lsp_method(lsp.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Any:
        if (user_handler := self.fm.features.get(lsp.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        self._closed = True  # nothing is sent after exit, not even the children's progress end
        stop_children = getattr(self._server, "stop_children", None)
        if callable(stop_children):
            stop_children()  # exit without shutdown: nothing we started outlives us
        # Closes the output and raises SystemExit (0 after shutdown, 1 without).
        yield from super().lsp_exit(*args)

    def _send_data(self, data: Any) -> None:
        if self._closed:
            log.debug("not sent, the server is exiting: %.200s", data)
            return
        super()._send_data(data)

    def _handle_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        future = self._request_futures.get(msg_id)
        if future is not None and future.done():
            # The request was given up (timeout, cancel, shutdown) before the client answered.
            self._request_futures.pop(msg_id, None)
            log.info("late response to %s ignored: the request was given up", msg_id)
            return
        super()._handle_response(msg_id, result, error)

    def forget_done_requests(self) -> None:
        """Drop our requests to the client that were given up (their answer may never come)."""
        for msg_id, future in list(self._request_futures.items()):
            if future.done():
                self._request_futures.pop(msg_id, None)

    def _forward(self, method: str, params: Any) -> Any:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(lsp.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: lsp.DidOpenTextDocumentParams) -> Any:
        yield from self._forward(lsp.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: lsp.DidChangeTextDocumentParams) -> Any:
        yield from self._forward(lsp.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: lsp.DidCloseTextDocumentParams) -> Any:
        yield from self._forward(lsp.TEXT_DOCUMENT_DID_CLOSE, params)

    @lsp_method(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def lsp_notebook_document__did_open(self, params: lsp.DidOpenNotebookDocumentParams) -> Any:
        yield from self._forward(lsp.NOTEBOOK_DOCUMENT_DID_OPEN, params)

    @lsp_method(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: lsp.DidChangeNotebookDocumentParams) -> Any:
        yield from self._forward(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE, params)

    @lsp_method(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def lsp_notebook_document__did_close(self, params: lsp.DidCloseNotebookDocumentParams) -> Any:
        yield from self._forward(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE, params)


# -- the private state other modules need, through functions ------------------------------------


def send_raw(protocol: LanguageServerProtocol, message: dict[str, Any]) -> None:
    """Write one JSON-RPC message given as a plain dict (no converter round trip)."""
    protocol._send_data(message)


def send_json(protocol: LanguageServerProtocol, body: str) -> None:
    """Write one JSON-RPC message already encoded as JSON text (ASCII, as ``json.dumps``
    writes it), framed as pygls frames its own messages; nothing after ``exit``."""
    if isinstance(protocol, DdpProtocol) and protocol._closed:
        log.debug("not sent, the server is exiting: %.200s", body)
        return
    writer = protocol.writer
    if writer is None:
        log.error("Unable to send data, no available transport!")
        return
    data = body.encode(protocol.CHARSET)
    if protocol._include_headers:
        header = (
            f"Content-Length: {len(data)}\r\n"
            f"Content-Type: {protocol.CONTENT_TYPE}; charset={protocol.CHARSET}\r\n\r\n"
        )
        data = header.encode("ascii") + data
    try:
        res = writer.write(data)
        if inspect.isawaitable(res):
            asyncio.ensure_future(res)
    except BrokenPipeError:
        log.exception("Error sending data. BrokenPipeError", exc_info=True)
        raise
    except Exception:
        log.exception("Error sending data", exc_info=True)


def is_shut_down(protocol: LanguageServerProtocol) -> bool:
    """Whether ``shutdown`` has been handled (requests are refused from then on)."""
    return bool(protocol._shutdown)


def pending_requests(protocol: LanguageServerProtocol) -> list[tuple[Any, Future[Any]]]:
    """(message id, future) of every request in flight, both ways, as a copy."""
    return list(protocol._request_futures.items())


def forget_given_up(protocol: LanguageServerProtocol) -> None:
    """Drop our requests to the client that were given up (see ``DdpProtocol``)."""
    if isinstance(protocol, DdpProtocol):
        protocol.forget_done_requests()


def progress_future(server: LanguageServer, token: str) -> Future[Any] | None:
    """The future ``window/workDoneProgress/cancel`` cancels for ``token``, once begun."""
    return server.work_done_progress.tokens.get(token)
