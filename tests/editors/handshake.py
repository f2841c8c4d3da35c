"""Starts a server the way an editor configuration says to, and talks LSP to it over stdio.

The editor configs in ``editors/`` name a command (``python3 -m ddp_lsp serve``) that resolves
through ``PATH``. The tests run it with the test interpreter's directory first on ``PATH``,
which is what a user gets by starting the editor from a shell with their environment active.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

TIMEOUT = 30.0
REPO = Path(__file__).resolve().parents[2]


def activated_env() -> dict[str, str]:
    """The environment of a shell in which the test interpreter's environment is active."""
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)  # the configured command must find ddp_lsp on its own
    return env


class StdioSession:
    """A minimal LSP client: framing, requests with ids, and a log of notifications."""

    def __init__(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else activated_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        # Answers the server's own requests (workspace/configuration...); None answers null.
        self.answer: Callable[[dict[str, Any]], Any] | None = None
        self.server_requests: list[dict[str, Any]] = []
        self._next_id = 0
        self._stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

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
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii", "replace").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            assert length is not None, "a frame without Content-Length"
            self.inbox.put(json.loads(out.read(length)))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode("utf-8")
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        try:
            msg = self.inbox.get(timeout=max(left, 0.01))
        except queue.Empty:
            raise AssertionError(
                f"timed out waiting for {waiting_for}; stderr:\n{self.stderr}"
            ) from None
        if msg is None:
            self.proc.wait(timeout=TIMEOUT)
            raise AssertionError(
                f"the server closed stdout (exit {self.proc.returncode}) while waiting for "
                f"{waiting_for}; stderr:\n{self.stderr}"
            )
        return msg

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:  # a request from the server
            self.server_requests.append(msg)
            result = self.answer(msg) if self.answer else None
            self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        elif "method" in msg:
            self.notifications.append(msg)

    def request(self, method: str, params: Any) -> Any:
        """Sends a request and returns its result, answering the server's requests meanwhile."""
        self._next_id += 1
        rid = self._next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + TIMEOUT
        while True:
            msg = self._next(deadline, f"the answer to {method}")
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise AssertionError(f"{method} failed: {msg['error']}")
                return msg.get("result")
            self._dispatch(msg)

    def wait_notification(self, method: str, match: Callable[[Any], bool]) -> Any:
        for note in self.notifications:
            if note["method"] == method and match(note.get("params")):
                return note["params"]
        deadline = time.monotonic() + TIMEOUT
        while True:
            msg = self._next(deadline, method)
            self._dispatch(msg)
            if msg.get("method") == method and "id" not in msg and match(msg.get("params")):
                return msg["params"]

    def close(self) -> int:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            return self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def initialize(
    session: StdioSession,
    root: Path,
    initialization_options: Any = None,
    configuration: bool = False,
) -> dict[str, Any]:
    """``initialize`` + ``initialized`` with a plain client's capabilities (push diagnostics).

    With ``configuration``, the client says it answers ``workspace/configuration`` (set
    ``session.answer`` to do so).
    """
    result = session.request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": root.as_uri(),
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
            "initializationOptions": initialization_options,
            "capabilities": {
                "textDocument": {
                    "publishDiagnostics": {"versionSupport": True},
                    "codeAction": {
                        "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix"]}}
                    },
                },
                "workspace": {"applyEdit": True, "configuration": configuration},
            },
        },
    )
    assert isinstance(result, dict), result
    session.notify("initialized", {})
    return result


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


def show_messages(session: StdioSession) -> list[str]:
    return [
        n["params"]["message"] for n in session.notifications if n["method"] == "window/showMessage"
    ]


def section_lookup(config: dict[str, Any], request: dict[str, Any]) -> list[Any]:
    """A workspace/configuration answer the way Helix and LSP4IJ make it: each item's dotted
    section looked up in the editor's settings object (null when absent)."""
    out: list[Any] = []
    for item in request["params"]["items"]:
        node: Any = config
        for part in (item.get("section") or "").split("."):
            if part:
                node = node.get(part) if isinstance(node, dict) else None
        out.append(node)
    return out
