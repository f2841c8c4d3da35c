/**
 * End to end: the real `python -m ddp_lsp serve`, driven through vscode-jsonrpc with the
 * vscode-languageserver-protocol types, the same stack vscode-languageclient runs on.
 *
 * It sends what the extension sends (the same argv, initializationOptions built by the same
 * mapping from package.json's defaults, workspace/configuration answers through the same
 * sanitizer) and checks that the server accepts all of it, publishes diagnostics, offers a quick
 * fix whose edit removes the diagnostic, runs the commands our palette commands call, and shuts
 * down cleanly. Interpreter: $DDP_LSP_PYTHON, else ../.venv/bin/python. A missing interpreter
 * fails the test: it is never skipped.
 */

import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from "vscode-jsonrpc/node";
import {
  ApplyWorkspaceEditRequest,
  CodeActionRequest,
  CodeLensRequest,
  ConfigurationRequest,
  DidChangeConfigurationNotification,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InlayHintRequest,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  RegistrationRequest,
  ShowMessageNotification,
  ShutdownRequest,
  WorkDoneProgressCreateRequest,
  type CodeAction,
  type Diagnostic,
  type InitializeResult,
  type PublishDiagnosticsParams,
  type ShowMessageParams,
  type TextEdit,
  type WorkspaceEdit,
} from "vscode-languageserver-protocol";
import { SERVER_COMMANDS } from "../../src/commands";
import { CELL_SCHEME, DOCUMENT_SELECTOR, NOTEBOOK_TYPE } from "../../src/selector";
import { SERVER_ARGS } from "../../src/controller";
import { pythonEnv } from "../../src/probe";
import { mapConfiguration } from "../../src/middleware";
import { serverSettings } from "../../src/settings";
import { summarizePreflight } from "../../src/status";
import { PACKAGE_DIR, packageJson } from "../unit/helpers";

const TIMEOUT_MS = 30_000;
const PREFLIGHT_TIMEOUT_MS = 240_000;

const TRAIN = `"""A small DDP + AMP training script with one mistake: the gradients are clipped while scaled."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(10, 10).cuda(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(10):
        x = torch.randn(8, 10, device=rank)
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
`;
const CLIP_LINE = TRAIN.split("\n").findIndex((l) => l.includes("clip_grad_norm_"));

function findPython(): string {
  const fromEnv = process.env.DDP_LSP_PYTHON;
  if (fromEnv) {
    return fromEnv;
  }
  const venv = join(PACKAGE_DIR, "..", ".venv", process.platform === "win32" ? "Scripts/python.exe" : "bin/python");
  assert.ok(existsSync(venv), `no interpreter for the end-to-end test: set DDP_LSP_PYTHON or create ${venv}`);
  return venv;
}

/** What VS Code answers for `getConfiguration("ddp-lsp")`: the contributed defaults, nested. */
function rawSection(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const props = packageJson().contributes.configuration.properties;
  const flat: Record<string, unknown> = {};
  for (const [key, schema] of Object.entries(props)) {
    flat[key.replace(/^ddp-lsp\./, "")] = schema.default;
  }
  Object.assign(flat, overrides);
  for (const [key, value] of Object.entries(flat)) {
    const parts = key.split(".");
    let node = out;
    for (const part of parts.slice(0, -1)) {
      node = (node[part] ??= {}) as Record<string, unknown>;
    }
    node[parts.at(-1)!] = value;
  }
  return out;
}

function reader(section: Record<string, unknown>) {
  return {
    get<T>(key: string): T | undefined {
      let node: unknown = section;
      for (const part of key.split(".")) {
        node = (node as Record<string, unknown> | undefined)?.[part];
      }
      return node as T | undefined;
    },
  };
}

/** Applies LSP edits with JS string indices, which are UTF-16 code units like LSP's default. */
function applyEdits(text: string, edits: TextEdit[]): string {
  const starts = [0];
  for (let i = 0; i < text.length; i += 1) {
    if (text[i] === "\n") {
      starts.push(i + 1);
    }
  }
  const offset = (p: { line: number; character: number }): number => (starts[p.line] ?? text.length) + p.character;
  const sorted = [...edits].sort((a, b) => offset(b.range.start) - offset(a.range.start));
  for (const e of sorted) {
    text = text.slice(0, offset(e.range.start)) + e.newText + text.slice(offset(e.range.end));
  }
  return text;
}

function editsFor(edit: WorkspaceEdit, uri: string): TextEdit[] {
  const out: TextEdit[] = [...(edit.changes?.[uri] ?? [])];
  for (const change of edit.documentChanges ?? []) {
    if ("textDocument" in change && change.textDocument.uri === uri) {
      out.push(...(change.edits as TextEdit[]));
    }
  }
  return out;
}

class Session {
  readonly proc: ChildProcessWithoutNullStreams;
  readonly conn: MessageConnection;
  readonly diagnostics: PublishDiagnosticsParams[] = [];
  readonly messages: ShowMessageParams[] = [];
  readonly texts = new Map<string, { text: string; version: number }>();
  section: Record<string, unknown> = rawSection();
  stderr = "";
  private waiters: Array<() => void> = [];

  constructor(python: string) {
    // As the extension starts it: from its own directory, with the current directory off sys.path.
    this.proc = spawn(python, SERVER_ARGS, { cwd: PACKAGE_DIR, env: pythonEnv(), stdio: "pipe" });
    this.proc.stderr.on("data", (b: Buffer) => (this.stderr += b.toString("utf8")));
    this.conn = createMessageConnection(new StreamMessageReader(this.proc.stdout), new StreamMessageWriter(this.proc.stdin));
    this.conn.onNotification(PublishDiagnosticsNotification.type, (p) => {
      this.diagnostics.push(p);
      this.wake();
    });
    this.conn.onNotification(ShowMessageNotification.type, (p) => {
      this.messages.push(p);
      this.wake();
    });
    // The answers vscode-languageclient gives, with our configuration middleware in the path.
    this.conn.onRequest(
      ConfigurationRequest.type,
      (params) =>
        mapConfiguration(
          params.items,
          params.items.map((item) => (item.section === "ddp-lsp" ? this.section : null)),
          true,
        ) as unknown[],
    );
    this.conn.onRequest(RegistrationRequest.type, () => null);
    this.conn.onRequest(WorkDoneProgressCreateRequest.type, () => null);
    this.conn.onRequest(ApplyWorkspaceEditRequest.type, (params) => {
      for (const [uri, doc] of this.texts) {
        const edits = editsFor(params.edit, uri);
        if (edits.length) {
          this.change(uri, applyEdits(doc.text, edits));
        }
      }
      return { applied: true };
    });
    this.conn.listen();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) {
      w();
    }
  }

  /** Waits for a condition on what the server sent; fails with what did arrive. */
  async waitFor<T>(what: string, check: () => T | undefined, timeoutMs = TIMEOUT_MS): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const got = check();
      if (got !== undefined) {
        return got;
      }
      const left = deadline - Date.now();
      if (left <= 0 || this.proc.exitCode !== null) {
        assert.fail(
          `timed out waiting for ${what}; server exit=${String(this.proc.exitCode)}\n` +
            `messages: ${JSON.stringify(this.messages)}\nstderr:\n${this.stderr.slice(-3000)}`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The newest diagnostics for `uri` published for its current version. */
  current(uri: string): Diagnostic[] | undefined {
    const version = this.texts.get(uri)?.version;
    for (let i = this.diagnostics.length - 1; i >= 0; i -= 1) {
      const p = this.diagnostics[i]!;
      if (p.uri === uri) {
        return p.version === undefined || p.version === version ? p.diagnostics : undefined;
      }
    }
    return undefined;
  }

  open(uri: string, text: string): void {
    this.texts.set(uri, { text, version: 1 });
    void this.conn.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: "python", version: 1, text },
    });
  }

  change(uri: string, text: string): void {
    const doc = this.texts.get(uri)!;
    const next = { text, version: doc.version + 1 };
    this.texts.set(uri, next);
    void this.conn.sendNotification(DidChangeTextDocumentNotification.type, {
      textDocument: { uri, version: next.version },
      contentChanges: [{ text }],
    });
  }

  async close(): Promise<number | null> {
    const exited = new Promise<number | null>((resolve) => {
      if (this.proc.exitCode !== null) {
        resolve(this.proc.exitCode);
      }
      this.proc.on("exit", (code) => resolve(code));
    });
    await this.conn.sendRequest(ShutdownRequest.type);
    await this.conn.sendNotification(ExitNotification.type);
    const code = await exited;
    this.conn.dispose();
    return code;
  }
}

let dir: string;
let session: Session;
let init: InitializeResult;

function ddp201(diags: Diagnostic[] | undefined): Diagnostic | undefined {
  return diags?.find((d) => d.code === "DDP201");
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "ddp-lsp-e2e-"));
  session = new Session(findPython());
  init = await session.conn.sendRequest(InitializeRequest.type, {
    processId: process.pid,
    clientInfo: { name: "ddp-lsp e2e (vscode-jsonrpc)" },
    rootUri: pathToFileURL(dir).href,
    workspaceFolders: [{ uri: pathToFileURL(dir).href, name: "e2e" }],
    initializationOptions: serverSettings(reader(session.section), true),
    capabilities: {
      general: { positionEncodings: ["utf-16"] },
      workspace: {
        configuration: true,
        applyEdit: true,
        workspaceEdit: { documentChanges: true },
        didChangeConfiguration: { dynamicRegistration: true },
        didChangeWatchedFiles: { dynamicRegistration: true },
        executeCommand: {},
      },
      textDocument: {
        synchronization: { didSave: true },
        publishDiagnostics: { relatedInformation: true, versionSupport: true, codeDescriptionSupport: true, dataSupport: true },
        codeAction: {
          codeActionLiteralSupport: { codeActionKind: { valueSet: ["quickfix", "source", "source.fixAll"] } },
          isPreferredSupport: true,
          dataSupport: true,
        },
        hover: { contentFormat: ["markdown", "plaintext"] },
        codeLens: {},
        inlayHint: {},
        semanticTokens: {
          requests: { full: true, range: true },
          tokenTypes: [],
          tokenModifiers: [],
          formats: ["relative"],
        },
      },
      // What vscode-languageclient's NotebookDocumentSyncFeature fills in.
      notebookDocument: { synchronization: { dynamicRegistration: true, executionSummarySupport: true } },
      window: { workDoneProgress: true, showMessage: {} },
    },
  });
  await session.conn.sendNotification(InitializedNotification.type, {});
});

after(async () => {
  if (session && session.proc.exitCode === null) {
    session.proc.kill();
  }
  rmSync(dir, { recursive: true, force: true });
});

test("the server advertises what the extension relies on", () => {
  const caps = init.capabilities;
  const commands = caps.executeCommandProvider?.commands ?? [];
  assert.ok(commands.includes(SERVER_COMMANDS.fixAll), `commands: ${commands.join(", ")}`);
  assert.ok(commands.includes(SERVER_COMMANDS.explainRule), `commands: ${commands.join(", ")}`);
  assert.ok(caps.codeActionProvider, "code actions");
  assert.ok(caps.textDocumentSync, "text sync");
});

test("notebook cells: the server claims the cells the selector hands it, and answers for them", async () => {
  // vscode-languageclient syncs cells through notebookDocument/* when the server's
  // notebookDocumentSync selects them, and asks hover/code actions for a cell only when the
  // document selector matches the cell's scheme.
  const sync = init.capabilities.notebookDocumentSync as
    | { notebookSelector: { notebook?: string | { notebookType?: string }; cells?: { language: string }[] }[] }
    | undefined;
  assert.ok(sync, "notebookDocumentSync advertised");
  const claimed = sync.notebookSelector.some(
    (f) =>
      (f.notebook === NOTEBOOK_TYPE || (typeof f.notebook === "object" && f.notebook.notebookType === NOTEBOOK_TYPE)) &&
      (f.cells ?? []).some((c) => c.language === "python"),
  );
  assert.ok(claimed, JSON.stringify(sync));
  assert.ok(DOCUMENT_SELECTOR.some((f) => f.scheme === CELL_SCHEME && f.language === "python"));
  const nb = pathToFileURL(join(dir, "train.ipynb")).href;
  const cell = `${CELL_SCHEME}:${join(dir, "train.ipynb")}#W0sZmlsZQ%3D%3D`;
  session.texts.set(cell, { text: TRAIN, version: 1 });
  await session.conn.sendNotification("notebookDocument/didOpen", {
    notebookDocument: { uri: nb, notebookType: NOTEBOOK_TYPE, version: 1, cells: [{ kind: 2, document: cell }] },
    cellTextDocuments: [{ uri: cell, languageId: "python", version: 1, text: TRAIN }],
  });
  const d = await session.waitFor("DDP201 in the cell", () => ddp201(session.current(cell)));
  const actions = (await session.conn.sendRequest(CodeActionRequest.type, {
    textDocument: { uri: cell },
    range: d.range,
    context: { diagnostics: [d], only: ["quickfix"] },
  })) as CodeAction[] | null;
  assert.ok(actions?.some((a) => a.isPreferred && editsFor(a.edit!, cell).length > 0), JSON.stringify(actions));
  await session.conn.sendNotification("notebookDocument/didClose", {
    notebookDocument: { uri: nb },
    cellTextDocuments: [{ uri: cell }],
  });
  session.texts.delete(cell);
});

test("diagnostics arrive, and the settings the extension sends are all accepted", async () => {
  const file = join(dir, "train.py");
  writeFileSync(file, TRAIN);
  const uri = pathToFileURL(file).href;
  session.open(uri, TRAIN);
  const d = await session.waitFor("DDP201 on train.py", () => ddp201(session.current(uri)));
  assert.equal(d.range.start.line, CLIP_LINE);
  assert.equal(d.source, "ddp-lsp");
  // Every key of VS Code's full section (client-only ones included) was valid for the server:
  // an unknown or ill-typed key would have produced a window/showMessage naming it.
  assert.deepEqual(session.messages, []);
});

test("a settings change through didChangeConfiguration reaches the diagnostics", async () => {
  const uri = pathToFileURL(join(dir, "train.py")).href;
  session.section = rawSection({ severity: { DDP201: "hint" } });
  const before = session.diagnostics.length;
  await session.conn.sendNotification(DidChangeConfigurationNotification.type, {
    settings: { "ddp-lsp": serverSettings(reader(session.section), true) },
  });
  const d = await session.waitFor("DDP201 as a hint", () =>
    session.diagnostics.length > before && ddp201(session.current(uri))?.severity === 4 ? true : undefined,
  );
  assert.equal(d, true);
  session.section = rawSection();
  await session.conn.sendNotification(DidChangeConfigurationNotification.type, {
    settings: { "ddp-lsp": serverSettings(reader(session.section), true) },
  });
  await session.waitFor("DDP201 back to an error", () => (ddp201(session.current(uri))?.severity === 1 ? true : undefined));
  assert.deepEqual(session.messages, []);
});

test("the quick fix's edit removes the diagnostic", async () => {
  const uri = pathToFileURL(join(dir, "train.py")).href;
  const d = ddp201(session.current(uri));
  assert.ok(d);
  const actions = (await session.conn.sendRequest(CodeActionRequest.type, {
    textDocument: { uri },
    range: d.range,
    context: { diagnostics: [d], only: ["quickfix"] },
  })) as CodeAction[] | null;
  assert.ok(actions && actions.length > 0, "code actions were returned");
  const fix = actions.find((a) => a.kind === "quickfix" && a.edit && a.diagnostics?.some((x) => x.code === "DDP201") && !/ignore/i.test(a.title));
  assert.ok(fix?.edit, `a quick fix for DDP201 among: ${actions.map((a) => a.title).join(" | ")}`);
  const edits = editsFor(fix.edit, uri);
  assert.ok(edits.length > 0);
  const fixed = applyEdits(session.texts.get(uri)!.text, edits);
  assert.match(fixed, /scaler\.unscale_\(optimizer\)\n\s+torch\.nn\.utils\.clip_grad_norm_/);
  session.change(uri, fixed);
  const after = await session.waitFor("diagnostics for the fixed text", () => session.current(uri));
  assert.equal(ddp201(after), undefined, JSON.stringify(after));
});

test("ddp-lsp.fixAll (what DDP: Fix all sends) applies the edit through workspace/applyEdit", async () => {
  const file = join(dir, "train_fixall.py");
  writeFileSync(file, TRAIN);
  const uri = pathToFileURL(file).href;
  session.open(uri, TRAIN);
  await session.waitFor("DDP201 on train_fixall.py", () => ddp201(session.current(uri)));
  const result = (await session.conn.sendRequest(ExecuteCommandRequest.type, {
    command: SERVER_COMMANDS.fixAll,
    arguments: [uri],
  })) as { applied: boolean; fixes: number };
  assert.deepEqual(result, { applied: true, fixes: 1 });
  assert.match(session.texts.get(uri)!.text, /scaler\.unscale_\(optimizer\)/);
  const after = await session.waitFor("diagnostics after fix all", () => session.current(uri));
  assert.equal(ddp201(after), undefined);
});

test("the rank view: inlay hints, and ddp-lsp.showRankPaths (what DDP: Show rank paths sends)", async () => {
  const caps = init.capabilities;
  assert.ok(caps.inlayHintProvider, "inlay hints");
  assert.ok(caps.semanticTokensProvider?.legend.tokenModifiers.includes("rankDependent"), "semantic tokens");
  assert.ok(caps.executeCommandProvider?.commands.includes(SERVER_COMMANDS.showRankPaths));
  const text = [
    "import torch.distributed as dist",
    "",
    "",
    "def step(rank, t):",
    "    dist.init_process_group('nccl')",
    "    if rank == 0:",
    "        dist.barrier()",
    "    dist.all_reduce(t)",
    "",
  ].join("\n");
  const file = join(dir, "ranks.py");
  writeFileSync(file, text);
  const uri = pathToFileURL(file).href;
  session.open(uri, text);
  await session.waitFor("DDP103 on ranks.py", () => session.current(uri)?.find((d) => d.code === "DDP103"));
  const hints = (await session.conn.sendRequest(InlayHintRequest.type, {
    textDocument: { uri },
    range: { start: { line: 0, character: 0 }, end: { line: 9, character: 0 } },
  })) ?? [];
  assert.deepEqual(
    hints.map((h) => [h.position.line, h.label]),
    [
      [6, "⚠ rank 0"],
      [7, "all ranks"],
    ],
  );
  const locations = (await session.conn.sendRequest(ExecuteCommandRequest.type, {
    command: SERVER_COMMANDS.showRankPaths,
    arguments: [uri, { line: 6, character: 8 }],
  })) as Array<{ uri: string; range: { start: { line: number; character: number } } }>;
  assert.deepEqual(
    locations.map((l) => [l.uri, l.range.start.line, l.range.start.character]),
    [[uri, 5, 7]],
  );
});

test("ddp-lsp.explainRule returns the rule's documentation", async () => {
  const text = await session.conn.sendRequest(ExecuteCommandRequest.type, {
    command: SERVER_COMMANDS.explainRule,
    arguments: ["DDP201"],
  });
  assert.equal(typeof text, "string");
  assert.match(text as string, /DDP201/);
});

test("ddp-lsp.runPreflight: works when advertised, and is really absent when not", async (t) => {
  const advertised = (init.capabilities.executeCommandProvider?.commands ?? []).includes(SERVER_COMMANDS.runPreflight);
  const uri = pathToFileURL(join(dir, "train.py")).href;
  const request = session.conn.sendRequest(ExecuteCommandRequest.type, {
    command: SERVER_COMMANDS.runPreflight,
    arguments: [uri],
  });
  if (!advertised) {
    // Not a skip: the server must then refuse the command, so that "not advertised" cannot hide
    // a half-registered one. The client never sends it in this case (controller.ts).
    await assert.rejects(request, /runPreflight|not found|unknown|command/i);
    t.diagnostic("the server does not advertise ddp-lsp.runPreflight yet; checked that it refuses it");
    return;
  }
  // The "Run preflight" lens runs the command the extension filters out in untrusted workspaces.
  const lenses = (await session.conn.sendRequest(CodeLensRequest.type, { textDocument: { uri } })) ?? [];
  assert.ok(
    lenses.some((l) => l.command?.command === SERVER_COMMANDS.runPreflight),
    `a Run preflight lens above init_process_group: ${JSON.stringify(lenses)}`,
  );
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    request,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("preflight took too long")), PREFLIGHT_TIMEOUT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
  const summary = summarizePreflight(result);
  assert.notEqual(summary.verdict, "error", `the preflight did not produce a report: ${JSON.stringify(result).slice(0, 2000)}`);
  assert.ok(summary.passed + summary.warned + summary.failed + summary.skipped > 0, "the report has probes");
});

test("shutdown and exit end the server with status 0", async () => {
  assert.equal(await session.close(), 0);
});
