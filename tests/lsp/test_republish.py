"""Machine facts reach push-diagnostics clients at once: after ``ddp-lsp.runPreflight``, the
open documents are re-published with the rules that use the preflight's facts (DDP508 here:
``init_process_group("nccl")`` on a machine the preflight found without CUDA), without waiting
for an edit, with a workspace folder and without one (a file opened on its own).

The preflight runs for real, restricted to ``cuda.basic``; on a machine with a GPU and NCCL the
rule has nothing to say, so the test needs a CPU-only torch (the test environment's).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.lsp.rawclient import RawServer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="DDP508 needs a machine without CUDA"
)

SCRIPT = "import torch.distributed as dist\n\ndist.init_process_group('nccl')\n"


@pytest.mark.parametrize("root", [True, False], ids=["folder", "no-folder"])
def test_preflight_republishes_open_documents(tmp_path: Path, root: bool) -> None:
    s = RawServer(env={"XDG_CACHE_HOME": tempfile.mkdtemp(prefix="ddp-lsp-republish-")})
    s.initialize({}, rootUri=tmp_path.as_uri() if root else None)
    uri = (tmp_path / "train.py").as_uri()
    s.open(uri, SCRIPT)
    first = s.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri)
    # No machine facts yet (the module-level script's own DDP505/DDP506 are there already).
    assert "DDP508" not in [d["code"] for d in first["params"]["diagnostics"]]
    rid = s.request_id()
    s.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "workspace/executeCommand",
            "params": {
                "command": "ddp-lsp.runPreflight",
                "arguments": [uri, {"probes": ["cuda.basic"]}],
            },
        }
    )
    # No edit: the same version is published again with the machine's finding, before the
    # command's reply (a client that looks when the command returns sees it).
    republished = None
    while True:
        msg = s.next_message()
        if "method" in msg and "id" in msg:
            s.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif msg.get("method") == "textDocument/publishDiagnostics":
            p = msg["params"]
            if p["uri"] == uri and any(d["code"] == "DDP508" for d in p["diagnostics"]):
                republished = p
        elif msg.get("id") == rid:
            assert msg["result"]["ok"] is True, msg
            break
    assert republished is not None, "no DDP508 published before the preflight's reply"
    assert republished["version"] == 1
    assert s.close() == 0
