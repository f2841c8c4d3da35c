"""End-to-end: the real server over stdio, driven by pytest-lsp's recorded client profiles.

Each profile gets one server for the whole module (a server start costs about a second on a
loaded two-core machine); every test opens its own document URI so tests stay independent.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.lsp.helpers import (
    CLIP_LINE,
    CONFIG,
    PROFILES,
    TIMEOUT,
    TRAIN,
    Doc,
    capabilities,
    ddp,
    edits_for,
    units,
    wait_for_diagnostics,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=CONFIG, scope="module", params=PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"ws-{request.param}")
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities(request.param),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )
    lsp_client.encoding = str(result.capabilities.position_encoding or "utf-16")  # type: ignore[attr-defined]
    lsp_client.root = root  # type: ignore[attr-defined]
    lsp_client.profile = request.param  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _uri(client: LanguageClient, name: str) -> str:
    return (client.root / name).as_uri()  # type: ignore[attr-defined]


def _open(client: LanguageClient, name: str, text: str = TRAIN) -> Doc:
    return Doc(client, _uri(client, name), text, client.encoding)  # type: ignore[attr-defined]


async def _actions(
    client: LanguageClient,
    doc: Doc,
    diag: lsp.Diagnostic | None,
    only: list[str] | None = None,
    rng: lsp.Range | None = None,
) -> list[lsp.CodeAction]:
    rng = rng or diag.range  # type: ignore[union-attr]
    result = await asyncio.wait_for(
        client.text_document_code_action_async(
            lsp.CodeActionParams(
                lsp.TextDocumentIdentifier(doc.uri),
                rng,
                lsp.CodeActionContext(diagnostics=[diag] if diag else [], only=only),
            )
        ),
        TIMEOUT,
    )
    return [a for a in result or [] if isinstance(a, lsp.CodeAction)]


async def test_initialize_advertises_features(client: LanguageClient):
    # The session is already up; check the negotiated encoding matches what the client offered.
    offered = capabilities(client.profile).general  # type: ignore[attr-defined]
    expected = offered.position_encodings[0] if offered and offered.position_encodings else "utf-16"
    assert client.encoding == expected  # type: ignore[attr-defined]
    caps = capabilities(client.profile).workspace  # type: ignore[attr-defined]
    watch = caps.did_change_watched_files if caps else None
    if watch and watch.dynamic_registration:
        # The server registers its file watchers from its `initialized` handler.
        await asyncio.wait_for(client.recorder.registered.wait(), TIMEOUT)  # type: ignore[attr-defined]
        regs = client.recorder.registrations  # type: ignore[attr-defined]
        globs = [
            w["globPattern"]
            for r in regs
            if r.method == lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES
            for w in r.register_options["watchers"]
        ]
        assert globs == ["**/pyproject.toml", "**/*.py"]


async def test_open_publishes_diagnostics(client: LanguageClient):
    doc = _open(client, "open.py")
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (d,) = ddp(pub.diagnostics)
    assert d.severity == lsp.DiagnosticSeverity.Error
    assert d.range.start.line == CLIP_LINE and d.range.start.character == 8
    assert d.code_description is not None and d.code_description.href.endswith("DDP201.md")
    assert d.data is None  # code actions find the finding by its range (test_diagnostic_shape)
    doc.close()
    closed = await wait_for_diagnostics(client, doc.uri, pred=lambda d: d == [])
    assert closed.diagnostics == []


async def test_edit_publishes_for_the_new_version(client: LanguageClient):
    doc = _open(client, "edit.py")
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    at = doc.text.index("        torch.nn.utils.clip_grad_norm_")
    v = doc.replace(at, at, "        scaler.unscale_(optimizer)\n")
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    # And back: the finding returns for the next version, at its old place.
    v = doc.replace(at, at + len("        scaler.unscale_(optimizer)\n"), "")
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert [d.range.start.line for d in ddp(pub.diagnostics)] == [CLIP_LINE]
    doc.close()


async def test_newest_version_wins_in_a_burst(client: LanguageClient):
    doc = _open(client, "burst.py")
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    at = doc.text.index("1.0)")
    for ch in "23456789":
        doc.replace(at, at + 1, ch)  # retype the max norm digit 8 times, as fast as we can
    last = doc.version
    pub = await wait_for_diagnostics(client, doc.uri, last)
    assert len(ddp(pub.diagnostics)) == 1
    versions = [p.version for p in client.recorder.published if p.uri == doc.uri]  # type: ignore[attr-defined]
    assert versions == sorted(versions), "an older version was published after a newer one"
    doc.close()


async def test_quick_fix_removes_the_diagnostic(client: LanguageClient):
    doc = _open(client, "quickfix.py")
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (diag,) = ddp(pub.diagnostics)
    actions = await _actions(client, doc, diag, only=[lsp.CodeActionKind.QuickFix])
    preferred = [a for a in actions if a.is_preferred]
    assert len(preferred) == 1
    fix = preferred[0]
    assert fix.kind == lsp.CodeActionKind.QuickFix and "unscale_" in fix.title
    assert fix.diagnostics and fix.diagnostics[0].code == "DDP201"
    if client.profile == "visual_studio_code":  # type: ignore[attr-defined]
        assert fix.edit.document_changes and fix.edit.document_changes[0].text_document.version == 1
    v = doc.apply(edits_for(fix.edit, doc.uri))
    assert "scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_" in doc.text
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    doc.close()


async def test_fix_all_action_and_command(client: LanguageClient):
    two = TRAIN + TRAIN.split("\n\n\n", 1)[1].replace("def train(", "def train2(")
    doc = _open(client, "fixall.py", two)
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: len(ddp(d)) == 2)
    actions = await _actions(
        client,
        doc,
        None,
        only=["source.fixAll"],
        rng=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
    )
    (fix_all,) = [a for a in actions if a.kind == "source.fixAll.ddp-lsp"]
    v = doc.apply(edits_for(fix_all.edit, doc.uri))
    assert doc.text.count("scaler.unscale_(optimizer)") == 2
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    doc.close()

    doc = _open(client, "fixall_cmd.py", two)
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: len(ddp(d)) == 2)
    before = len(client.recorder.applied)  # type: ignore[attr-defined]
    result = await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(command="ddp-lsp.fixAll", arguments=[doc.uri])
        ),
        TIMEOUT,
    )
    assert result["applied"] is True and result["fixes"] == 2
    edit = client.recorder.applied[before]  # type: ignore[attr-defined]
    v = doc.apply(edits_for(edit, doc.uri))
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    doc.close()


async def test_ignore_on_this_line(client: LanguageClient):
    doc = _open(client, "ignore.py")
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (diag,) = ddp(pub.diagnostics)
    actions = await _actions(client, doc, diag)
    (ignore,) = [a for a in actions if a.title == "Ignore DDP201 on this line"]
    assert not ignore.is_preferred
    v = doc.apply(edits_for(ignore.edit, doc.uri))
    assert doc.text.splitlines()[CLIP_LINE].endswith("1.0)  # ddp-lsp: ignore[DDP201]")
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    doc.close()


async def test_hover_shows_rule_documentation(client: LanguageClient):
    doc = _open(client, "hover.py")
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (diag,) = ddp(pub.diagnostics)
    pos = lsp.Position(diag.range.start.line, diag.range.start.character + 3)
    hover = await asyncio.wait_for(
        client.text_document_hover_async(lsp.HoverParams(lsp.TextDocumentIdentifier(doc.uri), pos)),
        TIMEOUT,
    )
    assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
    assert hover.contents.kind == lsp.MarkupKind.Markdown
    text = hover.contents.value
    assert "DDP201" in text and "### What it does" in text and "### Fix" in text
    # Off any finding: nothing to say.
    none = await client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(doc.uri), lsp.Position(0, 0))
    )
    assert none is None
    doc.close()


async def test_configuration_change_republishes(client: LanguageClient):
    doc = _open(client, "config.py")
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {"severity": {"DDP201": "hint"}}})
    )
    pub = await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Hint],
    )
    assert pub.version == 1
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {"ignore": ["DDP201"]}})
    )
    await wait_for_diagnostics(client, doc.uri, pred=lambda d: ddp(d) == [])
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {"enable": False}})
    )
    await wait_for_diagnostics(client, doc.uri, pred=lambda d: d == [])
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {}})
    )
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Error],
    )
    doc.close()


async def test_pyproject_settings_and_reload(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    proj = root / "proj"
    proj.mkdir()
    pyproject = proj / "pyproject.toml"
    pyproject.write_text('[tool.ddp-lsp]\nseverity = { DDP201 = "warning" }\n')
    doc = Doc(client, (proj / "train.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Warning],
    )
    pyproject.write_text('[tool.ddp-lsp]\nignore = ["DDP201"]\n')
    client.workspace_did_change_watched_files(
        lsp.DidChangeWatchedFilesParams(
            [lsp.FileEvent(pyproject.as_uri(), lsp.FileChangeType.Changed)]
        )
    )
    await wait_for_diagnostics(client, doc.uri, pred=lambda d: ddp(d) == [])
    doc.close()


async def test_bad_settings_show_message(client: LanguageClient):
    doc = _open(client, "badconfig.py")
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    before = len(client.messages)
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(
            settings={"ddp-lsp": {"select": ["NOT-A-RULE"], "severity": {"DDP201": "warning"}}}
        )
    )
    # The valid key still applies...
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Warning],
    )
    # ...and the invalid one was reported by name, its default kept (DDP201 still selected).
    msgs = [m for m in client.messages[before:] if "select" in m.message]
    assert msgs and msgs[0].type == lsp.MessageType.Error and "NOT-A-RULE" in msgs[0].message
    client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings={"ddp-lsp": {}})
    )
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Error],
    )
    doc.close()


async def test_positions_with_emoji_and_cjk(client: LanguageClient):
    enc = client.encoding  # type: ignore[attr-defined]
    prefix = '        note = "训练 😀 步骤"; '
    text = TRAIN.replace(
        "        torch.nn.utils.clip_grad_norm_", prefix + "torch.nn.utils.clip_grad_norm_"
    )
    doc = _open(client, "unicode.py", text)
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (d,) = ddp(pub.diagnostics)
    line = text.splitlines()[CLIP_LINE]
    assert d.range.start.character == units(prefix, enc)
    assert d.range.end.character == units(line, enc)
    # An edit addressed after the emoji, in the client's units, lands where the client meant.
    at = doc.text.index("步骤") + 2
    v = doc.replace(at, at, "✅")
    pub = await wait_for_diagnostics(client, doc.uri, v)
    (d,) = ddp(pub.diagnostics)
    assert d.range.start.character == units(prefix.replace("步骤", "步骤✅"), enc)
    state = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="ddp-lsp.debugDocument", arguments=[doc.uri])
    )
    assert state["text"] == doc.text and state["encoding"] == enc
    doc.close()


async def test_commands_and_their_errors(client: LanguageClient):
    text = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="ddp-lsp.explainRule", arguments=["DDP201"])
    )
    assert text.startswith("# DDP201 clip-without-unscale")
    for command, args, needle in [
        ("ddp-lsp.explainRule", ["DDP999"], "unknown rule"),
        ("ddp-lsp.explainRule", [], "takes one argument"),
        ("ddp-lsp.fixAll", ["file:///not/open.py"], "not an open document"),
        ("ddp-lsp.noSuchCommand", [], "noSuchCommand"),
    ]:
        with pytest.raises(Exception) as err:
            await client.workspace_execute_command_async(
                lsp.ExecuteCommandParams(command=command, arguments=args)
            )
        assert needle in str(err.value)


async def test_notebook_cells(client: LanguageClient):
    root = client.root  # type: ignore[attr-defined]
    nb_uri = (root / "train.ipynb").as_uri()
    head, body = TRAIN.split("\n\n\n", 1)
    cells = [
        ("cell-1", "%pip install torch\n" + head + "\n"),
        ("cell-md", "# Training\n"),
        ("cell-2", body),
    ]
    client.notebook_document_did_open(
        lsp.DidOpenNotebookDocumentParams(
            notebook_document=lsp.NotebookDocument(
                uri=nb_uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[
                    lsp.NotebookCell(
                        kind=lsp.NotebookCellKind.Markup
                        if name == "cell-md"
                        else lsp.NotebookCellKind.Code,
                        document=f"{nb_uri}#{name}",
                    )
                    for name, _ in cells
                ],
            ),
            cell_text_documents=[
                lsp.TextDocumentItem(
                    f"{nb_uri}#{name}", "markdown" if name == "cell-md" else "python", 1, text
                )
                for name, text in cells
            ],
        )
    )
    cell2 = f"{nb_uri}#cell-2"
    pub = await wait_for_diagnostics(client, cell2, pred=lambda d: ddp(d))
    (d,) = ddp(pub.diagnostics)
    clip_in_cell = body.splitlines().index(
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    )
    assert d.range.start.line == clip_in_cell
    result = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            lsp.TextDocumentIdentifier(cell2), d.range, lsp.CodeActionContext(diagnostics=[d])
        )
    )
    (fix,) = [a for a in result if isinstance(a, lsp.CodeAction) and a.is_preferred]
    (edit,) = edits_for(fix.edit, cell2)
    assert edit.range.start.line == clip_in_cell and "unscale_" in edit.new_text
    # Type the fix into cell 2 through notebookDocument/didChange.
    client.notebook_document_did_change(
        lsp.DidChangeNotebookDocumentParams(
            notebook_document=lsp.VersionedNotebookDocumentIdentifier(version=2, uri=nb_uri),
            change=lsp.NotebookDocumentChangeEvent(
                cells=lsp.NotebookDocumentCellChanges(
                    text_content=[
                        lsp.NotebookDocumentCellContentChanges(
                            document=lsp.VersionedTextDocumentIdentifier(uri=cell2, version=2),
                            changes=[
                                lsp.TextDocumentContentChangePartial(
                                    range=edit.range, text=edit.new_text
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )
    pub = await wait_for_diagnostics(client, cell2, 2)
    assert ddp(pub.diagnostics) == []
    # Insert a new code cell after the markdown one (a structure change): it is analysed with
    # the imports of cell 1, and its finding is published on its own URI.
    cell3 = f"{nb_uri}#cell-3"
    client.notebook_document_did_change(
        lsp.DidChangeNotebookDocumentParams(
            notebook_document=lsp.VersionedNotebookDocumentIdentifier(version=3, uri=nb_uri),
            change=lsp.NotebookDocumentChangeEvent(
                cells=lsp.NotebookDocumentCellChanges(
                    structure=lsp.NotebookDocumentCellChangeStructure(
                        array=lsp.NotebookCellArrayChange(
                            start=2,
                            delete_count=0,
                            cells=[
                                lsp.NotebookCell(kind=lsp.NotebookCellKind.Code, document=cell3)
                            ],
                        ),
                        did_open=[
                            lsp.TextDocumentItem(
                                cell3, "python", 1, body.replace("def train(", "def train3(")
                            )
                        ],
                    )
                )
            ),
        )
    )
    pub = await wait_for_diagnostics(client, cell3, 1, lambda d: ddp(d))
    assert [d.range.start.line for d in ddp(pub.diagnostics)] == [clip_in_cell]
    client.notebook_document_did_close(
        lsp.DidCloseNotebookDocumentParams(
            notebook_document=lsp.NotebookDocumentIdentifier(nb_uri),
            cell_text_documents=[
                lsp.TextDocumentIdentifier(f"{nb_uri}#{n}")
                for n in ["cell-1", "cell-md", "cell-3", "cell-2"]
            ],
        )
    )


async def test_pyproject_change_seen_on_save_without_a_watcher(client: LanguageClient):
    caps = capabilities(client.profile).workspace  # type: ignore[attr-defined]
    watch = caps.did_change_watched_files if caps else None
    root = client.root  # type: ignore[attr-defined]
    proj = root / "nowatch"
    proj.mkdir()
    pyproject = proj / "pyproject.toml"
    pyproject.write_text('[tool.ddp-lsp]\nseverity = { DDP201 = "information" }\n')
    doc = Doc(client, (proj / "train.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Information],
    )
    pyproject.write_text('[tool.ddp-lsp]\nseverity = { DDP201 = "hint" }\n')
    os.utime(pyproject, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a distinct mtime
    if watch and watch.dynamic_registration:  # this client reports the change itself
        client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams(
                [lsp.FileEvent(pyproject.as_uri(), lsp.FileChangeType.Changed)]
            )
        )
    client.text_document_did_save(
        lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(doc.uri))
    )
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Hint],
    )
    doc.close()


async def test_tags_and_related_information(client: LanguageClient):
    doc = _open(client, "tags.py", TRAIN + "scaler = torch.cuda.amp.GradScaler()\n")
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d, "DDP205"))
    (dep,) = ddp(pub.diagnostics, "DDP205")
    assert list(dep.tags or []) == [lsp.DiagnosticTag.Deprecated]
    (clip,) = ddp(pub.diagnostics)
    (rel,) = clip.related_information or ()
    assert rel.location.uri == doc.uri and rel.location.range.start.line == CLIP_LINE - 1
    assert "scaled" in rel.message
    doc.close()


async def test_launch_config_next_to_the_script_reaches_the_rules(client: LanguageClient):
    """DDP405 counts workers x processes per node: the processes come from the torchrun line
    in a shell script next to the training file, and the message says so. (No preflight
    report: every CPU in each of 64 processes is too many on any node.)"""
    root = client.root  # type: ignore[attr-defined]
    sub = root / "launched"
    sub.mkdir(exist_ok=True)
    (sub / "run.sh").write_text("torchrun --nproc-per-node=64 loader_job.py\n", encoding="utf-8")
    text = (
        "import os\n"
        "import torch.distributed as dist\n"
        "from torch.utils.data import DataLoader\n\n"
        "def main(ds):\n"
        "    loader = DataLoader(ds, batch_size=8, num_workers=os.cpu_count())\n"
        "    for x in loader:\n"
        "        x.cuda()\n"
    )
    doc = _open(client, "launched/loader_job.py", text)
    pub = await wait_for_diagnostics(
        client, doc.uri, 1, lambda ds: any(d.code == "DDP405" for d in ds)
    )
    (d,) = [d for d in pub.diagnostics if d.code == "DDP405"]
    assert "run.sh" in d.message and "64" in d.message, d.message
    doc.close()


UNSAFE_ONLY = """import torch.distributed as dist
from torch.utils.data import DataLoader


def main(dataset):
    dist.init_process_group("nccl")
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    return loader
"""


async def test_unsafe_fixes_are_never_preferred_nor_in_fix_all(client: LanguageClient):
    """VS Code's auto-fix applies the preferred action unasked; fix-all is safe fixes only."""
    doc = _open(client, "unsafe_only.py", UNSAFE_ONLY)
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d, "DDP401"))
    (diag,) = ddp(pub.diagnostics, "DDP401")
    actions = await _actions(client, doc, diag, only=[lsp.CodeActionKind.QuickFix])
    unsafe = [a for a in actions if a.title.startswith("DDP401") and "(unsafe)" in a.title]
    assert unsafe and not any(a.is_preferred for a in unsafe)
    # Fix-all offers nothing here: every fix in this file is unsafe.
    actions = await _actions(
        client,
        doc,
        None,
        only=["source.fixAll"],
        rng=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
    )
    assert [a for a in actions if a.kind == "source.fixAll.ddp-lsp"] == []
    doc.close()
    # With a safe fix beside the unsafe ones, fix-all takes the safe one only.
    mixed = UNSAFE_ONLY + "\n\n" + TRAIN.split("\n\n\n", 1)[1]
    mixed = mixed.replace("import torch.distributed", "import torch\nimport torch.distributed")
    doc = _open(client, "unsafe_mixed.py", mixed)
    await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d) and ddp(d, "DDP401"))
    actions = await _actions(
        client,
        doc,
        None,
        only=["source.fixAll"],
        rng=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
    )
    (fix_all,) = [a for a in actions if a.kind == "source.fixAll.ddp-lsp"]
    v = doc.apply(edits_for(fix_all.edit, doc.uri))
    assert "scaler.unscale_(optimizer)" in doc.text and "shuffle=True" in doc.text
    assert "DistributedSampler" not in doc.text
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == [] and ddp(pub.diagnostics, "DDP401")
    doc.close()


@pytest.mark.parametrize(
    ("call", "commented"),
    [
        # The finding's first line opens a triple-quoted string: a comment there would be text.
        ('clip_grad_norm_(model.parameters(), float("""\n1.0\n"""))', '"""))  # ddp-lsp'),
        # The first line ends with a backslash: a comment there is a syntax error.
        ("clip_grad_norm_(model.parameters(), \\\n            1.0)", "1.0)  # ddp-lsp"),
    ],
    ids=["triple-quoted", "backslash"],
)
async def test_ignore_goes_where_a_comment_is_code(
    client: LanguageClient, call: str, commented: str
):
    text = TRAIN.replace("clip_grad_norm_(model.parameters(), 1.0)", call)
    doc = _open(client, f"ignore_{len(call)}.py", text)
    pub = await wait_for_diagnostics(client, doc.uri, 1, lambda d: ddp(d))
    (diag,) = ddp(pub.diagnostics)
    actions = await _actions(client, doc, diag)
    (ignore,) = [a for a in actions if a.title == "Ignore DDP201 on this line"]
    v = doc.apply(edits_for(ignore.edit, doc.uri))
    assert commented in doc.text
    assert doc.text.replace("  # ddp-lsp: ignore[DDP201]", "") == text  # nothing else moved
    compile(doc.text, "ignored.py", "exec")
    pub = await wait_for_diagnostics(client, doc.uri, v)
    assert ddp(pub.diagnostics) == []
    doc.close()


async def test_new_pyproject_is_found(client: LanguageClient):
    """A pyproject.toml created next to an open file applies: on save for a client without a
    file watcher (Neovim on Linux), on the watcher's event for one with it."""
    caps = capabilities(client.profile).workspace  # type: ignore[attr-defined]
    watch = caps.did_change_watched_files if caps else None
    root = client.root  # type: ignore[attr-defined]
    proj = root / "newproj" / "src"
    proj.mkdir(parents=True)
    doc = Doc(client, (proj / "train.py").as_uri(), TRAIN, client.encoding)  # type: ignore[attr-defined]
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Error],
    )
    pyproject = root / "newproj" / "pyproject.toml"
    pyproject.write_text('[tool.ddp-lsp]\nseverity = { DDP201 = "hint" }\n')
    if watch and watch.dynamic_registration:
        client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams(
                [lsp.FileEvent(pyproject.as_uri(), lsp.FileChangeType.Created)]
            )
        )
    else:
        client.text_document_did_save(
            lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(doc.uri))
        )
    await wait_for_diagnostics(
        client,
        doc.uri,
        pred=lambda d: [x.severity for x in ddp(d)] == [lsp.DiagnosticSeverity.Hint],
    )
    doc.close()
