"""``ddp-lsp serve``: the server's handlers, the table that registers them, and ``main``.

Handlers are module-level functions ``handler(ls, params)`` that translate LSP parameters and
call ``ls.state`` (:class:`ServerState`: documents, findings), its configuration service,
:mod:`actions`, :mod:`hover` and :mod:`workspace`. ``HANDLERS`` at the end of the handlers is
the one table of what the server answers; :func:`build_server` makes a fresh server (its own
state, no module-level mutable state) and registers the table. To add a handler, write the
function (here, or in a feature module exporting its own ``HANDLERS`` tuple) and add its row:
see :mod:`ddp_lsp.lsp.registration`.

pygls' private API is used only through :mod:`ddp_lsp.lsp.pygls_adapter`; the stdio transport
(framing, protocol-level errors, stdout hygiene) is in ``transport.py``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from ddp_lsp import __version__
from ddp_lsp.lsp import rankview
from ddp_lsp.lsp.config import is_pyproject
from ddp_lsp.lsp.configuration import SECTION, ConfigurationService
from ddp_lsp.lsp.convert import Codec, choose_encoding
from ddp_lsp.lsp.diagnostics import PublicationEncoder, diagnostic_support
from ddp_lsp.lsp.edittrace import EditTrace
from ddp_lsp.lsp.preflight import CMD_RUN_PREFLIGHT, PreflightReports, PreflightService
from ddp_lsp.lsp.project import ProjectService
from ddp_lsp.lsp.pygls_adapter import (
    DdpProtocol,
    forget_given_up,
    pending_requests,
    send_json,
    send_raw,
)
from ddp_lsp.lsp.registration import Command, Feature, Handler, register
from ddp_lsp.lsp.state import PlainText, ServerState, warm_up
from ddp_lsp.lsp.transport import serve_stdio

if TYPE_CHECKING:
    from ddp_lsp.lsp.workspace import WorkspaceCache

log = logging.getLogger("ddp_lsp.lsp")

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


class DdpLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "ddp-lsp",
            __version__,
            text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[
                    lsp.NotebookDocumentFilterWithCells(
                        notebook="jupyter-notebook",
                        cells=[lsp.NotebookCellLanguage(language="python")],
                    )
                ]
            ),
            protocol_cls=DdpProtocol,
        )
        config = ConfigurationService()
        reports = PreflightReports(config)
        # The project view reads ``self.state`` when it runs (it is the state's provider).
        self.project = ProjectService(self)
        self.state = ServerState(
            self.publish_raw, self.show_error, config=config, project=self.project, machine=reports
        )
        self.preflight = PreflightService(self.state, reports)
        self.publications = PublicationEncoder()
        self.edit_trace = EditTrace.from_environment()  # DDP_LSP_TRACE_EDITS: off by default
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
        for msg_id, future in pending_requests(protocol):
            if msg_id == current or future is me or future.done():
                continue
            future.cancel()
            if isinstance(future, asyncio.Future):
                tasks.append(future)
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)

    # -- output --------------------------------------------------------------------------------

    def publish_raw(self, uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> None:
        # JSON text built here, each diagnostic encoded once while it stays (no converter, no
        # json.dumps of the whole list per keystroke: 3 ms at 20,000 lines).
        send_json(self.protocol, self.publications.encode(uri, version, diagnostics))
        if self.edit_trace is not None:
            unit = self.state.units.get(uri)
            ran = getattr(unit.doc, "rules_ran", 0) if unit is not None else 0
            self.edit_trace.published(uri, version, ran)

    def refresh_pulled(self) -> None:
        """Tell a pulling client that diagnostics changed (settings, pyproject, preflight):
        it only asks again for pulled documents when told."""
        if self.state.pulled and self.state.supports_pull_refresh:
            self.workspace_diagnostic_refresh(None)

    def show_error(self, message: str, is_error: bool = True) -> None:
        log.warning("%s", message)
        kind = lsp.MessageType.Error if is_error else lsp.MessageType.Warning
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        send_raw(
            self.protocol,
            {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}},
        )


def _caps(params: lsp.InitializeParams) -> dict[str, Any]:
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


# -- lifecycle -----------------------------------------------------------------------------


def initialize(ls: DdpLanguageServer, params: lsp.InitializeParams) -> None:
    caps = _caps(params)
    negotiated = ls.workspace.position_encoding or choose_encoding(caps["encodings"])
    encoding = str(getattr(negotiated, "value", negotiated))  # an enum member or a str
    ls.state.codec = Codec(encoding)
    ls.state.diagnostic_support = diagnostic_support(params.capabilities)
    ls.supports_configuration = caps["configuration"]
    ls.supports_watch_registration = caps["watch"]
    ls.supports_apply_edit = caps["apply_edit"]
    ls.state.supports_document_changes = caps["document_changes"]
    ls.state.supports_pull_refresh = caps["refresh"]
    folders = params.workspace_folders or []
    if folders:
        ls.state.config.set_folders(f.uri for f in folders)
    elif params.root_uri:
        ls.state.config.set_folders([params.root_uri])
    ls.state.config.set_editor_settings(params.initialization_options, "initializationOptions")
    ls.initialized = True
    # The analysis core is loaded on `initialized` (below), not here: see that handler.


async def initialized(ls: DdpLanguageServer, params: lsp.InitializedParams) -> None:
    # The client sends `initialized` only once it has read the initialize result: the core
    # and the rules (warm_up, 100-200 ms) load now, while the client answers the requests
    # below and before it opens a document, and never before the result is written, however
    # pygls dispatches the response (tests/lsp/test_cold_start.py). Scheduled rather than run
    # here, so that the registration below goes out first.
    asyncio.get_running_loop().call_soon(warm_up)
    for err in ls.state.config.editor_global.errors:
        ls.state.report(err)
    if ls.supports_watch_registration:
        try:
            await ls.client_register_capability_async(
                lsp.RegistrationParams(
                    registrations=[
                        lsp.Registration(
                            id="ddp-lsp-files",
                            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                                watchers=[
                                    lsp.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                                    # Python files changed behind the editor: the index.
                                    lsp.FileSystemWatcher(glob_pattern="**/*.py"),
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


async def shutdown(ls: DdpLanguageServer, params: None) -> None:
    ls.stop_children()
    await ls.shutdown_requests()
    if ls.edit_trace is not None:
        ls.edit_trace.close()
        ls.edit_trace = None


async def pull_configuration(ls: DdpLanguageServer, notify: bool = True) -> bool:
    """Ask the client for the ``ddp-lsp`` section (global and per folder); True if changed."""
    config = ls.state.config
    scopes = config.scopes()
    items = [lsp.ConfigurationItem(section=SECTION)] + [
        lsp.ConfigurationItem(scope_uri=uri, section=SECTION) for uri in scopes
    ]
    try:
        result = await ls.workspace_configuration_async(lsp.ConfigurationParams(items=items))
    except Exception as exc:
        log.info("workspace/configuration failed: %s", exc)
        return False
    if not isinstance(result, (list, tuple)) or not result:  # pygls structures it as a tuple
        return False
    changed = config.apply_pulled(scopes, result)
    if changed and notify:
        settings_changed(ls)
    return changed


def settings_changed(ls: DdpLanguageServer) -> None:
    ls.state.configuration_changed()
    for err in ls.state.config.editor_global.errors:
        ls.state.report(err)
    if ls.initialized_done:
        ls.project.sync_folders()
    ls.refresh_pulled()
    rankview.refresh(ls)


async def did_change_configuration(
    ls: DdpLanguageServer, params: lsp.DidChangeConfigurationParams
) -> None:
    settings = params.settings
    if isinstance(settings, dict) and isinstance(settings.get(SECTION), dict):
        ls.state.config.set_editor_settings(settings[SECTION], "settings")
    if ls.supports_configuration:
        await pull_configuration(ls, notify=False)
    settings_changed(ls)  # once, whatever changed


def did_change_watched_files(
    ls: DdpLanguageServer, params: lsp.DidChangeWatchedFilesParams
) -> None:
    if any(is_pyproject(ch.uri) for ch in params.changes):
        settings_changed(ls)
    if any(ch.uri.endswith(".py") for ch in params.changes):
        ls.project.files_changed(list(params.changes))
        ls.state.workspace_changed()  # closed files' diagnostics may differ


async def did_change_folders(
    ls: DdpLanguageServer, params: lsp.DidChangeWorkspaceFoldersParams
) -> None:
    ls.state.config.change_folders(
        added=[f.uri for f in params.event.added], removed=[f.uri for f in params.event.removed]
    )
    if ls.supports_configuration:
        await pull_configuration(ls, notify=False)
    settings_changed(ls)


def check_project_files(ls: DdpLanguageServer) -> None:
    # Clients that cannot watch files (Neovim on Linux) still get pyproject.toml reloads:
    # a stat per known file on open and save is cheap.
    if not ls.supports_watch_registration and ls.state.config.projects.changed():
        settings_changed(ls)


# -- text documents ------------------------------------------------------------------------


def did_open(ls: DdpLanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    check_project_files(ls)
    ls.state.open(doc.uri, doc.text, doc.version, doc.language_id)


def did_change(ls: DdpLanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
    if ls.edit_trace is not None:
        ls.edit_trace.changed(params.text_document.uri, params.text_document.version)
    ls.state.change(
        params.text_document.uri, params.text_document.version, list(params.content_changes)
    )


def did_save(ls: DdpLanguageServer, params: lsp.DidSaveTextDocumentParams) -> None:
    ls.state.workspace_changed()  # the saved text is what a workspace pull reads from disk
    if is_pyproject(params.text_document.uri):
        settings_changed(ls)
    else:
        check_project_files(ls)


def did_close(ls: DdpLanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
    ls.state.close(params.text_document.uri)


# -- notebooks -----------------------------------------------------------------------------


def nb_open(ls: DdpLanguageServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
    from ddp_lsp.lsp.notebook import Cell, Notebook  # (not at start: a notebook may never come)

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
    ls.state.open_notebook(nb)


def nb_change(ls: DdpLanguageServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
    from ddp_lsp.lsp.notebook import apply_notebook_change

    uri = params.notebook_document.uri
    unit = ls.state.units.get(uri)
    if unit is None or unit.notebook is None:
        log.warning("notebookDocument/didChange for a notebook that is not open: %s", uri)
        return
    unit.notebook.version = unit.version = params.notebook_document.version
    for closed in apply_notebook_change(unit.notebook, params.change, ls.state.codec):
        ls.state.cell_owner.pop(closed, None)
    ls.state.notebook_changed(uri)


def nb_close(ls: DdpLanguageServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
    ls.state.close_notebook(params.notebook_document.uri)


# -- diagnostics (pull) --------------------------------------------------------------------


def pull_diagnostics(
    ls: DdpLanguageServer, params: lsp.DocumentDiagnosticParams
) -> lsp.DocumentDiagnosticReport:
    from ddp_lsp.lsp.diagnostics import as_lsp

    uri = params.text_document.uri
    ls.state.start_pulling(uri)
    found = ls.state.lookup(uri)
    if found is None:
        return lsp.RelatedFullDocumentDiagnosticReport(items=[])
    unit, _ = found
    ls.state.ensure_current(unit)
    rid = ls.state.result_ids.current(uri)
    if rid is not None and params.previous_result_id == rid:
        return lsp.RelatedUnchangedDocumentDiagnosticReport(result_id=rid)
    items = [as_lsp(d) for d in unit.diagnostics.get(uri, [])]
    return lsp.RelatedFullDocumentDiagnosticReport(items=items, result_id=rid)


async def workspace_diagnostic(
    ls: DdpLanguageServer, params: lsp.WorkspaceDiagnosticParams
) -> lsp.WorkspaceDiagnosticReport:
    from ddp_lsp.lsp.workspace import WorkspaceCache, workspace_diagnostics

    token = params.work_done_token
    progress = None
    ended = token is None

    def end() -> None:
        nonlocal ended
        if not ended and token is not None:
            ended = True
            ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="done"))

    if token is not None:
        ls.work_done_progress.begin(
            token,
            lsp.WorkDoneProgressBegin(title="ddp-lsp: checking the workspace", percentage=0),
        )

        def progress(message: str, percent: int) -> None:
            ls.work_done_progress.report(
                token, lsp.WorkDoneProgressReport(message=message, percentage=percent)
            )

    if ls.workspace_cache is None:
        ls.workspace_cache = WorkspaceCache()
    try:
        return await workspace_diagnostics(
            ls.state, ls.workspace_cache, params, progress, scanned=end
        )
    finally:
        end()


# -- code actions, hover -------------------------------------------------------------------


def code_action(ls: DdpLanguageServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
    from ddp_lsp.lsp.actions import code_actions

    found = ls.state.lookup(params.text_document.uri)
    if found is None:
        return None
    unit, offset = found
    return (
        code_actions(ls.state, unit, offset, params.text_document.uri, params.range, params.context)
        or None
    )


def hover(ls: DdpLanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
    from ddp_lsp.lsp import hover as hovers

    found = ls.state.lookup(params.text_document.uri)
    if found is None:
        return None
    unit, offset = found
    ls.state.ensure_current(unit)
    if not unit.enabled:
        return None
    pos = ls.state.codec.to_core(
        unit.doc.lines, params.position.line + offset, params.position.character
    )
    parts = [hovers.rule_hover(unit, pos), rankview.hover(ls.state, unit, pos)]
    topic = hovers.preflight_topic(unit, pos)
    reports = ls.preflight.reports
    report = reports.report_for(reports.folder_for(unit.key)) if topic else None
    if topic and report is not None:
        parts.append(hovers.preflight_hover(report, topic))
    text = "\n\n---\n\n".join(p for p in parts if p)
    if not text:
        return None
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text))


# -- commands ------------------------------------------------------------------------------


def code_lens(ls: DdpLanguageServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
    found = ls.state.lookup(params.text_document.uri)
    if found is None:
        return None
    unit, offset = found
    if not unit.enabled:
        return None
    return ls.preflight.lenses(unit, params.text_document.uri, offset) or None


async def run_preflight(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
    if len(args) > 2 or (args and args[0] is not None and not isinstance(args[0], str)):
        raise JsonRpcInvalidParams(
            f"{CMD_RUN_PREFLIGHT} takes [uri] or [uri, options]; got {list(args)!r}"
        )
    uri = args[0] if args else None
    return await ls.preflight.run(ls, uri, args[1] if len(args) > 1 else None)


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


def debug_document(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
    """The server's copy of a document: for bug reports about out-of-sync positions."""
    if len(args) != 1 or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(
            f"{CMD_DEBUG_DOCUMENT} takes one argument, the document URI; got {list(args)!r}"
        )
    unit = ls.state.units.get(args[0])
    if unit is None:
        raise JsonRpcInvalidParams(f"{CMD_DEBUG_DOCUMENT}: {args[0]!r} is not an open document")
    return {
        "version": unit.version,
        "text": unit.doc.text,
        "encoding": ls.state.codec.encoding,
        "findings": len(unit.findings),
        "project": ls.project.describe(unit),
    }


async def fix_all(ls: DdpLanguageServer, *args: Any) -> dict[str, Any]:
    from ddp_lsp.core.engine import fix_text
    from ddp_lsp.lsp.actions import fix_all_action, whole_text_edit

    if len(args) != 1 or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(
            f"{CMD_FIX_ALL} takes one argument, the document URI; got {list(args)!r}"
        )
    found = ls.state.lookup(args[0])
    if found is None:
        raise JsonRpcInvalidParams(f"{CMD_FIX_ALL}: {args[0]!r} is not an open document")
    unit, _ = found
    ls.state.ensure_current(unit)
    if not unit.enabled or isinstance(unit.doc, PlainText):
        return {"applied": False, "fixes": 0}
    if unit.notebook is not None:
        action = fix_all_action(ls.state, unit)
        edit = action.edit if action else None
        n = sum(1 for f in unit.findings if f.safe_fix) if edit else 0
    else:
        old = unit.doc.text
        new, n = fix_text(old, unit.settings, env=unit.env)
        edit = whole_text_edit(ls.state, unit, old, new)
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
                lsp.ApplyWorkspaceEditParams(edit=edit, label="ddp-lsp: fix all")
            ),
            ls.apply_edit_timeout_s,
        )
    except asyncio.TimeoutError:
        forget_given_up(ls.protocol)
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


# -- the handler table -------------------------------------------------------------------------

LIFECYCLE: tuple[Handler, ...] = (
    Feature(lsp.INITIALIZE, initialize),
    Feature(lsp.INITIALIZED, initialized),
    Feature(lsp.SHUTDOWN, shutdown),
)
WORKSPACE: tuple[Handler, ...] = (
    Feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION, did_change_configuration),
    Feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES, did_change_watched_files),
    Feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, did_change_folders),
)
DOCUMENTS: tuple[Handler, ...] = (
    Feature(lsp.TEXT_DOCUMENT_DID_OPEN, did_open),
    Feature(lsp.TEXT_DOCUMENT_DID_CHANGE, did_change),
    Feature(lsp.TEXT_DOCUMENT_DID_SAVE, did_save),
    Feature(lsp.TEXT_DOCUMENT_DID_CLOSE, did_close),
    Feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN, nb_open),
    Feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE, nb_change),
    Feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE, nb_close),
)
DIAGNOSTICS: tuple[Handler, ...] = (
    Feature(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        pull_diagnostics,
        lsp.DiagnosticOptions(
            identifier="ddp-lsp", inter_file_dependencies=False, workspace_diagnostics=True
        ),
    ),
    Feature(lsp.WORKSPACE_DIAGNOSTIC, workspace_diagnostic),
)
EDITING: tuple[Handler, ...] = (
    Feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        code_action,
        lsp.CodeActionOptions(
            code_action_kinds=[lsp.CodeActionKind.QuickFix, "source.fixAll.ddp-lsp"],
            resolve_provider=False,
        ),
    ),
    Feature(lsp.TEXT_DOCUMENT_HOVER, hover),
    Feature(lsp.TEXT_DOCUMENT_CODE_LENS, code_lens, lsp.CodeLensOptions(resolve_provider=False)),
)
COMMANDS: tuple[Handler, ...] = (
    Command(CMD_RUN_PREFLIGHT, run_preflight),
    Command(CMD_EXPLAIN, explain_rule),
    Command(CMD_DEBUG_DOCUMENT, debug_document),
    Command(CMD_FIX_ALL, fix_all),
)

# Everything the server answers. A new feature module adds its tuple here (see registration.py).
HANDLERS: tuple[Handler, ...] = (
    *LIFECYCLE,
    *WORKSPACE,
    *DOCUMENTS,
    *DIAGNOSTICS,
    *EDITING,
    *COMMANDS,
    *rankview.HANDLERS,  # inlay hints, semantic tokens, ddp-lsp.showRankPaths
)


def build_server(handlers: Iterable[Handler] = HANDLERS) -> DdpLanguageServer:
    """A fresh server with its own state, answering ``handlers`` (the whole table)."""
    server = DdpLanguageServer()
    register(server, handlers)
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
    # What the imports made (pygls, lsprotocol, our modules) lives as long as the process:
    # frozen, the full collection due while pygls builds its converter (thousands of objects)
    # does not scan it, 20-35 ms of CPU before the initialize result (docs/performance.md,
    # "Cold start"); heap.py freezes the heap after every analysis the same way. (Turning the
    # collector off for the imports saves their young collections too, but keeps their
    # garbage: +9 MB of RSS.)
    gc.freeze()
    server = build_server()
    if "tcp" in opts:
        host, _, port = opts["tcp"].rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
        return 0
    return serve_stdio(server)
