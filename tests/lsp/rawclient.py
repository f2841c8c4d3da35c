"""A bare JSON-RPC client over the server's stdio, for what pytest-lsp cannot send.

Malformed JSON, wrong params, requests before ``initialize``: a well-behaved client library
refuses to produce these, so this one writes frames by hand. Synchronous (a reader thread fills
a queue) so that hypothesis can drive it from plain test functions.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from typing import Any

from tests.lsp.helpers import SERVER_CMD

TIMEOUT = 30.0


class RawServer:
    def __init__(
        self,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cmd: list[str] | None = None,
    ) -> None:
        """``cmd``: another command line than ``ddp-lsp serve`` (an instrumented server)."""
        self.proc = subprocess.Popen(
            (cmd or SERVER_CMD) + (args or []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self.stdout_garbage: list[bytes] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr: list[bytes] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    # -- wire ----------------------------------------------------------------------------------

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if line == b"\r\n":
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif not line.lower().startswith(b"content-type:"):
                    self.stdout_garbage.append(line)
            assert length is not None
            self.inbox.put(json.loads(out.read(length)))

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def send_bytes(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps(message).encode("utf-8"))

    # -- messages ------------------------------------------------------------------------------

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> dict[str, Any]:
        """Send a request and return its whole response message (result or error)."""
        msg_id = self.request_id() if msg_id is None else msg_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.response(msg_id)

    def response(self, msg_id: Any) -> dict[str, Any]:
        while True:
            msg = self.next_message()
            if "method" in msg and "id" in msg:  # a request from the server: answer it
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                continue
            if "method" in msg:
                self.notifications.append(msg)
                continue
            if msg.get("id") == msg_id:
                return msg

    def next_message(self) -> dict[str, Any]:
        try:
            msg = self.inbox.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError(
                f"no message from the server in {TIMEOUT}s\n{self.stderr}"
            ) from None
        if msg is None:
            raise AssertionError(f"the server closed its output\n{self.stderr}")
        return msg

    def wait_notification(self, method: str, pred: Any = None) -> dict[str, Any]:
        for n in self.notifications:
            if n["method"] == method and (pred is None or pred(n["params"])):
                self.notifications.remove(n)
                return n
        while True:
            msg = self.next_message()
            if "method" in msg and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                continue
            if msg.get("method") == method and (pred is None or pred(msg["params"])):
                return msg
            if "method" in msg:
                self.notifications.append(msg)

    def initialize(
        self, capabilities: dict[str, Any] | None = None, **params: Any
    ) -> dict[str, Any]:
        result = self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": capabilities or {},
                **params,
            },
        )
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify(
            "textDocument/didOpen",
            {
                "textDocument": {
                    "uri": uri,
                    "languageId": "python",
                    "version": version,
                    "text": text,
                }
            },
        )

    def change(self, uri: str, version: int, changes: list[dict[str, Any]]) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes},
        )

    def document(self, uri: str) -> dict[str, Any]:
        r = self.request(
            "workspace/executeCommand", {"command": "ddp-lsp.debugDocument", "arguments": [uri]}
        )
        assert "result" in r, r
        return r["result"]

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.request("shutdown")
                self.notify("exit")
            except (AssertionError, BrokenPipeError, OSError):
                pass
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode
