"""``ddp-lsp serve``: the pygls server, its handlers, and the stdio loop that drives it.

Handlers are thin: they translate LSP parameters and call :class:`ServerState` (documents,
findings, settings), :mod:`actions`, :mod:`hover` and :mod:`workspace`. Nothing here is
module-level mutable state: :func:`build_server` makes a fresh server with its own state.

The stdio transport (framing, protocol-level errors, stdout hygiene) is in ``transport.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import _prepare_command_arguments, lsp_method

from ddp_lsp import __version__
from ddp_lsp.lsp import config as C
from ddp_lsp.lsp import rankview
from ddp_lsp.lsp.convert import Codec, choose_encoding
from ddp_lsp.lsp.notebook import Cell, Notebook, apply_notebook_change
from ddp_lsp.lsp.preflight import CMD_RUN_PREFLIGHT, PreflightService
from ddp_lsp.lsp.project import ProjectService
from ddp_lsp.lsp.state import PlainText, ServerState, uri_to_path, warm_up
from ddp_lsp.lsp.transport import serve_stdio

if TYPE_CHECKING:
    from ddp_lsp.lsp.workspace import WorkspaceCache

log = logging.getLogger("ddp_lsp.lsp")

SECTION = "ddp-lsp"
CMD_FIX_ALL = "ddp-lsp.fixAll"
CMD_EXPLAIN = "ddp-lsp.explainRule"
CMD_DEBUG_DOCUMENT = "ddp-lsp.debugDocument"

# How long ``ddp-lsp.fixAll`` waits for the client to answer ``workspace/applyEdit``. A client
# that never answers must not hold the command (and shutdown) forever. The environment
# variable exists for the tests, which cannot wait the full bound.
APPLY_EDIT_TIMEOUT_S = 30.0
APPLY_EDIT_TIMEOUT_ENV = "DDP_LSP_APPLY_EDIT_TIMEOUT"
# Shutdown waits this long for cancelled requests (a preflight, a fix-all) to wind down, so
# their replies reach the client before the shutdown reply.
SHUTDOWN_GRACE_S = 5.0


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
    kills what we started and drops anything written after the output is closed (tasks that
    asyncio cancels on the way out used to log a traceback per message they tried to send).
    """

    _closed = False

    @lsp_method(T.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(  # type: ignore[override]
        self, params: T.ExecuteCommandParams
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

    @lsp_method(T.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Any:
        if (user_handler := self.fm.features.get(T.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    @lsp_method(T.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        self._closed = True  # nothing is sent after exit, not even the children's progress end
        server = self._server
        if isinstance(server, DdpLanguageServer):
            server.stop_children()  # exit without shutdown: nothing we started outlives us
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

    @lsp_method(T.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: T.DidOpenTextDocumentParams) -> Any:
        yield from self._forward(T.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: T.DidChangeTextDocumentParams) -> Any:
        yield from self._forward(T.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(T.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: T.DidCloseTextDocumentParams) -> Any:
        yield from self._forward(T.TEXT_DOCUMENT_DID_CLOSE, params)

    @lsp_method(T.NOTEBOOK_DOCUMENT_DID_OPEN)
    def lsp_notebook_document__did_open(self, params: T.DidOpenNotebookDocumentParams) -> Any:
        yield from self._forward(T.NOTEBOOK_DOCUMENT_DID_OPEN, params)

    @lsp_method(T.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: T.DidChangeNotebookDocumentParams) -> Any:
        yield from self._forward(T.NOTEBOOK_DOCUMENT_DID_CHANGE, params)

    @lsp_method(T.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def lsp_notebook_document__did_close(self, params: T.DidCloseNotebookDocumentParams) -> Any:
        yield from self._forward(T.NOTEBOOK_DOCUMENT_DID_CLOSE, params)


class DdpLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "ddp-lsp",
            __version__,
            text_document_sync_kind=T.TextDocumentSyncKind.Incremental,
            notebook_document_sync=T.NotebookDocumentSyncOptions(
                notebook_selector=[
                    T.NotebookDocumentFilterWithCells(
                        notebook="jupyter-notebook",
                        cells=[T.NotebookCellLanguage(language="python")],
                    )
                ]
            ),
            protocol_cls=DdpProtocol,
        )
        self.state = ServerState(self.publish_raw, self.show_error)
        self.preflight = PreflightService(self.state)
        self.project = ProjectService(self, self.state)
        # Made on the first workspace pull: workspace.py imports the analysis core.
        self.workspace_cache: WorkspaceCache | None = None
        self.initialized = False
        self.initialized_done = False  # the `initialized` handler has run (settings known)
        self.supports_configuration = False
        self.supports_watch_registration = False
        self.supports_apply_edit = False
        try:
            self.apply_edit_timeout_s = float(
                os.environ.get(APPLY_EDIT_TIMEOUT_ENV, APPLY_EDIT_TIMEOUT_S)
            )
        except ValueError:
            self.apply_edit_timeout_s = APPLY_EDIT_TIMEOUT_S

    # -- lifecycle ------------------------------------------------------------------------------

    def stop_children(self) -> None:
        """Kill every process we started (preflight children with their process groups, the
        indexer) now, synchronously: shutdown and exit must not leave one behind."""
        self.preflight.stop()
        self.project.stop()

    async def shutdown_requests(self) -> None:
        """Cancel every request still running (a preflight, a fix-all waiting for the client)
        and give them a moment to answer "cancelled" before the shutdown reply goes out."""
        protocol = self.protocol
        current = protocol.msg_id
        me: object = asyncio.current_task()
        tasks: list[asyncio.Future[Any]] = []
        for msg_id, future in list(protocol._request_futures.items()):
            if msg_id == current or future is me or future.done():
                continue
            future.cancel()
            if isinstance(future, asyncio.Future):
                tasks.append(future)
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)

    # -- output --------------------------------------------------------------------------------

    def publish_raw(self, uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> None:
        params: dict[str, Any] = {"uri": uri, "diagnostics": diagnostics}
        if version is not None:
            params["version"] = version
        # A plain dict: json.dumps needs no converter, which matters at 20,000 lines.
        self.protocol._send_data(
            {"jsonrpc": "2.0", "method": T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, "params": params}
        )

    def refresh_pulled(self) -> None:
        """Tell a pulling client that diagnostics changed (settings, pyproject, preflight):
        it only asks again for pulled documents when told."""
        if self.state.pulled and self.state.supports_pull_refresh:
            self.workspace_diagnostic_refresh(None)

    def show_error(self, message: str, is_error: bool = True) -> None:
        log.warning("%s", message)
        kind = T.MessageType.Error if is_error else T.MessageType.Warning
        self.window_show_message(T.ShowMessageParams(type=kind, message=message))

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        self.protocol._send_data(
            {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
        )


def _caps(params: T.InitializeParams) -> dict[str, Any]:
    c = params.capabilities
    ws = c.workspace
    watch = ws.did_change_watched_files if ws else None
    diag = ws.diagnostics if ws else None
    edit = ws.workspace_edit if ws else None
    return {
        "configuration": bool(ws and ws.configuration),
        "watch": bool(watch and watch.dynamic_registration),
        "document_changes": bool(edit and edit.document_changes),
        "apply_edit": bool(ws and ws.apply_edit),
        "refresh": bool(diag and diag.refresh_support),
        "encodings": c.general.position_encodings if c.general else None,
    }


def build_server() -> DdpLanguageServer:  # noqa: C901 - one registration block per feature
    server = DdpLanguageServer()
    state = server.state

    # -- lifecycle -----------------------------------------------------------------------------

    @server.feature(T.INITIALIZE)
    def initialize(ls: DdpLanguageServer, params: T.InitializeParams) -> None:
        caps = _caps(params)
        negotiated = ls.workspace.position_encoding or choose_encoding(caps["encodings"])
        encoding = str(getattr(negotiated, "value", negotiated))  # an enum member or a str
        state.codec = Codec(encoding)
        ls.supports_configuration = caps["configuration"]
        ls.supports_watch_registration = caps["watch"]
        ls.supports_apply_edit = caps["apply_edit"]
        state.supports_document_changes = caps["document_changes"]
        state.supports_pull_refresh = caps["refresh"]
        folders = params.workspace_folders or []
        if folders:
            state.folders = [(f.uri, uri_to_path(f.uri)) for f in folders]
        elif params.root_uri:
            state.folders = [(params.root_uri, uri_to_path(params.root_uri))]
        state.editor_global = C.parse_editor_settings(
            params.initialization_options, "initializationOptions"
        )
        ls.initialized = True
        # Runs once the initialize response is written: the core loads while the client reads it.
        asyncio.get_running_loop().call_soon(warm_up)

    @server.feature(T.INITIALIZED)
    async def initialized(ls: DdpLanguageServer, params: T.InitializedParams) -> None:
        for err in state.editor_global.errors:
            state.report(err)
        if ls.supports_watch_registration:
            try:
                await ls.client_register_capability_async(
                    T.RegistrationParams(
                        registrations=[
                            T.Registration(
                                id="ddp-lsp-files",
                                method=T.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                register_options=T.DidChangeWatchedFilesRegistrationOptions(
                                    watchers=[
                                        T.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                                        # Python files changed behind the editor: the index.
                                        T.FileSystemWatcher(glob_pattern="**/*.py"),
                                    ]
                                ),
                            )
                        ]
                    )
                )
            except Exception as exc:  # the client refused: fall back to mtime checks
                log.info("could not register file watchers: %s", exc)
                ls.supports_watch_registration = False
        if ls.supports_configuration:
            await pull_configuration(ls)
        # Settings are known now (a folder may turn the project view off): index in the
        # background; open documents are analysed meanwhile with what is known.
        ls.initialized_done = True
        ls.project.sync_folders()

    @server.feature(T.SHUTDOWN)
    async def shutdown(ls: DdpLanguageServer, params: None) -> None:
        ls.stop_children()
        await ls.shutdown_requests()

    async def pull_configuration(ls: DdpLanguageServer, notify: bool = True) -> bool:
        """Ask the client for the ``ddp-lsp`` section (global and per folder); True if changed."""
        scopes = [uri for uri, _ in state.folders]
        items = [T.ConfigurationItem(section=SECTION)] + [
            T.ConfigurationItem(scope_uri=uri, section=SECTION) for uri in scopes
        ]
        try:
            result = await ls.workspace_configuration_async(T.ConfigurationParams(items=items))
        except Exception as exc:
            log.info("workspace/configuration failed: %s", exc)
            return False
        if not isinstance(result, (list, tuple)) or not result:  # pygls structures it as a tuple
            return False
        changed = False
        if result[0] is not None:
            new = C.parse_editor_settings(result[0], "workspace/configuration")
            changed |= new != state.editor_global
            state.editor_global = new
        scoped: dict[str, C.EditorSettings] = {}
        for uri, value in zip(scopes, result[1:], strict=False):
            if value is not None and value != result[0]:
                scoped[uri] = C.parse_editor_settings(value, f"workspace/configuration ({uri})")
        changed |= scoped != state.editor_scoped
        state.editor_scoped = scoped
        if changed and notify:
            settings_changed(ls)
        return changed

    def settings_changed(ls: DdpLanguageServer) -> None:
        state.configuration_changed()
        for err in state.editor_global.errors:
            state.report(err)
        if ls.initialized_done:
            ls.project.sync_folders()
        ls.refresh_pulled()
        rankview.refresh(ls)

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: DdpLanguageServer, params: T.DidChangeConfigurationParams
    ) -> None:
        settings = params.settings
        if isinstance(settings, dict) and isinstance(settings.get(SECTION), dict):
            state.editor_global = C.parse_editor_settings(settings[SECTION], "settings")
        if ls.supports_configuration:
            await pull_configuration(ls, notify=False)
        settings_changed(ls)  # once, whatever changed

    @server.feature(T.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(
        ls: DdpLanguageServer, params: T.DidChangeWatchedFilesParams
    ) -> None:
        if any(C.is_pyproject(ch.uri) for ch in params.changes):
            settings_changed(ls)
        if any(ch.uri.endswith(".py") for ch in params.changes):
            ls.project.files_changed(list(params.changes))
            state.workspace_changed()  # closed files' diagnostics may differ

    @server.feature(T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_folders(
        ls: DdpLanguageServer, params: T.DidChangeWorkspaceFoldersParams
    ) -> None:
        removed = {f.uri for f in params.event.removed}
        state.folders = [f for f in state.folders if f[0] not in removed]
        state.folders += [(f.uri, uri_to_path(f.uri)) for f in params.event.added]
        for uri in removed:
            state.editor_scoped.pop(uri, None)
        if ls.supports_configuration:
            await pull_configuration(ls, notify=False)
        settings_changed(ls)

    def check_project_files(ls: DdpLanguageServer) -> None:
        # Clients that cannot watch files (Neovim on Linux) still get pyproject.toml reloads:
        # a stat per known file on open and save is cheap.
        if not ls.supports_watch_registration and state.projects.changed():
            settings_changed(ls)

    # -- text documents ------------------------------------------------------------------------

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DdpLanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        check_project_files(ls)
        state.open(doc.uri, doc.text, doc.version, doc.language_id)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DdpLanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        state.change(
            params.text_document.uri, params.text_document.version, list(params.content_changes)
        )

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: DdpLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        state.workspace_changed()  # the saved text is what a workspace pull reads from disk
        if C.is_pyproject(params.text_document.uri):
            settings_changed(ls)
        else:
            check_project_files(ls)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DdpLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        state.close(params.text_document.uri)

    # -- notebooks -----------------------------------------------------------------------------

    @server.feature(T.NOTEBOOK_DOCUMENT_DID_OPEN)
    def nb_open(ls: DdpLanguageServer, params: T.DidOpenNotebookDocumentParams) -> None:
        texts = {d.uri: d for d in params.cell_text_documents}
        cells = []
        for c in params.notebook_document.cells:
            item = texts.get(c.document)
            cells.append(
                Cell(
                    c.document,
                    int(c.kind),
                    item.text if item else "",
                    item.version if item else None,
                    item.language_id if item else "python",
                )
            )
        nb = Notebook(params.notebook_document.uri, params.notebook_document.version, cells)
        state.open_notebook(nb)

    @server.feature(T.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def nb_change(ls: DdpLanguageServer, params: T.DidChangeNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        unit = state.units.get(uri)
        if unit is None or unit.notebook is None:
            log.warning("notebookDocument/didChange for a notebook that is not open: %s", uri)
            return
        unit.notebook.version = unit.version = params.notebook_document.version
        for closed in apply_notebook_change(unit.notebook, params.change, state.codec):
            state.cell_owner.pop(closed, None)
        state.notebook_changed(uri)

    @server.feature(T.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def nb_close(ls: DdpLanguageServer, params: T.DidCloseNotebookDocumentParams) -> None:
        state.close_notebook(params.notebook_document.uri)

    # -- diagnostics (pull) --------------------------------------------------------------------

    @server.feature(
        T.TEXT_DOCUMENT_DIAGNOSTIC,
        T.DiagnosticOptions(
            identifier="ddp-lsp", inter_file_dependencies=False, workspace_diagnostics=True
        ),
    )
    def pull_diagnostics(
        ls: DdpLanguageServer, params: T.DocumentDiagnosticParams
    ) -> T.DocumentDiagnosticReport:
        from ddp_lsp.lsp.diagnostics import as_lsp

        uri = params.text_document.uri
        state.start_pulling(uri)
        found = state.lookup(uri)
        if found is None:
            return T.RelatedFullDocumentDiagnosticReport(items=[])
        unit, _ = found
        state.ensure_current(unit)
        rid = state.result_ids.current(uri)
        if rid is not None and params.previous_result_id == rid:
            return T.RelatedUnchangedDocumentDiagnosticReport(result_id=rid)
        items = [as_lsp(d) for d in unit.diagnostics.get(uri, [])]
        return T.RelatedFullDocumentDiagnosticReport(items=items, result_id=rid)

    @server.feature(T.WORKSPACE_DIAGNOSTIC)
    async def workspace_diagnostic(
        ls: DdpLanguageServer, params: T.WorkspaceDiagnosticParams
    ) -> T.WorkspaceDiagnosticReport:
        from ddp_lsp.lsp.workspace import WorkspaceCache, workspace_diagnostics

        token = params.work_done_token
        progress = None
        ended = token is None

        def end() -> None:
            nonlocal ended
            if not ended and token is not None:
                ended = True
                ls.work_done_progress.end(token, T.WorkDoneProgressEnd(message="done"))

        if token is not None:
            ls.work_done_progress.begin(
                token,
                T.WorkDoneProgressBegin(title="ddp-lsp: checking the workspace", percentage=0),
            )

            def progress(message: str, percent: int) -> None:
                ls.work_done_progress.report(
                    token, T.WorkDoneProgressReport(message=message, percentage=percent)
                )

        if ls.workspace_cache is None:
            ls.workspace_cache = WorkspaceCache()
        try:
            return await workspace_diagnostics(
                state, ls.workspace_cache, params, progress, scanned=end
            )
        finally:
            end()

    # -- code actions, hover -------------------------------------------------------------------

    @server.feature(
        T.TEXT_DOCUMENT_CODE_ACTION,
        T.CodeActionOptions(
            code_action_kinds=[T.CodeActionKind.QuickFix, "source.fixAll.ddp-lsp"],
            resolve_provider=False,
        ),
    )
    def code_action(ls: DdpLanguageServer, params: T.CodeActionParams) -> list[T.CodeAction] | None:
        from ddp_lsp.lsp.actions import code_actions

        found = state.lookup(params.text_document.uri)
        if found is None:
            return None
        unit, offset = found
        return (
            code_actions(
                state, unit, offset, params.text_document.uri, params.range, params.context
            )
            or None
        )

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls: DdpLanguageServer, params: T.HoverParams) -> T.Hover | None:
        from ddp_lsp.lsp import hover as H

        found = state.lookup(params.text_document.uri)
        if found is None:
            return None
        unit, offset = found
        state.ensure_current(unit)
        if not unit.enabled:
            return None
        pos = state.codec.to_core(
            unit.doc.lines, params.position.line + offset, params.position.character
        )
        parts = [H.rule_hover(unit, pos), rankview.hover(state, unit, pos)]
        topic = H.preflight_topic(unit, pos)
        report = ls.preflight.report_for(ls.preflight.folder_for(unit.key)) if topic else None
        if topic and report is not None:
            parts.append(H.preflight_hover(report, topic))
        text = "\n\n---\n\n".join(p for p in parts if p)
        if not text:
            return None
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=text))

    rankview.register(server)  # inlay hints, semantic tokens, ddp-lsp.showRankPaths

    # -- commands ------------------------------------------------------------------------------

    @server.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: DdpLanguageServer, params: T.CodeLensParams) -> list[T.CodeLens] | None:
        found = state.lookup(params.text_document.uri)
        if found is None:
            return None
        unit, offset = found
        if not unit.enabled:
            return None
        return ls.preflight.lenses(unit, params.text_document.uri, offset) or None

    @server.command(CMD_RUN_PREFLIGHT)
    async def run_preflight(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
        if len(args) > 2 or (args and args[0] is not None and not isinstance(args[0], str)):
            raise JsonRpcInvalidParams(
                f"{CMD_RUN_PREFLIGHT} takes [uri] or [uri, options]; got {list(args)!r}"
            )
        uri = args[0] if args else None
        return await ls.preflight.run(ls, uri, args[1] if len(args) > 1 else None)

    @server.command(CMD_EXPLAIN)
    def explain_rule(ls: DdpLanguageServer, *args: Any) -> str:
        from ddp_lsp.docs import rule_markdown

        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams(
                f'{CMD_EXPLAIN} takes one argument, a rule id such as "DDP201"; got {list(args)!r}'
            )
        text = rule_markdown(args[0])
        if text is None:
            raise JsonRpcInvalidParams(f"{CMD_EXPLAIN}: unknown rule {args[0]!r}")
        return text

    @server.command(CMD_DEBUG_DOCUMENT)
    def debug_document(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
        """The server's copy of a document: for bug reports about out-of-sync positions."""
        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams(
                f"{CMD_DEBUG_DOCUMENT} takes one argument, the document URI; got {list(args)!r}"
            )
        unit = state.units.get(args[0])
        if unit is None:
            raise JsonRpcInvalidParams(f"{CMD_DEBUG_DOCUMENT}: {args[0]!r} is not an open document")
        return {
            "version": unit.version,
            "text": unit.doc.text,
            "encoding": state.codec.encoding,
            "findings": len(unit.findings),
            "project": ls.project.describe(unit),
        }

    @server.command(CMD_FIX_ALL)
    async def fix_all(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
        from ddp_lsp.core.engine import fix_text
        from ddp_lsp.lsp.actions import fix_all_action, whole_text_edit

        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams(
                f"{CMD_FIX_ALL} takes one argument, the document URI; got {list(args)!r}"
            )
        found = state.lookup(args[0])
        if found is None:
            raise JsonRpcInvalidParams(f"{CMD_FIX_ALL}: {args[0]!r} is not an open document")
        unit, _ = found
        state.ensure_current(unit)
        if not unit.enabled or isinstance(unit.doc, PlainText):
            return {"applied": False, "fixes": 0}
        if unit.notebook is not None:
            action = fix_all_action(state, unit)
            edit = action.edit if action else None
            n = sum(1 for f in unit.findings if f.safe_fix) if edit else 0
        else:
            old = unit.doc.text
            new, n = fix_text(old, unit.settings, env=unit.env)
            edit = whole_text_edit(state, unit, old, new)
        if edit is None:
            return {"applied": False, "fixes": 0}
        if not ls.supports_apply_edit:
            # The client cannot apply an edit we send: hand it over as the result instead.
            return {
                "applied": False,
                "fixes": n,
                "edit": edit,
                "message": "the client does not support workspace/applyEdit: the fixes are "
                "returned in 'edit' and were not applied",
            }
        try:
            result = await asyncio.wait_for(
                ls.workspace_apply_edit_async(
                    T.ApplyWorkspaceEditParams(edit=edit, label="ddp-lsp: fix all")
                ),
                ls.apply_edit_timeout_s,
            )
        except asyncio.TimeoutError:
            if isinstance(ls.protocol, DdpProtocol):
                ls.protocol.forget_done_requests()
            message = (
                f"the client did not answer workspace/applyEdit within "
                f"{ls.apply_edit_timeout_s:g} s: the fixes may not have been applied"
            )
            ls.show_error(f"ddp-lsp: fix all: {message}", False)
            return {"applied": False, "fixes": n, "message": message}
        if result is not None and not result.applied:
            reason = result.failure_reason or "no reason given"
            return {"applied": False, "fixes": n, "message": f"the client refused: {reason}"}
        return {"applied": bool(result and result.applied), "fixes": n}

    return server


USAGE = """usage: ddp-lsp serve [--stdio] [--tcp HOST:PORT] [--log-file PATH] [--log-level LEVEL]

Run the ddp-lsp language server (stdio by default).

options:
  --stdio              talk over stdin/stdout (the default)
  --tcp HOST:PORT      listen on a TCP port instead (for debugging)
  --log-file PATH      write the server log here (default: stderr)
  --log-level LEVEL    DEBUG, INFO, WARNING (default) or ERROR
"""


def _parse_args(argv: Sequence[str]) -> dict[str, str] | int:
    """A few options parsed by hand: argparse costs ~15 ms of imports at every editor start."""
    opts: dict[str, str] = {"log-level": "WARNING"}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            return 0
        if arg == "--stdio":
            continue
        name, eq, value = arg.partition("=")
        if name in ("--tcp", "--log-file", "--log-level"):
            if not eq:
                if not args:
                    sys.stderr.write(f"ddp-lsp serve: {name} needs a value\n\n{USAGE}")
                    return 2
                value = args.pop(0)
            opts[name[2:]] = value
            continue
        sys.stderr.write(f"ddp-lsp serve: unknown option {arg!r}\n\n{USAGE}")
        return 2
    if opts["log-level"].upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        sys.stderr.write(f"ddp-lsp serve: bad --log-level {opts['log-level']!r}\n")
        return 2
    if "tcp" in opts and not opts["tcp"].rpartition(":")[2].isdigit():
        sys.stderr.write(f"ddp-lsp serve: --tcp expects HOST:PORT, got {opts['tcp']!r}\n")
        return 2
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parse_args(argv or [])
    if isinstance(opts, int):
        return opts
    handler: logging.Handler = (
        logging.FileHandler(opts["log-file"], encoding="utf-8")
        if "log-file" in opts
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(opts["log-level"].upper())
    server = build_server()
    if "tcp" in opts:
        host, _, port = opts["tcp"].rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
        return 0
    return serve_stdio(server)
