"""The stdio transport: frames in, protocol errors answered, nothing but protocol on stdout.

Stdin is read on the event loop itself (``connect_read_pipe``): every message already waiting
in the pipe is handled before the loop runs anything else, and analysis is scheduled with
``call_soon``, so it runs once per burst of edits, on the newest text (see ``state.py``). When
stdin is not a pipe or socket (a file, /dev/null, a terminal) epoll cannot watch it and a
reader thread feeds a queue instead.

This layer answers the protocol's error cases itself: unparsable JSON gets a Parse error (id
null), a request with malformed params gets InvalidParams for its id (pygls would drop it and
leave the client waiting), requests before ``initialize`` get ServerNotInitialized, and requests
after ``shutdown`` and a second ``initialize`` get InvalidRequest. File descriptor 1 is
redirected to stderr at start, so a stray ``print`` anywhere cannot corrupt the protocol stream.

``textDocument/didChange``, the message of every keystroke, goes straight to its handler with
its params built from the JSON (:func:`did_change_params`) instead of through pygls' converter
and dispatch; params of any other shape take the general path, which reports what is wrong.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
import threading
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import FeatureNotificationError, JsonRpcException, JsonRpcInvalidParams

from ddp_lsp.lsp.pygls_adapter import is_shut_down

if TYPE_CHECKING:
    from ddp_lsp.lsp.server import DdpLanguageServer

log = logging.getLogger("ddp_lsp.lsp")

_EOF = object()


class _FdReader:
    """readline/read over a raw file descriptor.

    The reader thread is a daemon blocked in a read when the server exits; blocked inside a
    ``BufferedReader`` it would hold that object's lock and abort interpreter shutdown, blocked
    in ``os.read`` it holds nothing.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def readline(self) -> bytes:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                return line
            if not self._fill():
                line = bytes(self.buf)
                self.buf.clear()
                return line

    def read(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def _read_frames(stream: Any, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
    """Reader thread: Content-Length framed messages from ``stream`` into ``queue``."""

    def put(item: Any) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
            return True
        except RuntimeError:  # the loop has closed: the server is exiting
            return False

    try:
        while True:
            length: int | None = None
            while True:
                header = stream.readline()
                if not header:
                    put(_EOF)
                    return
                if header in (b"\r\n", b"\n"):
                    if length is not None:
                        break
                    continue  # stray blank line before any header
                name, _, value = header.decode("ascii", "replace").partition(":")
                if name.strip().lower() == "content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        length = None
            body = stream.read(length) if length > 0 else b""
            if len(body) < length:
                put(_EOF)
                return
            if not put(body):
                return
    except (OSError, ValueError):
        put(_EOF)


class _Dispatcher:
    """Turns raw message bodies into pygls messages, answering protocol errors itself."""

    def __init__(self, server: DdpLanguageServer) -> None:
        self.server = server
        self.protocol = server.protocol

    def handle(self, body: bytes) -> None:
        server = self.server
        try:
            raw = json.loads(body)
        except ValueError as exc:
            server.send_error(None, -32700, f"Parse error: {exc}")
            return
        if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
            msg_id = raw.get("id") if isinstance(raw, dict) else None
            server.send_error(msg_id, -32600, "Invalid Request: expected a JSON-RPC 2.0 object")
            return
        method = raw.get("method")
        msg_id = raw.get("id")
        is_request = "id" in raw and method is not None
        if method is not None and not isinstance(method, str):
            server.send_error(msg_id, -32600, "Invalid Request: 'method' must be a string")
            return
        if is_request and not isinstance(msg_id, (int, str)):
            server.send_error(None, -32600, "Invalid Request: 'id' must be a number or a string")
            return
        if method is not None and not server.initialized:
            if is_request and method != lsp.INITIALIZE:
                server.send_error(
                    msg_id, -32002, f"Server not initialized: {method} before initialize"
                )
                return
            if not is_request and method != lsp.EXIT:
                return  # the specification says: drop notifications before initialize
        if is_request and method == lsp.INITIALIZE and server.initialized:
            # A second initialize would reset the negotiated encoding, folders and settings
            # under open documents; the session goes on as negotiated.
            server.send_error(msg_id, -32600, "Invalid Request: the server is already initialized")
            return
        if is_request and is_shut_down(self.protocol):
            server.send_error(msg_id, -32600, f"Invalid Request: {method} after shutdown")
            return
        if method == lsp.TEXT_DOCUMENT_DID_CHANGE and not is_request:
            # Every keystroke: built straight from the JSON (pygls' converter and dispatch
            # cost ~0.3 ms a message); anything unusual goes the general way below.
            handler = self.protocol.fm.features.get(method)
            params = did_change_params(raw.get("params"))
            if (
                handler is not None
                and params is not None
                and not asyncio.iscoroutinefunction(handler)
                and not is_shut_down(self.protocol)
            ):
                try:
                    handler(params)
                except Exception as exc:  # as pygls does for a notification's handler
                    log.exception("Failed to handle notification %r", method)
                    server.report_server_error(exc, FeatureNotificationError)
                return
        try:
            message = self.protocol.structure_message(raw)
        except JsonRpcException as exc:
            cause = exc.__cause__ or exc
            if is_request:
                server.send_error(
                    msg_id,
                    JsonRpcInvalidParams.CODE,
                    f"Invalid params for {method}: {_short(cause)}",
                )
            else:
                log.warning("ignoring %s with invalid params: %s", method, _short(cause))
            return
        self.protocol.handle_message(message)


def _position(raw: Any) -> lsp.Position | None:
    if not isinstance(raw, dict):
        return None
    line, character = raw.get("line"), raw.get("character")
    if type(line) is not int or type(character) is not int or line < 0 or character < 0:
        return None
    return lsp.Position(line=line, character=character)


def did_change_params(raw: Any) -> lsp.DidChangeTextDocumentParams | None:
    """``textDocument/didChange`` params as lsprotocol objects, or None when they are not the
    plain shape (left to pygls' converter, which reports what is wrong)."""
    if not isinstance(raw, dict):
        return None
    doc, changes = raw.get("textDocument"), raw.get("contentChanges")
    if not isinstance(doc, dict) or not isinstance(changes, list):
        return None
    uri, version = doc.get("uri"), doc.get("version")
    if not isinstance(uri, str) or type(version) is not int:
        return None
    out: list[lsp.TextDocumentContentChangeEvent] = []
    for ch in changes:
        if not isinstance(ch, dict) or not isinstance(ch.get("text"), str):
            return None
        if "range" not in ch:
            out.append(lsp.TextDocumentContentChangeWholeDocument(text=ch["text"]))
            continue
        rng = ch["range"]
        if not isinstance(rng, dict):
            return None
        start, end = _position(rng.get("start")), _position(rng.get("end"))
        length = ch.get("rangeLength")
        if start is None or end is None or not (length is None or type(length) is int):
            return None
        out.append(
            lsp.TextDocumentContentChangePartial(
                range=lsp.Range(start=start, end=end), text=ch["text"], range_length=length
            )
        )
    return lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(version=version, uri=uri),
        content_changes=tuple(out),
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    sub = getattr(exc, "exceptions", None)
    if sub:
        return f"{text[0] if text else type(exc).__name__}: {_short(sub[0])}"
    return text[0] if text else type(exc).__name__


class _Framer:
    """Splits Content-Length framed messages out of a byte stream."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out: list[bytes] = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return out
            length = None
            for line in bytes(self.buf[:end]).split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        length = None
            if length is None or length < 0:
                del self.buf[: end + 4]  # a header block without a length: skip it
                continue
            if len(self.buf) < end + 4 + length:
                return out
            out.append(bytes(self.buf[end + 4 : end + 4 + length]))
            del self.buf[: end + 4 + length]


class _StdinProtocol(asyncio.Protocol):
    """Reads stdin on the event loop itself (no thread hand-off per message).

    Every complete message in a chunk is handled before the callback returns, and analysis
    runs from ``call_soon`` after it: whatever piled up in the pipe while the server was busy
    arrives as one chunk, so only its newest version is analysed.
    """

    def __init__(self, dispatch: _Dispatcher, done: asyncio.Future[int | None]) -> None:
        self.dispatch = dispatch
        self.done = done
        self.framer = _Framer()

    def data_received(self, data: bytes) -> None:
        for body in self.framer.feed(data):
            if self.done.done():
                return
            try:
                self.dispatch.handle(body)
            except SystemExit as exc:  # the exit notification
                self.done.set_result(exc.code if isinstance(exc.code, int) else 0)
                return
            except Exception:  # a bug in one handler must not take the editor's server down
                log.exception("failed to handle a message")

    def eof_received(self) -> bool:
        if not self.done.done():
            self.done.set_result(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _serve(server: DdpLanguageServer, fd: int) -> int | None:
    loop = asyncio.get_running_loop()
    dispatch = _Dispatcher(server)
    done: asyncio.Future[int | None] = loop.create_future()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        # A file, a terminal or /dev/null: epoll cannot watch those, so read on a thread.
        return await _serve_thread(dispatch, _FdReader(fd))
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    transport, _ = await loop.connect_read_pipe(lambda: _StdinProtocol(dispatch, done), pipe)
    try:
        return await done
    finally:
        transport.close()


async def _serve_thread(dispatch: _Dispatcher, stdin: _FdReader) -> int | None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    reader = threading.Thread(
        target=_read_frames, args=(stdin, loop, queue), daemon=True, name="ddp-lsp-stdin"
    )
    reader.start()
    handled = 0
    while True:
        body = await queue.get()  # returns at once while messages are waiting
        if body is _EOF:
            return None
        try:
            dispatch.handle(body)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 0
        except Exception:
            log.exception("failed to handle a message")
        handled += 1
        if handled % 64 == 0:
            await asyncio.sleep(0)  # let analysis and async handlers run in a long burst


def serve_stdio(server: DdpLanguageServer) -> int:
    from pygls.io_ import StdoutWriter

    # The protocol owns the real stdout; everything else that writes to fd 1 lands on stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    server.protocol.set_writer(StdoutWriter(out))
    try:
        code = asyncio.run(_serve(server, sys.stdin.fileno()))
    except SystemExit as exc:  # the ``exit`` notification, raised outside a handler
        return exc.code if isinstance(exc.code, int) else 0
    except (KeyboardInterrupt, BrokenPipeError):
        return 1
    if code is not None:
        return code
    # stdin closed without shutdown/exit: the client went away.
    return 0 if is_shut_down(server.protocol) else 1
