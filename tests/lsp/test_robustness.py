"""Bad input never kills the server: each case gets the answer the specification asks for.

JSON-RPC 2.0 and LSP say: unparsable JSON -> Parse error (-32700) with id null; a message that
is not a request object -> Invalid Request (-32600); params of the wrong shape -> Invalid params
(-32602) for that request's id; an unknown request -> Method not found (-32601); an unknown
notification -> ignored; a request before ``initialize`` -> -32002; a request after
``shutdown`` -> Invalid Request. Positions past the end of a line or of the document are
clamped. After every case the server must still answer.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from tests.lsp.helpers import SERVER_CMD, TRAIN
from tests.lsp.rawclient import RawServer

URI = "file:///tmp/ddp-lsp-robust/train.py"


@pytest.fixture(scope="module")
def server():
    s = RawServer()
    before = s.request(
        "textDocument/hover",
        {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}},
    )
    assert before["error"]["code"] == -32002
    s.initialize({"general": {"positionEncodings": ["utf-16"]}})
    yield s
    code = s.close()
    assert code == 0, s.stderr
    assert s.stdout_garbage == [], "something other than protocol messages went to stdout"


def alive(s: RawServer) -> None:
    r = s.request(
        "workspace/executeCommand", {"command": "ddp-lsp.explainRule", "arguments": ["DDP201"]}
    )
    assert r["result"].startswith("# DDP201")


def test_parse_error(server: RawServer):
    server.send_bytes(b'{"jsonrpc": "2.0", "id": 7, "method": ')
    r = server.next_message()
    assert r["id"] is None and r["error"]["code"] == -32700
    alive(server)


def test_invalid_request_objects(server: RawServer):
    server.send_bytes(b"[1, 2, 3]")
    r = server.next_message()
    assert r["id"] is None and r["error"]["code"] == -32600
    server.send({"jsonrpc": "1.0", "id": 99, "method": "shutdown"})
    r = server.next_message()
    assert r["id"] == 99 and r["error"]["code"] == -32600
    alive(server)


def test_invalid_params_answer_the_request(server: RawServer):
    r = server.request("textDocument/hover", {"textDocument": 5, "position": "here"})
    assert r["error"]["code"] == -32602 and "textDocument/hover" in r["error"]["message"]
    # A malformed notification is dropped (notifications get no response).
    server.notify("textDocument/didOpen", {"textDocument": {"uri": 3}})
    alive(server)


def test_unknown_methods(server: RawServer):
    r = server.request("ddp-lsp/doesNotExist", {})
    assert r["error"]["code"] == -32601
    r = server.request("$/somethingOptional", {})
    assert r["error"]["code"] == -32601
    server.notify("$/somethingOptional", {})
    server.notify("workspace/unknownNotification", {"x": 1})
    alive(server)


def test_positions_out_of_range_are_clamped(server: RawServer):
    uri = URI.replace("train", "range")
    server.open(uri, TRAIN)
    r = server.request(
        "textDocument/hover",
        {"textDocument": {"uri": uri}, "position": {"line": 10_000, "character": 10_000}},
    )
    assert "result" in r and r["result"] is None
    r = server.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": {
                "start": {"line": 0, "character": 500},
                "end": {"line": 99_999, "character": 9},
            },
            "context": {"diagnostics": []},
        },
    )
    assert "result" in r
    # An edit past the end appends at the end; one past a line's end lands at that end.
    server.change(
        uri,
        2,
        [
            {
                "range": {
                    "start": {"line": 500, "character": 3},
                    "end": {"line": 600, "character": 0},
                },
                "text": "# tail\n",
            },
            {
                "range": {
                    "start": {"line": 0, "character": 999},
                    "end": {"line": 0, "character": 999},
                },
                "text": "  # head",
            },
        ],
    )
    doc = server.document(uri)
    assert doc["text"] == TRAIN.replace("import torch\n", "import torch  # head\n", 1) + "# tail\n"
    assert doc["version"] == 2


def test_invalid_python_and_nul_bytes(server: RawServer):
    uri = URI.replace("train", "broken")
    server.open(uri, TRAIN + "\ndef broken(:\n    pass\n")
    n = server.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    codes = sorted(d["code"] for d in n["params"]["diagnostics"])
    assert "DDP000" in codes and "DDP201" in codes  # the rest of the file is still checked
    nul = URI.replace("train", "nul")
    server.open(nul, "x = 1\x00\n" + TRAIN)
    n = server.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == nul)
    assert any(d["code"] == "DDP000" for d in n["params"]["diagnostics"])
    alive(server)


def test_five_megabyte_document(server: RawServer):
    uri = URI.replace("train", "huge")
    body = TRAIN * (5_000_000 // len(TRAIN) + 1)
    server.open(uri, body)
    n = server.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    assert n["params"]["diagnostics"] == []
    msg = server.wait_notification("window/showMessage", lambda p: "not analysed" in p["message"])
    assert msg["params"]["type"] == 2  # a warning, not an error
    server.change(
        uri,
        2,
        [
            {
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                "text": "# big\n",
            }
        ],
    )
    assert server.document(uri)["text"].startswith("# big\nimport torch")
    alive(server)


def test_shutdown_then_requests_are_refused():
    s = RawServer()
    s.initialize()
    assert s.request("shutdown")["result"] is None
    r = s.request(
        "textDocument/hover",
        {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}},
    )
    assert r["error"]["code"] == -32600
    s.notify("exit")
    assert s.proc.wait(timeout=10) == 0


def test_exit_without_shutdown_is_an_error_exit():
    s = RawServer()
    s.initialize()
    s.notify("exit")
    assert s.proc.wait(timeout=10) == 1


def test_tcp_mode():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        SERVER_CMD + ["--tcp", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=20)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)  # polling for the port to open, not waiting for a result
        body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}'
        conn.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while b'"serverInfo"' not in data:
            chunk = conn.recv(65536)
            assert chunk, "connection closed"
            data += chunk
        assert b'"ddp-lsp"' in data
        conn.close()
    finally:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None and proc.stdout.read() == b""


def test_serve_help_prints_nothing_but_usage():
    out = subprocess.run(SERVER_CMD + ["--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--tcp" in out.stdout and sys.executable


def test_stdin_closed_or_not_a_pipe_ends_the_server(tmp_path):
    # /dev/null and regular files cannot be watched with epoll: the server reads them on a
    # thread and exits at their end (status 1: the client went away without shutdown).
    out = subprocess.run(SERVER_CMD, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert out.returncode == 1 and out.stdout == b""
    session = tmp_path / "session.txt"
    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}'
    session.write_bytes(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    with open(session, "rb") as stdin:
        out = subprocess.run(SERVER_CMD, stdin=stdin, capture_output=True, timeout=60)
    assert b'"serverInfo"' in out.stdout and out.returncode == 1


def test_a_burst_of_edits_is_analysed_at_its_newest_version(server: RawServer):
    uri = URI.replace("train", "burst")
    server.open(uri, TRAIN)
    server.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    line = TRAIN.splitlines().index(
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    )
    frames = b""
    for v in range(2, 202):  # type '#' at the start of the line, delete it, 100 times
        end = 0 if v % 2 == 0 else 1
        change = {
            "range": {
                "start": {"line": line, "character": 0},
                "end": {"line": line, "character": end},
            },
            "text": "#" if end == 0 else "",
        }
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {"textDocument": {"uri": uri, "version": v}, "contentChanges": [change]},
            }
        ).encode()
        frames += b"Content-Length: %d\r\n\r\n" % len(body) + body
    assert server.proc.stdin is not None
    server.proc.stdin.write(frames)  # one write: the server sees them all waiting at once
    server.proc.stdin.flush()
    last = server.wait_notification(
        "textDocument/publishDiagnostics", lambda p: p["uri"] == uri and p.get("version") == 201
    )
    assert [d["code"] for d in last["params"]["diagnostics"] if d["code"] == "DDP201"] == ["DDP201"]
    versions = [
        n["params"].get("version")
        for n in server.notifications
        if n["method"] == "textDocument/publishDiagnostics" and n["params"]["uri"] == uri
    ]
    assert versions == sorted(versions) and len(versions) < 20, versions  # not one per edit


def test_log_file(tmp_path):
    log = tmp_path / "server.log"
    s = RawServer(["--log-file", str(log), "--log-level", "INFO"])
    s.initialize()
    alive(s)
    assert s.close() == 0
    assert "initialize" in log.read_text() and s.stdout_garbage == []
    bad = subprocess.run(
        SERVER_CMD + ["--log-level", "LOUD"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--log-level" in bad.stderr


def test_the_server_never_imports_torch(tmp_path):
    # A fake torch first on the path records any import of it by the server process.
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    marker = tmp_path / "torch-imported"
    fake.joinpath("__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nraise ImportError('fake torch')\n"
    )
    s = RawServer(env={"PYTHONPATH": str(tmp_path / "fake")})
    s.initialize()
    uri = "file:///tmp/ddp-lsp-torchless/train.py"
    s.open(uri, TRAIN)
    n = s.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    (d,) = [d for d in n["params"]["diagnostics"] if d["code"] == "DDP201"]
    assert "result" in s.request(
        "textDocument/hover", {"textDocument": {"uri": uri}, "position": d["range"]["start"]}
    )
    assert "result" in s.request(
        "textDocument/codeAction",
        {"textDocument": {"uri": uri}, "range": d["range"], "context": {"diagnostics": [d]}},
    )
    assert s.close() == 0
    assert not marker.exists(), "the language server imported torch"


def test_second_initialize_is_refused_and_the_session_kept():
    s = RawServer()
    s.initialize({"general": {"positionEncodings": ["utf-8"]}})
    uri = URI.replace("train", "reinit")
    s.open(uri, TRAIN)
    before = s.document(uri)["encoding"]
    r = s.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert r["error"]["code"] == -32600 and "already initialized" in r["error"]["message"]
    # The negotiated encoding (and with it everything else) is what it was.
    assert s.document(uri)["encoding"] == before == "utf-8"
    alive(s)
    assert s.close() == 0


def test_document_growing_past_the_limit_switches_modes_both_ways():
    s = RawServer()
    s.initialize()
    uri = URI.replace("train", "grows")
    s.open(uri, TRAIN)
    s.wait_notification(
        "textDocument/publishDiagnostics", lambda p: p["uri"] == uri and p["diagnostics"]
    )
    chunk = "# " + "x" * 9_000 + "\n"  # small edits (< 10,000 chars each), many of them
    version = 1
    n_lines = TRAIN.count("\n")
    while version * len(chunk) < 2_100_000:
        version += 1
        at = {"line": n_lines, "character": 0}
        s.change(uri, version, [{"range": {"start": at, "end": at}, "text": chunk}])
        n_lines += 1
    s.wait_notification("window/showMessage", lambda p: "not analysed" in p["message"])
    n = s.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == uri and p.get("version") == version,
    )
    assert n["params"]["diagnostics"] == []
    # Deleting the added lines brings it back under the limit: analysed again.
    version += 1
    start = {"line": TRAIN.count("\n"), "character": 0}
    end = {"line": n_lines, "character": 0}
    s.change(uri, version, [{"range": {"start": start, "end": end}, "text": ""}])
    n = s.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == uri and p.get("version") == version,
    )
    assert [d["code"] for d in n["params"]["diagnostics"]] == ["DDP201"]
    assert s.document(uri)["text"] == TRAIN
    assert s.close() == 0
