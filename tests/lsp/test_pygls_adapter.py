"""What ddp_lsp.lsp.pygls_adapter relies on in pygls' private API, pinned.

The adapter is the only module that touches pygls' underscore names. Each test here drives one
of them the way the server does and checks the behaviour the server depends on, so a pygls
upgrade that renames or changes one fails here, with the name in the test, before it shows up
as a hung shutdown or a lost diagnostic in the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from ddp_lsp.lsp.pygls_adapter import (
    DdpProtocol,
    forget_given_up,
    is_shut_down,
    pending_requests,
    progress_future,
    send_json,
    send_raw,
)
from ddp_lsp.lsp.registration import Command
from ddp_lsp.lsp.server import DdpLanguageServer, build_server


class ListWriter:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.messages.append(json.loads(data.decode("utf-8")))

    def close(self) -> None:
        pass


def _server(*handlers: Command) -> tuple[DdpLanguageServer, DdpProtocol, ListWriter]:
    server = build_server(handlers) if handlers else build_server()
    protocol = server.protocol
    assert isinstance(protocol, DdpProtocol)
    writer = ListWriter()
    protocol.set_writer(writer, include_headers=False)
    return server, protocol, writer


def test_send_raw_writes_the_plain_dict_as_one_message() -> None:
    _, protocol, writer = _server()
    message = {"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"a": [1]}}
    send_raw(protocol, message)
    assert writer.messages == [message]


def test_send_json_frames_encoded_text_as_pygls_frames_a_message() -> None:
    # writer, _include_headers, CONTENT_TYPE and CHARSET: one message, the header pygls writes.
    _, protocol, writer = _server()
    body = '{"jsonrpc":"2.0","method":"textDocument/publishDiagnostics","params":{"a":[1]}}'
    send_json(protocol, body)
    assert writer.messages == [json.loads(body)]
    raw: list[bytes] = []
    protocol.set_writer(type("W", (), {"write": lambda self, d: raw.append(d)})())
    send_json(protocol, body)
    send_raw(protocol, json.loads(body))  # pygls' own framing of the same message
    ours, theirs = raw
    header = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"
    assert ours == b"Content-Length: %d\r\n" % len(body) + header + body.encode()
    assert theirs.split(b"\r\n", 1)[1].startswith(header)


def test_nothing_is_written_after_exit() -> None:
    # DdpProtocol._send_data overrides pygls' writer entry point: after exit it drops messages.
    _, protocol, writer = _server()
    protocol._closed = True
    send_raw(protocol, {"jsonrpc": "2.0", "method": "x"})
    send_json(protocol, '{"jsonrpc":"2.0","method":"x"}')
    assert writer.messages == []


def test_shutdown_sets_the_flag_pygls_refuses_requests_and_exits_by() -> None:
    server, protocol, writer = _server()
    assert not is_shut_down(protocol)
    for _ in protocol.lsp_shutdown():  # the generator pygls drives; skips our stop_children
        pass
    assert is_shut_down(protocol)
    # pygls drops every message but exit once the flag is set.
    request = protocol.structure_message(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": lsp.TEXT_DOCUMENT_HOVER,
            "params": {
                "textDocument": {"uri": "file:///a.py"},
                "position": {"line": 0, "character": 0},
            },
        }
    )
    protocol.handle_message(request)
    assert writer.messages == []
    # ... and its exit handler exits 0 after shutdown (1 without: see the next test).
    protocol.writer = None
    with pytest.raises(SystemExit) as exc:
        for _ in protocol.lsp_exit():
            pass
    assert exc.value.code == 0
    assert server is protocol._server


def test_exit_without_shutdown_exits_1() -> None:
    _, protocol, _ = _server()
    protocol.writer = None
    with pytest.raises(SystemExit) as exc:
        for _ in protocol.lsp_exit():
            pass
    assert exc.value.code == 1


CONFIG = lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="ddp-lsp")])


def test_requests_to_the_client_are_pending_until_answered_and_late_answers_dropped() -> None:
    _, protocol, writer = _server()
    answered = protocol.send_request(lsp.WORKSPACE_CONFIGURATION, CONFIG)
    given_up = protocol.send_request(lsp.WORKSPACE_CONFIGURATION, CONFIG)
    ids = [m["id"] for m in writer.messages]
    assert [msg_id for msg_id, _ in pending_requests(protocol)] == ids
    assert dict(pending_requests(protocol))[ids[0]] is answered
    protocol._handle_response(ids[0], ["result"])
    assert answered.result() == ["result"]
    given_up.cancel()
    protocol._handle_response(ids[1], ["late"])  # must not raise InvalidStateError
    assert pending_requests(protocol) == []
    # forget_given_up drops a given-up request whose answer never comes.
    never = protocol.send_request(lsp.WORKSPACE_CONFIGURATION, CONFIG)
    never.cancel()
    forget_given_up(protocol)
    assert pending_requests(protocol) == []


def echo(ls: DdpLanguageServer, *args: Any) -> list[Any]:
    return [type(ls).__name__, *args]


def test_commands_get_the_server_and_the_arguments() -> None:
    # _prepare_command_arguments + the ls pygls binds to a registered command.
    _, protocol, _ = _server(Command("test.echo", echo))
    params = lsp.ExecuteCommandParams(command="test.echo", arguments=["a", 1, {"k": None}])
    result = asyncio.run(protocol.lsp_workspace__execute_command(params))
    assert result == ["DdpLanguageServer", "a", 1, {"k": None}]
    with pytest.raises(JsonRpcInvalidParams):
        asyncio.run(
            protocol.lsp_workspace__execute_command(lsp.ExecuteCommandParams(command="test.nope"))
        )


def test_progress_cancel_cancels_the_token_future() -> None:
    server, protocol, _ = _server()
    assert progress_future(server, "tok") is None
    server.work_done_progress.begin("tok", lsp.WorkDoneProgressBegin(title="t"))
    future = progress_future(server, "tok")
    assert future is not None and not future.cancelled()
    for _ in protocol.lsp_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token="tok")):
        pass
    assert future.cancelled()


def test_only_the_adapter_touches_pygls_private_names() -> None:
    # The point of the adapter: grep the server package for pygls' underscore names.
    from pathlib import Path

    import ddp_lsp.lsp

    private = (
        "._send_data",
        "._shutdown",
        "._request_futures",
        "._handle_response",
        "._converter",
        "._server",
        "_prepare_command_arguments",
        ".tokens",
    )
    root = Path(ddp_lsp.lsp.__file__).parent
    found = [
        f"{path.name}: {name}"
        for path in sorted(root.glob("*.py"))
        if path.name != "pygls_adapter.py"
        for name in private
        if name in path.read_text(encoding="utf-8")
    ]
    assert found == []


_CHANGES: list[Any] = [
    [{"range": _R, "text": "x"}]
    for _R in (
        {"start": {"line": 0, "character": 1}, "end": {"line": 2, "character": 0}},
        {"start": {"line": 5, "character": 0}, "end": {"line": 5, "character": 0}},
    )
] + [
    [{"text": "whole\ntext 😀"}],
    [
        {
            "range": {"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 4}},
            "rangeLength": 2,
            "text": "",
        },
        {"text": "then all"},
    ],
]


@pytest.mark.parametrize("changes", _CHANGES)
def test_the_didchange_fast_path_builds_what_pygls_converter_builds(changes: Any) -> None:
    # transport.did_change_params skips pygls' converter for every keystroke: same objects.
    from ddp_lsp.lsp.transport import did_change_params

    _, protocol, _ = _server()
    params = {"textDocument": {"uri": "file:///a.py", "version": 7}, "contentChanges": changes}
    message = protocol.structure_message(
        {"jsonrpc": "2.0", "method": lsp.TEXT_DOCUMENT_DID_CHANGE, "params": params}
    )
    assert did_change_params(params) == message.params


@pytest.mark.parametrize(
    "params",
    [
        None,
        {"textDocument": {"uri": "file:///a.py", "version": True}, "contentChanges": []},
        {"textDocument": {"uri": "file:///a.py", "version": 2}, "contentChanges": [{}]},
        {
            "textDocument": {"uri": "file:///a.py", "version": 2},
            "contentChanges": [
                {"range": {"start": {"line": -1, "character": 0}, "end": {}}, "text": ""}
            ],
        },
        {"textDocument": {"uri": 3, "version": 2}, "contentChanges": []},
    ],
)
def test_odd_didchange_params_are_left_to_pygls(params: Any) -> None:
    from ddp_lsp.lsp.transport import did_change_params

    assert did_change_params(params) is None
