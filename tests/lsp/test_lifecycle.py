"""Lifecycle races: shutdown, exit and ``$/cancelRequest`` while a preflight or a fix-all runs.

Each test drives the real server over stdio with the bare client (it must be able *not* to
answer ``workspace/applyEdit``). A preflight is held running by the preflight's own fault
injection (``hang:limits``: the probe hangs and forks a grandchild); the test finds the child's
process group in ``/proc`` and checks that no live process of it is left. Every test checks the
replies (the pending request answered "cancelled", a clean shutdown reply), the exit status and
that stderr stayed quiet (no traceback, no error log).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.lsp.helpers import TRAIN
from tests.lsp.rawclient import TIMEOUT, RawServer

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

REQUEST_CANCELLED = -32800
SCRIPT = "import torch.distributed as dist\n\ndist.init_process_group('gloo')\n"
# A safe fix for fix-all to apply: DDP201 (clip before unscale) in TRAIN.
CAPS: dict[str, Any] = {"window": {"workDoneProgress": True}, "workspace": {"applyEdit": True}}


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2])


def _live_in_group(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def _wait_until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _preflight_group(server: RawServer) -> int:
    """The process group of the server's preflight child (a session leader it started)."""
    found: list[int] = []

    def child() -> bool:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(int(entry))
                if st is not None and st[1] == server.proc.pid and st[2] == int(entry):
                    try:
                        cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if b"ddp_lsp.preflight.runner" in cmd:
                        found.append(int(entry))
                        return True
        return False

    _wait_until(child, "the preflight child")
    return found[0]


def _quiet(server: RawServer) -> None:
    err = server.stderr
    assert "Traceback" not in err and " ERROR " not in err, err[-3000:]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


def _server(tmp_path: Path, caps: dict[str, Any] = CAPS, **env: str) -> RawServer:
    s = RawServer(
        env={
            "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="ddp-lsp-lifecycle-cache-"),
            "DDP_LSP_PREFLIGHT_INJECT": "hang:limits",
            **env,
        }
    )
    s.initialize(caps, rootUri=tmp_path.as_uri(), workspaceFolders=None)
    return s


def _start_preflight(s: RawServer, tmp_path: Path) -> tuple[int, int]:
    """Open a script, start a preflight whose second probe hangs; (request id, child pgid)."""
    uri = (tmp_path / "train.py").as_uri()
    s.open(uri, SCRIPT)
    rid = s.request_id()
    s.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "workspace/executeCommand",
            "params": {
                "command": "ddp-lsp.runPreflight",
                "arguments": [uri, {"probes": ["cpu.workers", "limits"]}],
            },
        }
    )
    s.wait_notification("$/progress", lambda p: p["value"].get("message") == "limits...")
    pgid = _preflight_group(s)
    # The hanging probe forks a grandchild: the group is a process tree, not one process.
    _wait_until(lambda: len(_live_in_group(pgid)) >= 2, "the probe's grandchild")
    return rid, pgid


def _start_fix_all(s: RawServer, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """Start ``ddp-lsp.fixAll`` and read up to its ``workspace/applyEdit`` request, unanswered."""
    uri = (tmp_path / "fix.py").as_uri()
    s.open(uri, TRAIN)
    rid = s.request_id()
    s.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "workspace/executeCommand",
            "params": {"command": "ddp-lsp.fixAll", "arguments": [uri]},
        }
    )
    while True:
        msg = s.next_message()
        if msg.get("method") == "workspace/applyEdit":
            return rid, msg
        if "method" in msg and "id" in msg:
            s.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif "method" in msg:
            s.notifications.append(msg)
        else:
            raise AssertionError(f"fix-all answered before applyEdit: {msg}")


def _replies_in_order(s: RawServer, ids: list[int]) -> list[dict[str, Any]]:
    """The responses to ``ids``, asserting that they arrive in that order."""
    got: list[dict[str, Any]] = []
    while len(got) < len(ids):
        msg = s.next_message()
        if "method" in msg and "id" in msg:
            s.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif "method" in msg:
            s.notifications.append(msg)
        elif msg.get("id") in ids:
            assert msg["id"] == ids[len(got)], f"reply to {msg['id']} came before {ids[len(got)]}"
            got.append(msg)
    return got


def _exit(s: RawServer) -> int:
    s.notify("exit")
    return s.proc.wait(timeout=TIMEOUT)


# -- preflight -----------------------------------------------------------------------------------


def test_shutdown_during_preflight(workspace: Path) -> None:
    s = _server(workspace)
    rid, pgid = _start_preflight(s, workspace)
    sid = s.request_id()
    s.send({"jsonrpc": "2.0", "id": sid, "method": "shutdown", "params": None})
    # The running preflight is answered "cancelled" first, then shutdown returns null.
    pending, shutdown = _replies_in_order(s, [rid, sid])
    assert pending["error"]["code"] == REQUEST_CANCELLED, pending
    assert shutdown == {"jsonrpc": "2.0", "id": sid, "result": None}
    # SIGKILLed before the shutdown reply, grandchild included (dying takes the kernel a moment).
    _wait_until(lambda: _live_in_group(pgid) == [], "the preflight group to die")
    assert _exit(s) == 0
    _quiet(s)


def test_exit_during_preflight(workspace: Path) -> None:
    s = _server(workspace)
    _, pgid = _start_preflight(s, workspace)
    assert _exit(s) == 1  # exit without shutdown: 1, as the specification says
    _wait_until(lambda: _live_in_group(pgid) == [], "the preflight group to die")
    _quiet(s)


def test_cancel_during_preflight(workspace: Path) -> None:
    s = _server(workspace)
    rid, pgid = _start_preflight(s, workspace)
    s.notify("$/cancelRequest", {"id": rid})
    reply = s.response(rid)
    assert reply["error"]["code"] == REQUEST_CANCELLED, reply
    _wait_until(lambda: _live_in_group(pgid) == [], "the preflight group to die")
    # The server goes on serving, and a new preflight may start for the same folder.
    assert s.document((workspace / "train.py").as_uri())["text"] == SCRIPT
    rid2, pgid2 = _start_preflight(s, workspace)
    assert pgid2 != pgid
    assert s.request("shutdown")["result"] is None
    _wait_until(lambda: _live_in_group(pgid2) == [], "the second preflight group to die")
    assert _exit(s) == 0
    _quiet(s)


# -- fix-all -------------------------------------------------------------------------------------


def test_shutdown_during_fix_all(workspace: Path) -> None:
    s = _server(workspace)
    rid, _ = _start_fix_all(s, workspace)
    sid = s.request_id()
    s.send({"jsonrpc": "2.0", "id": sid, "method": "shutdown", "params": None})
    pending, shutdown = _replies_in_order(s, [rid, sid])
    assert pending["error"]["code"] == REQUEST_CANCELLED, pending
    assert shutdown["result"] is None and "error" not in shutdown
    assert _exit(s) == 0
    _quiet(s)


def test_exit_during_fix_all(workspace: Path) -> None:
    s = _server(workspace)
    _start_fix_all(s, workspace)
    assert _exit(s) == 1
    _quiet(s)


def test_cancel_during_fix_all_then_a_late_answer(workspace: Path) -> None:
    s = _server(workspace)
    rid, apply = _start_fix_all(s, workspace)
    s.notify("$/cancelRequest", {"id": rid})
    reply = s.response(rid)
    assert reply["error"]["code"] == REQUEST_CANCELLED, reply
    # The client answers after all: ignored quietly, and the server keeps serving.
    s.send({"jsonrpc": "2.0", "id": apply["id"], "result": {"applied": True}})
    assert s.document((workspace / "fix.py").as_uri())["text"] == TRAIN
    assert s.close() == 0
    _quiet(s)


def test_fix_all_without_apply_edit_returns_the_edit(workspace: Path) -> None:
    s = _server(workspace, caps={"window": {"workDoneProgress": True}})
    uri = (workspace / "fix.py").as_uri()
    s.open(uri, TRAIN)
    r = s.request("workspace/executeCommand", {"command": "ddp-lsp.fixAll", "arguments": [uri]})
    result = r["result"]
    assert result["applied"] is False and result["fixes"] >= 1
    assert "does not support workspace/applyEdit" in result["message"]
    (edit,) = result["edit"]["changes"][uri]
    assert "scaler.unscale_(optimizer)" in edit["newText"]
    assert s.close() == 0
    _quiet(s)


def test_fix_all_gives_up_on_a_client_that_never_answers(workspace: Path) -> None:
    s = _server(workspace, DDP_LSP_APPLY_EDIT_TIMEOUT="0.5")
    rid, apply = _start_fix_all(s, workspace)
    result = s.response(rid)["result"]
    assert result["applied"] is False and result["fixes"] >= 1
    assert "did not answer workspace/applyEdit within 0.5 s" in result["message"]
    shown = s.wait_notification("window/showMessage", lambda p: "fix all" in p["message"])
    assert "did not answer" in shown["params"]["message"]
    s.send({"jsonrpc": "2.0", "id": apply["id"], "result": {"applied": True}})  # too late
    assert s.close() == 0
    _quiet(s)
