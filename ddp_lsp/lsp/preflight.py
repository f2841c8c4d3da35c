"""Preflight in the editor: ``ddp-lsp.runPreflight``, the "Run preflight" code lens, results.

The probes run in a child process with the user's training interpreter (setting
``preflight.python``; default: the server's own), through :func:`ddp_lsp.preflight.client.
run_preflight`, so the event loop stays free while they run: edits keep being analysed. Each
probe's start and result is a ``$/progress`` report; the progress is cancellable
(``window/workDoneProgress/cancel``) and so is the request (``$/cancelRequest``): either kills
the child's process group. Reports are kept per workspace folder, in memory and in the
preflight cache on disk (keyed by folder, interpreter and host), which also makes a report from
``ddp-lsp preflight`` or an earlier session show up in hovers and lenses.

Nothing here imports torch; ``ddp_lsp.preflight`` modules are loaded on first use.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from ddp_lsp.lsp.configuration import uri_to_path
from ddp_lsp.lsp.pygls_adapter import progress_future
from ddp_lsp.lsp.state import ServerState, Unit

if TYPE_CHECKING:
    from ddp_lsp.lsp.configuration import ConfigurationService
    from ddp_lsp.lsp.server import DdpLanguageServer
    from ddp_lsp.preflight.client import ChildHandle
    from ddp_lsp.preflight.schema import PreflightReport

log = logging.getLogger("ddp_lsp.lsp")

CMD_RUN_PREFLIGHT = "ddp-lsp.runPreflight"


class PreflightReports:
    """The preflight reports by workspace folder: this session's runs, else the cache's.

    What the analyses read (DDP405 counts the folder's CPUs) and hovers and lenses show; the
    :class:`~ddp_lsp.lsp.state.MachineProvider` given to the server's state."""

    def __init__(self, config: ConfigurationService) -> None:
        self.config = config
        # Reports of this session's runs by folder path (None: never measured here).
        self.session: dict[str, PreflightReport] = {}

    def folder_for(self, uri: str | None) -> Path:
        return self.config.machine_folder(uri_to_path(uri) if uri else None)

    def python_for(self, folder: Path) -> str:
        from ddp_lsp.preflight.client import default_python

        editor = self.config.editor_for(folder.as_uri())
        return editor.options.preflight_python or default_python()

    def report_for(self, folder: Path) -> PreflightReport | None:
        """The folder's last report: this session's, else the cache's (None when never run)."""
        key = str(folder)
        report = self.session.get(key)
        if report is not None:
            return report
        from ddp_lsp.preflight.client import PreflightCache

        cached = PreflightCache().load(key, self.python_for(folder))
        return cached.report if cached is not None else None


class PreflightService:
    """``ddp-lsp.runPreflight`` and the "Run preflight" code lens, over the state's documents;
    what a run measures goes to ``reports`` (the state's machine facts)."""

    def __init__(self, state: ServerState, reports: PreflightReports) -> None:
        self.state = state
        self.reports = reports
        self.running: dict[str, asyncio.Event] = {}
        self.children: dict[str, ChildHandle] = {}  # folder -> its running child
        self._tokens = itertools.count(1)

    def options_for(self, uri: str | None, overrides: Any) -> dict[str, Any]:
        """The command's options; without ``params``, the parameter count of the models the
        open document builds (a static estimate: the code is parsed, never imported), so the
        feasibility probe judges this model rather than its stand-in's size. Likewise the job
        the document states: its ``init_process_group`` backend (NCCL on a host that cannot run
        it must fail, not pass on gloo), its ``mp.spawn`` ranks and DataLoader settings."""
        opts = _options(overrides)
        unit = self.state.units.get(uri) if uri else None
        if "params" not in opts and unit is not None:
            from ddp_lsp.preflight.paramcount import estimate_params

            estimate = estimate_params(unit.doc.text)
            # Only a complete count: layers sized from config objects make it a lower bound,
            # and a verdict from a lower bound would judge another model.
            if estimate is not None and estimate.params > 0 and not estimate.unresolved:
                opts["params"] = estimate.params
        if unit is not None and uri is not None:
            opts.update(_job_from_code(unit.doc.text, uri, opts))
        return opts

    # -- running --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Shutdown or exit: kill every running child's process group now, and tell the runs.

        The kill is synchronous (the ``exit`` notification leaves no time for the runs to wind
        down); each run then ends as cancelled when its task next runs, or is cancelled."""
        for cancel in self.running.values():
            cancel.set()
        for child in self.children.values():
            child.stop()

    async def run(self, ls: DdpLanguageServer, uri: str | None, overrides: Any) -> dict[str, Any]:
        from ddp_lsp.preflight.client import PreflightCache, PreflightError, run_preflight
        from ddp_lsp.preflight.report import render_markdown, summary_counts
        from ddp_lsp.preflight.schema import PreflightOptions

        options = PreflightOptions(**self.options_for(uri, overrides))
        folder = self.reports.folder_for(uri)
        key = str(folder)
        if key in self.running:
            raise JsonRpcInvalidParams(
                f"{CMD_RUN_PREFLIGHT}: a preflight is already running for {key}"
            )
        python = self.reports.python_for(folder)
        cancel = asyncio.Event()
        self.running[key] = cancel
        token = f"ddp-lsp-preflight-{next(self._tokens)}"
        progress = await _begin(ls, token, f"ddp-lsp preflight ({Path(python).name})", cancel)

        def on_start(probe_id: str, index: int, total: int) -> None:
            if progress:
                ls.work_done_progress.report(
                    token,
                    lsp.WorkDoneProgressReport(
                        message=f"{probe_id}...", percentage=int(100 * index / max(total, 1))
                    ),
                )

        def on_probe(result: Any) -> None:
            if progress:
                ls.work_done_progress.report(
                    token, lsp.WorkDoneProgressReport(message=f"{result.id}: {result.status.value}")
                )

        def on_spawn(child: ChildHandle) -> None:
            self.children[key] = child

        try:
            report = await run_preflight(
                python, options, on_probe, cancel, on_start=on_start, on_spawn=on_spawn
            )
        except asyncio.CancelledError:  # $/cancelRequest: run_preflight has killed the child
            if progress:
                ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="cancelled"))
            raise
        except PreflightError as exc:
            if progress:
                ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=str(exc)))
            ls.show_error(f"ddp-lsp preflight: {exc}")
            return {"ok": False, "error": str(exc)}
        finally:
            self.running.pop(key, None)
            self.children.pop(key, None)
        if progress:
            ls.work_done_progress.end(
                token, lsp.WorkDoneProgressEnd(message=report.error or summary_counts(report))
            )
        if report.error is None:
            self.reports.session[key] = report
            try:
                PreflightCache().save(key, python, report)
            except OSError as exc:
                log.warning("could not cache the preflight report: %s", exc)
            _refresh_lenses(ls)
            self.state.environment_changed()
            ls.refresh_pulled()  # findings depend on the machine's facts
        return {
            "ok": report.error is None,
            "error": report.error,
            "folder": key,
            "summary": summary_counts(report),
            "markdown": render_markdown(report),
        }

    # -- code lens ------------------------------------------------------------------------------

    def lenses(self, unit: Unit, uri: str, offset: int) -> list[lsp.CodeLens]:
        from ddp_lsp.lsp.hover import topic_calls

        calls = [(a, b) for a, b, topic in topic_calls(unit) if topic == "init_process_group"]
        if not calls:
            return []
        folder = self.reports.folder_for(unit.key)
        title = "▶ Run preflight"
        if str(folder) in self.running:
            title = "Preflight running..."
        else:
            report = self.reports.report_for(folder)
            if report is not None:
                from ddp_lsp.preflight.report import age_seconds, format_age, summary_counts

                title += f" (last: {summary_counts(report)}, {format_age(age_seconds(report))})"
        out = []
        lines = unit.doc.lines
        for a, _ in calls:
            view_uri, view_offset = unit.locate_line(a.line)
            if view_uri != uri:
                continue
            line, col = self.state.codec.to_lsp(lines, a)
            pos = lsp.Position(line - view_offset, col)
            out.append(
                lsp.CodeLens(
                    range=lsp.Range(pos, pos),
                    command=lsp.Command(title=title, command=CMD_RUN_PREFLIGHT, arguments=[uri]),
                )
            )
        return out


_JOB_KEYS = (
    "backend",
    "backend_source",
    "world_size",
    "world_size_source",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
)


def _job_from_code(text: str, uri: str, opts: dict[str, Any]) -> dict[str, Any]:
    """What the document fixes about the job that the command's options leave open."""
    from ddp_lsp.preflight.schema import PreflightOptions
    from ddp_lsp.preflight.scriptinfo import options_with_facts, read_script

    try:
        facts = read_script(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}  # half-typed code: the machine decides, as without a script
    path = uri_to_path(uri)
    merged = options_with_facts(PreflightOptions(**opts), facts, path.name if path else "this file")
    return {
        k: getattr(merged, k) for k in _JOB_KEYS if k not in opts and getattr(merged, k) is not None
    }


def _options(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise JsonRpcInvalidParams(f"{CMD_RUN_PREFLIGHT}: options must be an object, got {raw!r}")
    from ddp_lsp.preflight.schema import lsp_option_keys

    keys = lsp_option_keys()  # the command's keys: PreflightOptions' fields say which
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = keys.get(key)
        if name is None:
            raise JsonRpcInvalidParams(
                f"{CMD_RUN_PREFLIGHT}: unknown option {key!r}; expected one of "
                + ", ".join(sorted(keys))
            )
        out[name] = tuple(value) if name == "probes" and isinstance(value, list) else value
    try:
        from ddp_lsp.preflight.schema import PreflightOptions

        PreflightOptions(**out)
    except (TypeError, ValueError) as exc:
        raise JsonRpcInvalidParams(f"{CMD_RUN_PREFLIGHT}: {exc}") from None
    return out


async def _begin(ls: DdpLanguageServer, token: str, title: str, cancel: asyncio.Event) -> bool:
    caps = ls.client_capabilities.window
    if not (caps and caps.work_done_progress):
        return False
    try:
        await ls.work_done_progress.create_async(token)
    except Exception as exc:  # the client refused the token: run without progress
        log.info("work done progress refused: %s", exc)
        return False
    ls.work_done_progress.begin(
        token, lsp.WorkDoneProgressBegin(title=title, cancellable=True, percentage=0)
    )
    fut = progress_future(ls, token)
    if fut is not None:
        # window/workDoneProgress/cancel cancels this future (pygls): stop the child.
        fut.add_done_callback(lambda f: cancel.set() if f.cancelled() else None)
    return True


def _refresh_lenses(ls: DdpLanguageServer) -> None:
    ws = ls.client_capabilities.workspace
    lens = ws.code_lens if ws else None
    if lens and lens.refresh_support:
        ls.workspace_code_lens_refresh(None)
