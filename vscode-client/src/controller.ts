/**
 * The extension's behaviour: which interpreter runs the server, when it restarts, what each
 * command does, what the status bar says.
 *
 * The language client itself is created by a factory (see extension.ts), so the unit tests
 * drive this class with a mocked `vscode` module and a fake client, and the protocol side is
 * covered by the end-to-end test against the real server.
 */

import * as vscode from "vscode";
import { CLIENT_COMMANDS, SERVER_COMMANDS } from "./commands";
import { installCommand, interpreterCandidates, type Interpreter, type PythonExtensionApi } from "./interpreter";
import { ISOLATED, type ProbeOutcome } from "./probe";
import { toLocations } from "./rankview";
import { SECTION, serverSettings, type ServerSettings } from "./settings";
import {
  preflightLine,
  statusView,
  summarizePreflight,
  type PreflightSummary,
  type ServerState,
} from "./status";

/** What the controller needs from a running language client. */
export interface ServerClient {
  start(): Promise<void>;
  stop(): Promise<void>;
  sendRequest(method: string, params: unknown, token?: vscode.CancellationToken): Promise<unknown>;
  sendNotification(method: string, params: unknown): Promise<void>;
  /** The commands the server advertised in its initialize result (empty before it ran). */
  serverCommands(): readonly string[];
  onDidChangeState(listener: (state: "starting" | "running" | "stopped") => void): vscode.Disposable;
}

export interface ClientSpec {
  command: string;
  args: string[];
  cwd: string | undefined;
  initializationOptions: ServerSettings;
}

export type ClientFactory = (spec: ClientSpec, output: vscode.OutputChannel) => ServerClient;

export interface ControllerDeps {
  createClient: ClientFactory;
  /** Working directory for the server and the probe: outside the workspace (see probe.ts). */
  serverCwd: string;
  probe: (python: string, cwd: string) => Promise<ProbeOutcome>;
  pythonApi: () => Promise<PythonExtensionApi | undefined>;
}

export const SERVER_ARGS = [...ISOLATED, "-m", "ddp_lsp", "serve"];

const ACTION_SELECT = "Select interpreter";
const ACTION_INSTALL = "Install ddp-lsp";
const ACTION_OUTPUT = "Show output";
const ACTION_REPORT = "Show report";

export class Controller implements vscode.Disposable {
  readonly output: vscode.OutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[] = [];
  private client: ServerClient | undefined;
  private clientSubscriptions: vscode.Disposable[] = [];
  private interpreter: Interpreter | undefined;
  private preferred: string | undefined; // the first choice at the last start
  private state: ServerState = "stopped";
  private stateDetail: string | undefined;
  private preflight: PreflightSummary | undefined;
  private python: PythonExtensionApi | undefined;
  // Starts and stops are chained: a burst of settings changes must not leave two servers.
  private queue: Promise<void> = Promise.resolve();
  // The last "missing" notification, so that each restart does not raise the same one again.
  private lastNotice: string | undefined;
  private disposed = false;

  constructor(private readonly deps: ControllerDeps) {
    this.output = vscode.window.createOutputChannel("ddp-lsp");
    this.statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
    this.statusItem.name = "ddp-lsp";
    this.statusItem.command = CLIENT_COMMANDS.showOutput;
    this.disposables.push(this.output, this.statusItem);
  }

  /** Registers commands and listeners, then starts the server. */
  async activate(): Promise<void> {
    const reg = (id: string, fn: () => unknown): void => {
      this.disposables.push(vscode.commands.registerCommand(id, fn));
    };
    reg(CLIENT_COMMANDS.runPreflight, () => this.runPreflight());
    reg(CLIENT_COMMANDS.fixAll, () => this.fixAll());
    reg(CLIENT_COMMANDS.peekRankPaths, () => this.peekRankPaths());
    reg(CLIENT_COMMANDS.restart, () => this.restart(true));
    reg(CLIENT_COMMANDS.showOutput, () => this.output.show(true));

    this.disposables.push(
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
      // Trust unlocks the preflight interpreter: restart so initializationOptions carry it.
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.restart(false)),
    );
    this.python = await this.deps.pythonApi();
    if (this.python) {
      this.disposables.push(
        this.python.environments.onDidChangeActiveEnvironmentPath(() => this.restartIfInterpreterChanged()),
      );
    }
    this.render();
    await this.restart(false);
  }

  get serverState(): ServerState {
    return this.state;
  }

  get lastPreflight(): PreflightSummary | undefined {
    return this.preflight;
  }

  get currentInterpreter(): Interpreter | undefined {
    return this.interpreter;
  }

  // -- lifecycle -------------------------------------------------------------------------------

  restart(userAsked: boolean): Promise<void> {
    if (userAsked) {
      this.lastNotice = undefined; // the user wants to hear about a problem again
    }
    this.queue = this.queue.then(
      () => this.doRestart(),
      () => this.doRestart(),
    );
    return this.queue;
  }

  private candidates(log?: (line: string) => void): Promise<Interpreter[]> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    const folder = folders[0];
    return interpreterCandidates({
      setting: vscode.workspace.getConfiguration(SECTION).get<string>("interpreter"),
      python: this.python,
      resource: folder?.uri,
      workspaceFolder: folder?.uri.fsPath,
      untrustedRoots: vscode.workspace.isTrusted ? [] : folders.map((f) => f.uri.fsPath),
      log,
    });
  }

  private async doRestart(): Promise<void> {
    await this.stopClient();
    if (this.disposed) {
      return;
    }
    const config = vscode.workspace.getConfiguration(SECTION);
    const candidates = await this.candidates((line) => this.log(line));
    this.preferred = candidates[0]?.command;
    this.setState("starting");
    // The first interpreter that has ddp-lsp runs the server: the Python extension's
    // environment may lack it while ddp-lsp.interpreter names one that has it.
    const problems: Array<{ candidate: Interpreter; outcome: Exclude<ProbeOutcome, { kind: "ok" }> }> = [];
    let outcome: ProbeOutcome | undefined;
    for (const candidate of candidates) {
      this.log(`Interpreter: ${candidate.command} (from ${candidate.source})`);
      const found = await this.deps.probe(candidate.command, this.deps.serverCwd);
      if (this.disposed) {
        return;
      }
      if (found.kind === "ok") {
        this.interpreter = candidate;
        outcome = found;
        break;
      }
      problems.push({ candidate, outcome: found });
      if (candidate !== candidates.at(-1)) {
        this.log(`${candidate.command} cannot run ddp-lsp (${found.kind}: ${found.detail}); trying the next interpreter.`);
      }
    }
    if (outcome === undefined || outcome.kind !== "ok") {
      // Offer the fix (select, install) for the first choice: where the user expects it.
      const first = problems[0]!;
      this.interpreter = first.candidate;
      this.setState(first.outcome.kind === "broken" ? "error" : "missing", first.outcome.detail);
      this.notifyProblem(first.outcome, first.candidate.command, problems.slice(1).map((p) => p.candidate));
      return;
    }
    const python = this.interpreter!.command;
    this.log(`ddp-lsp ${outcome.version} found; starting ${python} ${SERVER_ARGS.join(" ")}`);
    const client = this.deps.createClient(
      {
        command: python,
        args: SERVER_ARGS,
        cwd: this.deps.serverCwd,
        initializationOptions: serverSettings(config, vscode.workspace.isTrusted),
      },
      this.output,
    );
    this.client = client;
    this.clientSubscriptions.push(
      client.onDidChangeState((s) => {
        if (this.client === client) {
          this.setState(s);
        }
      }),
    );
    try {
      await client.start();
      this.setState("running");
    } catch (err) {
      this.log(`The server failed to start: ${errorText(err)}`);
      this.setState("error", errorText(err));
      const choice = await vscode.window.showErrorMessage(
        `ddp-lsp: the server failed to start with ${python}.`,
        ACTION_OUTPUT,
      );
      if (choice === ACTION_OUTPUT) {
        this.output.show(true);
      }
    }
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const d of this.clientSubscriptions.splice(0)) {
      d.dispose();
    }
    if (client) {
      try {
        await client.stop();
      } catch (err) {
        this.log(`Stopping the server: ${errorText(err)}`);
      }
    }
    this.setState("stopped");
  }

  private async restartIfInterpreterChanged(): Promise<void> {
    // Compared with the first choice of the last start, not with the interpreter that runs the
    // server: that may be a fallback, which the Python extension's choice never equals.
    const [next] = await this.candidates();
    if (next?.command !== this.preferred) {
      this.log(`The interpreter changed to ${next?.command ?? "?"}: restarting.`);
      await this.restart(true);
    }
  }

  private async onConfigurationChanged(e: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!e.affectsConfiguration(SECTION)) {
      return;
    }
    if (e.affectsConfiguration(`${SECTION}.interpreter`)) {
      await this.restart(true);
      return;
    }
    if (e.affectsConfiguration(`${SECTION}.trace`)) {
      return; // the language client follows ddp-lsp.trace.server by itself
    }
    const client = this.client;
    if (client === undefined || this.state !== "running") {
      // Nothing to update: a stopped or missing server picks the settings up when it starts.
      if (this.state === "missing" || this.state === "error") {
        await this.restart(false);
      }
      return;
    }
    // The server applies analysis settings live (and re-pulls workspace/configuration), which
    // keeps open documents and their diagnostics instead of a restart's blank moment.
    const settings = serverSettings(vscode.workspace.getConfiguration(SECTION), vscode.workspace.isTrusted);
    await client.sendNotification("workspace/didChangeConfiguration", { settings: { [SECTION]: settings } });
    this.render();
  }

  // -- commands --------------------------------------------------------------------------------

  private runningClient(action: string): ServerClient | undefined {
    if (this.client && this.state === "running") {
      return this.client;
    }
    void vscode.window
      .showWarningMessage(`ddp-lsp: cannot ${action}: the server is not running.`, ACTION_OUTPUT)
      .then((choice) => choice === ACTION_OUTPUT && this.output.show(true));
    return undefined;
  }

  async fixAll(): Promise<{ applied: boolean; fixes: number } | undefined> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== "python") {
      void vscode.window.showInformationMessage("ddp-lsp: open a Python file to fix.");
      return undefined;
    }
    const client = this.runningClient("fix all");
    if (!client) {
      return undefined;
    }
    let result: { applied?: boolean; fixes?: number; message?: string } | null;
    try {
      result = (await client.sendRequest("workspace/executeCommand", {
        command: SERVER_COMMANDS.fixAll,
        arguments: [editor.document.uri.toString()],
      })) as { applied?: boolean; fixes?: number; message?: string } | null;
    } catch (err) {
      // The server's refusal (say, a document it does not have open) is a message, not a crash.
      this.log(`${SERVER_COMMANDS.fixAll} failed: ${errorText(err)}`);
      void vscode.window.showErrorMessage(`ddp-lsp: fix all failed: ${errorText(err)}`);
      return undefined;
    }
    const fixes = typeof result?.fixes === "number" ? result.fixes : 0;
    const applied = result?.applied === true;
    if (!applied && typeof result?.message === "string") {
      // Fixes were found but not applied: the edit was refused, or not answered in time.
      void vscode.window.showWarningMessage(`ddp-lsp: fix all: ${result.message}`);
      return { applied, fixes };
    }
    void vscode.window.showInformationMessage(
      applied ? `ddp-lsp: applied ${fixes} fix${fixes === 1 ? "" : "es"}.` : "ddp-lsp: nothing to fix safely in this file.",
    );
    return { applied, fixes };
  }

  /**
   * `DDP: Show rank paths`: the rank conditions and early exits that decide which ranks run the
   * cursor's line, in a peek view. Returns how many were shown.
   */
  async peekRankPaths(): Promise<number | undefined> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== "python") {
      void vscode.window.showInformationMessage("ddp-lsp: open a Python file to see its rank paths.");
      return undefined;
    }
    const client = this.runningClient("show rank paths");
    if (!client) {
      return undefined;
    }
    const at = editor.selection.active;
    let result: unknown;
    try {
      result = await client.sendRequest("workspace/executeCommand", {
        command: SERVER_COMMANDS.showRankPaths,
        arguments: [editor.document.uri.toString(), { line: at.line, character: at.character }],
      });
    } catch (err) {
      this.log(`${SERVER_COMMANDS.showRankPaths} failed: ${errorText(err)}`);
      void vscode.window.showErrorMessage(`ddp-lsp: show rank paths failed: ${errorText(err)}`);
      return undefined;
    }
    const locations = toLocations(result);
    if (locations.length === 0) {
      void vscode.window.showInformationMessage("ddp-lsp: every rank runs this line.");
      return 0;
    }
    await vscode.commands.executeCommand("editor.action.peekLocations", editor.document.uri, at, locations, "peek");
    return locations.length;
  }

  async runPreflight(): Promise<PreflightSummary | undefined> {
    if (!vscode.workspace.isTrusted) {
      // The preflight runs an interpreter (and torch) with the workspace's code paths; an
      // untrusted workspace gets diagnostics only.
      void vscode.window.showWarningMessage("ddp-lsp: the preflight is off in untrusted workspaces.");
      return undefined;
    }
    const client = this.runningClient("run the preflight");
    if (!client) {
      return undefined;
    }
    if (!client.serverCommands().includes(SERVER_COMMANDS.runPreflight)) {
      void vscode.window.showWarningMessage(
        `ddp-lsp: this server (${this.interpreter?.command ?? "?"}) has no preflight command; upgrade ddp-lsp.`,
      );
      return undefined;
    }
    const editor = vscode.window.activeTextEditor;
    const target =
      editor?.document.languageId === "python" ? editor.document.uri : vscode.workspace.workspaceFolders?.[0]?.uri;
    const args = target ? [target.toString()] : [];
    let result: unknown;
    try {
      result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: "DDP preflight", cancellable: true },
        (_progress, token) =>
          client.sendRequest("workspace/executeCommand", { command: SERVER_COMMANDS.runPreflight, arguments: args }, token),
      );
    } catch (err) {
      result = { error: errorText(err) };
    }
    return this.recordPreflight(result);
  }

  /**
   * Takes a `ddp-lsp.runPreflight` answer, however the command was run: from our palette
   * command, or from the server's code lens (through the language client's executeCommand
   * middleware, see extension.ts), so the status bar always shows the latest verdict.
   */
  recordPreflight(result: unknown): PreflightSummary {
    const summary = summarizePreflight(result);
    this.preflight = summary;
    this.logReport(result, summary);
    this.render();
    const line = preflightLine(summary);
    const show =
      summary.verdict === "pass"
        ? vscode.window.showInformationMessage
        : summary.verdict === "warn"
          ? vscode.window.showWarningMessage
          : vscode.window.showErrorMessage;
    const actions = summary.markdown ? [ACTION_REPORT, ACTION_OUTPUT] : [ACTION_OUTPUT];
    void show(`ddp-lsp: ${line}`, ...actions).then((choice) => {
      if (choice === ACTION_OUTPUT) {
        this.output.show(true);
      } else if (choice === ACTION_REPORT && summary.markdown) {
        void this.showReport(summary.markdown);
      }
    });
    return summary;
  }

  /** The server's Markdown report, rendered by VS Code's built-in Markdown preview. */
  private async showReport(markdown: string): Promise<void> {
    const doc = await vscode.workspace.openTextDocument({ language: "markdown", content: markdown });
    await vscode.commands.executeCommand("markdown.showPreview", doc.uri);
  }

  // -- messages --------------------------------------------------------------------------------

  private notifyProblem(
    outcome: Exclude<ProbeOutcome, { kind: "ok" }>,
    python: string,
    alsoTried: readonly Interpreter[] = [],
  ): void {
    const key = `${outcome.kind}:${python}`;
    this.log(`Cannot start ddp-lsp with ${python}: ${outcome.kind} (${outcome.detail})`);
    if (this.lastNotice === key) {
      return;
    }
    this.lastNotice = key;
    let message: string;
    const actions = [ACTION_SELECT];
    if (outcome.kind === "no-python") {
      message = `ddp-lsp: no Python interpreter at "${python}". Select one, or set ddp-lsp.interpreter.`;
    } else if (outcome.kind === "no-ddp-lsp") {
      message = `ddp-lsp is not installed in ${python}. Install it there, or select an interpreter that has it.`;
      actions.push(ACTION_INSTALL);
    } else {
      message = `ddp-lsp cannot start with ${python}: ${outcome.detail}`;
      actions.push(ACTION_INSTALL);
    }
    if (alsoTried.length > 0) {
      message += ` (Also tried: ${alsoTried.map((c) => `${c.command} from ${c.source}`).join(", ")}.)`;
    }
    actions.push(ACTION_OUTPUT);
    void vscode.window.showErrorMessage(message, ...actions).then((choice) => this.onProblemAction(choice, python));
  }

  private async onProblemAction(choice: string | undefined, python: string): Promise<void> {
    if (choice === ACTION_SELECT) {
      if (this.python) {
        await vscode.commands.executeCommand("python.setInterpreter");
      } else {
        await vscode.commands.executeCommand("workbench.action.openSettings", `${SECTION}.interpreter`);
      }
    } else if (choice === ACTION_INSTALL) {
      const terminal = vscode.window.createTerminal({ name: "ddp-lsp: install" });
      terminal.show();
      terminal.sendText(installCommand(python));
      // When the install terminal closes, try again: the usual next step anyway.
      const sub = vscode.window.onDidCloseTerminal((closed) => {
        if (closed === terminal) {
          sub.dispose();
          void this.restart(true);
        }
      });
      this.disposables.push(sub);
    } else if (choice === ACTION_OUTPUT) {
      this.output.show(true);
    }
  }

  private logReport(result: unknown, summary: PreflightSummary): void {
    this.log(preflightLine(summary));
    if (summary.markdown) {
      this.output.appendLine(summary.markdown);
    }
    const probes = (result as { probes?: unknown } | null)?.probes;
    if (Array.isArray(probes)) {
      for (const p of probes as Array<Record<string, unknown>>) {
        this.log(`  [${String(p.status)}] ${String(p.title ?? p.id)}: ${String(p.message ?? "")}`);
      }
    }
  }

  private log(line: string): void {
    this.output.appendLine(`[client] ${line}`);
  }

  private setState(state: ServerState, detail?: string): void {
    this.state = state;
    this.stateDetail = detail;
    this.render();
  }

  private render(): void {
    const enabled = vscode.workspace.getConfiguration(SECTION).get<boolean>("enable") ?? true;
    const shown = this.state === "running" && !enabled ? "disabled" : this.state;
    const view = statusView(shown, this.preflight, this.stateDetail ?? this.interpreter?.command);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.background ? new vscode.ThemeColor(view.background) : undefined;
    this.statusItem.show();
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    await this.queue.catch(() => undefined);
    await this.stopClient();
    for (const d of this.disposables.splice(0)) {
      d.dispose();
    }
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
