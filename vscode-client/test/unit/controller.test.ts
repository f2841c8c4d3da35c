import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";
import { CLIENT_COMMANDS, SERVER_COMMANDS } from "../../src/commands";
import { Controller, SERVER_ARGS, type ClientSpec } from "../../src/controller";
import type { PythonExtensionApi } from "../../src/interpreter";
import type { ProbeOutcome } from "../../src/probe";
import { EventEmitter, Location, Position, Uri, stub, window, workspace } from "../vscode-stub";
import { FakeClient, packageJson, settle } from "./helpers";

interface Harness {
  controller: Controller;
  clients: FakeClient[];
  probes: string[];
  setProbe(outcome: ProbeOutcome): void;
  envChanged: EventEmitter<unknown>;
  setActiveEnv(path: string): void;
}

async function start(
  options: {
    python?: boolean;
    probe?: ProbeOutcome;
    probeFor?: (python: string) => ProbeOutcome | undefined;
    configure?: (c: FakeClient) => void;
  } = {},
): Promise<Harness> {
  const clients: FakeClient[] = [];
  const probes: string[] = [];
  let outcome: ProbeOutcome = options.probe ?? { kind: "ok", version: "0.1.0" };
  const envChanged = new EventEmitter<unknown>();
  let activeEnv = "/venv/bin/python";
  const api: PythonExtensionApi = {
    environments: {
      getActiveEnvironmentPath: () => ({ id: activeEnv, path: activeEnv }),
      resolveEnvironment: async () => ({ executable: { uri: { fsPath: activeEnv } } }),
      onDidChangeActiveEnvironmentPath: (l) => envChanged.event(l),
    },
  };
  const controller = new Controller({
    serverCwd: "/ext/ddp-lsp",
    createClient: (spec: ClientSpec) => {
      const client = new FakeClient(spec);
      options.configure?.(client);
      clients.push(client);
      return client;
    },
    probe: async (python, cwd) => {
      assert.equal(cwd, "/ext/ddp-lsp", "the probe runs outside the workspace");
      probes.push(python);
      return options.probeFor?.(python) ?? outcome;
    },
    pythonApi: async () => (options.python === false ? undefined : api),
  });
  await controller.activate();
  await settle();
  return {
    controller,
    clients,
    probes,
    setProbe: (o) => (outcome = o),
    envChanged,
    setActiveEnv: (p) => (activeEnv = p),
  };
}

function editor(path = "/work/project/train.py", languageId = "python", line = 0, character = 0) {
  return { document: { uri: Uri.file(path), languageId }, selection: { active: new Position(line, character) } };
}

function status(): string {
  const item = stub.statusItems[0];
  assert.ok(item, "a status bar item was created");
  return item.text;
}

beforeEach(() => stub.reset());

test("activation registers exactly the commands package.json contributes", async () => {
  await start();
  const contributed = packageJson().contributes.commands.map((c) => c.command).sort();
  assert.deepEqual([...stub.commands.keys()].sort(), contributed);
  assert.deepEqual(Object.values(CLIENT_COMMANDS).sort(), contributed);
  // None of them collides with a server command, which the language client registers itself.
  for (const id of contributed) {
    assert.ok(!Object.values(SERVER_COMMANDS).includes(id as never), id);
  }
  const titles = packageJson().contributes.commands.map((c) => `${c.category}: ${c.title}`).sort();
  assert.deepEqual(titles, [
    "DDP: Fix all",
    "DDP: Restart server",
    "DDP: Run preflight",
    "DDP: Show output",
    "DDP: Show rank paths",
  ]);
});

test("the server runs as `python -m ddp_lsp serve` with the Python extension's interpreter", async () => {
  stub.settings.set("severity", { DDP201: "hint" });
  const h = await start();
  assert.equal(h.clients.length, 1);
  const spec = h.clients[0]!.spec;
  assert.equal(spec.command, "/venv/bin/python");
  assert.deepEqual(spec.args, SERVER_ARGS);
  // -I: isolated, so a struct.py or ddp_lsp/ in the workspace is never imported.
  assert.deepEqual(SERVER_ARGS, ["-I", "-m", "ddp_lsp", "serve"]);
  // Not the workspace: `python -m` would import a ddp_lsp/ or pygls.py lying there.
  assert.equal(spec.cwd, "/ext/ddp-lsp");
  assert.deepEqual(spec.initializationOptions.severity, { DDP201: "hint" });
  assert.equal(h.controller.serverState, "running");
  assert.equal(status(), "$(check) DDP");
});

test("the Python extension's interpreter comes before ddp-lsp.interpreter", async () => {
  stub.settings.set("interpreter", "/opt/a/bin/python");
  const h = await start();
  assert.equal(h.clients[0]!.spec.command, "/venv/bin/python");
});

const MISSING: ProbeOutcome = { kind: "no-ddp-lsp", detail: "No module named 'ddp_lsp'" };

test("the Python extension's interpreter lacks ddp-lsp: ddp-lsp.interpreter runs the server", async () => {
  stub.settings.set("interpreter", "/opt/a/bin/python");
  const h = await start({ probeFor: (python) => (python === "/venv/bin/python" ? MISSING : undefined) });
  assert.deepEqual(h.probes, ["/venv/bin/python", "/opt/a/bin/python"]);
  assert.equal(h.clients.length, 1);
  assert.equal(h.clients[0]!.spec.command, "/opt/a/bin/python");
  assert.equal(h.controller.serverState, "running");
  assert.equal(h.controller.currentInterpreter?.source, "setting");
  assert.equal(stub.messages.filter((m) => m.level === "error").length, 0, "no install offer");
  // The Python extension signals a change but names the same environment: no restart.
  await h.envChanged.fire({});
  await settle();
  assert.equal(h.clients.length, 1);
  // Another environment is selected, which has ddp-lsp: it comes first again.
  h.setActiveEnv("/venv2/bin/python");
  await h.envChanged.fire({});
  await settle();
  assert.equal(h.clients.at(-1)!.spec.command, "/venv2/bin/python");
});

test("neither interpreter has ddp-lsp: one notice for the Python extension's, naming the fallback", async () => {
  stub.answers.set("not installed", "Install ddp-lsp");
  stub.settings.set("interpreter", "/opt/a/bin/python");
  const h = await start({ probe: MISSING });
  assert.deepEqual(h.probes, ["/venv/bin/python", "/opt/a/bin/python"]);
  assert.equal(h.clients.length, 0);
  assert.equal(h.controller.serverState, "missing");
  const errors = stub.messages.filter((m) => m.level === "error");
  assert.equal(errors.length, 1);
  assert.match(errors[0]!.text, /not installed in \/venv\/bin\/python.*Also tried: \/opt\/a\/bin\/python from setting/);
  await settle();
  const terminal = stub.terminals[0];
  assert.ok(terminal, "the install runs for the first choice");
  assert.match(terminal.sent[0]!, /venv\/bin\/python.* -m pip install ddp-lsp/);
});

test("without the Python extension, ddp-lsp.interpreter; changing it restarts the server", async () => {
  stub.settings.set("interpreter", "/opt/a/bin/python");
  const h = await start({ python: false });
  assert.equal(h.clients[0]!.spec.command, "/opt/a/bin/python");
  await stub.changeSettings({ interpreter: "/opt/b/bin/python" });
  await settle();
  assert.equal(h.clients.length, 2);
  assert.equal(h.clients[0]!.stopped, 1);
  assert.equal(h.clients[1]!.spec.command, "/opt/b/bin/python");
});

test("selecting another environment in the Python extension restarts; the same one does not", async () => {
  const h = await start();
  await h.envChanged.fire({});
  await settle();
  assert.equal(h.clients.length, 1, "no restart when the interpreter did not change");
  h.setActiveEnv("/other/bin/python");
  await h.envChanged.fire({});
  await settle();
  assert.equal(h.clients.length, 2);
  assert.equal(h.clients[1]!.spec.command, "/other/bin/python");
});

test("without the Python extension and without the setting, python3", async () => {
  const h = await start({ python: false });
  assert.equal(h.clients[0]!.spec.command, process.platform === "win32" ? "python" : "python3");
});

test("an analysis setting change is sent live, mapped, without a restart", async () => {
  const h = await start();
  await stub.changeSettings({ ignore: ["DDP5"], "preflight.python": "/train/bin/python" });
  await settle();
  assert.equal(h.clients.length, 1);
  const sent = h.clients[0]!.notifications;
  assert.equal(sent.length, 1);
  assert.equal(sent[0]!.method, "workspace/didChangeConfiguration");
  const settings = (sent[0]!.params as { settings: Record<string, Record<string, unknown>> }).settings["ddp-lsp"]!;
  assert.deepEqual(settings.ignore, ["DDP5"]);
  assert.deepEqual(settings.preflight, { python: "/train/bin/python" });
  assert.equal("interpreter" in settings, false);
});

test("settings unrelated to ddp-lsp are ignored", async () => {
  const h = await start();
  await stub.configurationChanged.fire({ affectsConfiguration: (s: string) => s === "editor.fontSize" });
  await settle();
  assert.equal(h.clients.length, 1);
  assert.equal(h.clients[0]!.notifications.length, 0);
});

test("DDP: Fix all runs the server's ddp-lsp.fixAll on the active document", async () => {
  const h = await start({ configure: (c) => c.answers.set("ddp-lsp.fixAll", { applied: true, fixes: 2 }) });
  window.activeTextEditor = editor();
  const result = await stub.commands.get(CLIENT_COMMANDS.fixAll)!();
  assert.deepEqual(result, { applied: true, fixes: 2 });
  assert.deepEqual(h.clients[0]!.requests, [
    {
      method: "workspace/executeCommand",
      params: { command: "ddp-lsp.fixAll", arguments: [Uri.file("/work/project/train.py").toString()] },
    },
  ]);
  assert.match(stub.messages.at(-1)!.text, /applied 2 fixes/);
});

test("DDP: Show rank paths asks the server for the cursor's line and peeks the locations", async () => {
  const uri = Uri.file("/work/project/train.py").toString();
  const guard = { uri, range: { start: { line: 12, character: 7 }, end: { line: 12, character: 16 } } };
  const h = await start({ configure: (c) => c.answers.set("ddp-lsp.showRankPaths", [guard, { uri: 3 }]) });
  window.activeTextEditor = editor("/work/project/train.py", "python", 14, 4);
  const shown = await stub.commands.get(CLIENT_COMMANDS.peekRankPaths)!();
  assert.equal(shown, 1, "the malformed location is dropped");
  assert.deepEqual(h.clients[0]!.requests, [
    {
      method: "workspace/executeCommand",
      params: { command: "ddp-lsp.showRankPaths", arguments: [uri, { line: 14, character: 4 }] },
    },
  ]);
  const peek = stub.executed.find((e) => e.id === "editor.action.peekLocations");
  assert.ok(peek, "the locations are shown in a peek view");
  const [docUri, at, locations, mode] = peek.args as [Uri, Position, Location[], string];
  assert.equal(docUri.toString(), uri);
  assert.deepEqual(at, new Position(14, 4));
  assert.equal(mode, "peek");
  assert.equal(locations.length, 1);
  assert.equal(locations[0]!.uri.toString(), uri);
  assert.deepEqual(locations[0]!.range.start, new Position(12, 7));
});

test("DDP: Show rank paths on a line every rank runs says so; a refusal is an error message", async () => {
  const h = await start({ configure: (c) => c.answers.set("ddp-lsp.showRankPaths", []) });
  window.activeTextEditor = editor();
  assert.equal(await stub.commands.get(CLIENT_COMMANDS.peekRankPaths)!(), 0);
  assert.match(stub.messages.at(-1)!.text, /every rank runs this line/);
  assert.equal(stub.executed.some((e) => e.id === "editor.action.peekLocations"), false);
  h.clients[0]!.answers.set("ddp-lsp.showRankPaths", new Error("not an open document"));
  assert.equal(await stub.commands.get(CLIENT_COMMANDS.peekRankPaths)!(), undefined);
  assert.equal(stub.messages.at(-1)!.level, "error");
  assert.match(stub.messages.at(-1)!.text, /not an open document/);
});

test("DDP: Fix all shows why found fixes were not applied", async () => {
  const message = "the client did not answer workspace/applyEdit within 30 s: the fixes may not have been applied";
  await start({ configure: (c) => c.answers.set("ddp-lsp.fixAll", { applied: false, fixes: 3, message }) });
  window.activeTextEditor = editor();
  const result = await stub.commands.get(CLIENT_COMMANDS.fixAll)!();
  assert.deepEqual(result, { applied: false, fixes: 3 });
  const last = stub.messages.at(-1)!;
  assert.equal(last.level, "warning");
  assert.match(last.text, /fix all: the client did not answer/);
});

test("DDP: Fix all reports a server refusal as a message", async () => {
  await start({ configure: (c) => c.answers.set("ddp-lsp.fixAll", new Error("not an open document")) });
  window.activeTextEditor = editor();
  assert.equal(await stub.commands.get(CLIENT_COMMANDS.fixAll)!(), undefined);
  assert.match(stub.messages.at(-1)!.text, /fix all failed: not an open document/);
});

test("DDP: Fix all without a Python editor asks for one and sends nothing", async () => {
  const h = await start();
  window.activeTextEditor = editor("/work/project/README.md", "markdown");
  await stub.commands.get(CLIENT_COMMANDS.fixAll)!();
  assert.equal(h.clients[0]!.requests.length, 0);
  assert.match(stub.messages.at(-1)!.text, /open a Python file/);
});

test("DDP: Run preflight records the verdict in the status bar and offers the report", async () => {
  // The answer's shape is the server's (ddp_lsp/lsp/preflight.py).
  const markdown = "### DDP preflight: ✗0 ⚠1 ✓7 –1\n- ⚠️ **shm.capacity**: /dev/shm 64 MiB free\n";
  const answer = { ok: true, error: null, folder: "/work/project", summary: "✗0 ⚠1 ✓7 –1", markdown };
  stub.answers.set("Preflight warn", "Show report");
  const h = await start({
    configure: (c) => {
      c.commands.push("ddp-lsp.runPreflight");
      c.answers.set("ddp-lsp.runPreflight", answer);
    },
  });
  window.activeTextEditor = editor();
  const summary = await stub.commands.get(CLIENT_COMMANDS.runPreflight)!();
  assert.deepEqual(summary, { verdict: "warn", passed: 7, warned: 1, failed: 0, skipped: 1, host: undefined, markdown });
  const req = h.clients[0]!.requests[0]!;
  assert.deepEqual(req.params, { command: "ddp-lsp.runPreflight", arguments: [Uri.file("/work/project/train.py").toString()] });
  assert.equal(status(), "$(check) DDP $(warning) preflight");
  const shown = stub.messages.at(-1)!;
  assert.equal(shown.level, "warning");
  assert.deepEqual(shown.actions, ["Show report", "Show output"]);
  assert.ok(stub.outputs[0]!.lines.some((l) => l.includes("shm.capacity")));
  await settle();
  assert.equal(stub.documents[0]?.content, markdown);
  assert.ok(stub.executed.some((e) => e.id === "markdown.showPreview"));
});

test("a preflight run from the code lens also updates the status bar", async () => {
  const h = await start();
  h.controller.recordPreflight({ ok: true, error: null, summary: "✗1 ⚠0 ✓9 –0", markdown: "# report" });
  assert.equal(status(), "$(check) DDP $(error) preflight");
  assert.equal(h.controller.lastPreflight?.failed, 1);
  assert.equal(stub.messages.at(-1)!.level, "error");
});

test("a failed preflight run (ok: false) is an error verdict with the server's reason", async () => {
  await start({
    configure: (c) => {
      c.commands.push("ddp-lsp.runPreflight");
      c.answers.set("ddp-lsp.runPreflight", { ok: false, error: "no module named torch" });
    },
  });
  const summary = (await stub.commands.get(CLIENT_COMMANDS.runPreflight)!()) as { verdict: string; error: string };
  assert.equal(summary.verdict, "error");
  assert.equal(summary.error, "no module named torch");
  assert.match(stub.messages.at(-1)!.text, /could not run: no module named torch/);
});

test("a preflight that errors on the server shows an error verdict, not a crash", async () => {
  const h = await start({
    configure: (c) => {
      c.commands.push("ddp-lsp.runPreflight");
      c.answers.set("ddp-lsp.runPreflight", new Error("torch is not installed in /usr/bin/python3"));
    },
  });
  const summary = await stub.commands.get(CLIENT_COMMANDS.runPreflight)!();
  assert.equal((summary as { verdict: string }).verdict, "error");
  assert.equal(h.clients[0]!.requests.length, 1);
  assert.equal(status(), "$(check) DDP $(question) preflight");
  assert.equal(stub.messages.at(-1)!.level, "error");
});

test("DDP: Run preflight on a server without the command says so and sends nothing", async () => {
  const h = await start();
  const summary = await stub.commands.get(CLIENT_COMMANDS.runPreflight)!();
  assert.equal(summary, undefined);
  assert.equal(h.clients[0]!.requests.length, 0);
  assert.match(stub.messages.at(-1)!.text, /no preflight command/);
});

test("untrusted workspace: diagnostics server runs, preflight is refused, its interpreter not sent", async () => {
  workspace.isTrusted = false;
  stub.settings.set("preflight.python", "/evil/python");
  const h = await start({ configure: (c) => c.commands.push("ddp-lsp.runPreflight") });
  assert.equal(h.controller.serverState, "running");
  assert.deepEqual(h.clients[0]!.spec.initializationOptions.preflight, { python: null });
  await stub.commands.get(CLIENT_COMMANDS.runPreflight)!();
  assert.equal(h.clients[0]!.requests.length, 0);
  assert.match(stub.messages.at(-1)!.text, /untrusted/);
  // Granting trust restarts the server so that it gets the preflight interpreter.
  workspace.isTrusted = true;
  await stub.trustGranted.fire();
  await settle();
  assert.equal(h.clients.length, 2);
  assert.deepEqual(h.clients[1]!.spec.initializationOptions.preflight, { python: "/evil/python" });
});

test("untrusted workspace: an interpreter inside it is not run; trusting it brings it back", async () => {
  workspace.isTrusted = false;
  let env = "/work/project/.venv/bin/python";
  const h = await start();
  // start() uses /venv/bin/python by default; point the environment into the workspace.
  h.setActiveEnv(env);
  await stub.commands.get(CLIENT_COMMANDS.restart)!();
  const last = h.clients.at(-1)!;
  assert.equal(last.spec.command, process.platform === "win32" ? "python" : "python3");
  assert.ok(stub.outputs[0]!.lines.some((l) => l.includes("inside the untrusted workspace")));
  workspace.isTrusted = true;
  await stub.trustGranted.fire();
  await settle();
  assert.equal(h.clients.at(-1)!.spec.command, env);
  env = "";
});

test("ddp-lsp missing: one notification with the three actions, no client, no repeat", async () => {
  const h = await start({ probe: { kind: "no-ddp-lsp", detail: "No module named 'ddp_lsp'" } });
  assert.equal(h.clients.length, 0);
  assert.equal(h.controller.serverState, "missing");
  const errors = stub.messages.filter((m) => m.level === "error");
  assert.equal(errors.length, 1);
  assert.match(errors[0]!.text, /not installed in \/venv\/bin\/python/);
  assert.deepEqual(errors[0]!.actions, ["Select interpreter", "Install ddp-lsp", "Show output"]);
  assert.equal(status(), "$(warning) DDP");
  // A settings change retries, but does not raise the same notification again.
  await stub.changeSettings({ select: ["DDP2"] });
  await settle();
  assert.equal(h.probes.length, 2);
  assert.equal(stub.messages.filter((m) => m.level === "error").length, 1);
});

test("Install ddp-lsp runs pip with that interpreter in a terminal, then retries", async () => {
  stub.answers.set("not installed", "Install ddp-lsp");
  const h = await start({ probe: { kind: "no-ddp-lsp", detail: "" } });
  await settle();
  const terminal = stub.terminals[0];
  assert.ok(terminal, "a terminal was opened");
  assert.deepEqual(terminal.sent, [
    process.platform === "win32" ? '& "/venv/bin/python" -m pip install ddp-lsp' : "'/venv/bin/python' -m pip install ddp-lsp",
  ]);
  h.setProbe({ kind: "ok", version: "0.1.0" });
  await stub.terminalClosed.fire(terminal);
  await settle();
  assert.equal(h.clients.length, 1);
  assert.equal(h.controller.serverState, "running");
});

test("no Python at all: Select interpreter opens the Python extension's picker, no install offer", async () => {
  stub.answers.set("no Python interpreter", "Select interpreter");
  await start({ probe: { kind: "no-python", detail: "ENOENT" } });
  await settle();
  const error = stub.messages.find((m) => m.level === "error")!;
  assert.deepEqual(error.actions, ["Select interpreter", "Show output"]);
  assert.ok(stub.executed.some((e) => e.id === "python.setInterpreter"));
});

test("Select interpreter without the Python extension opens the ddp-lsp.interpreter setting", async () => {
  stub.answers.set("no Python interpreter", "Select interpreter");
  await start({ python: false, probe: { kind: "no-python", detail: "ENOENT" } });
  await settle();
  assert.ok(stub.executed.some((e) => e.id === "workbench.action.openSettings" && e.args[0] === "ddp-lsp.interpreter"));
});

test("a server that fails to start leaves an error state and an output action", async () => {
  stub.answers.set("failed to start", "Show output");
  const h = await start({ configure: (c) => (c.failStart = new Error("Server initialization failed")) });
  await settle();
  assert.equal(h.controller.serverState, "error");
  assert.equal(status(), "$(error) DDP");
  assert.ok(stub.outputs[0]!.shown > 0);
});

test("DDP: Restart server stops the old client before starting a new one", async () => {
  const h = await start();
  await stub.commands.get(CLIENT_COMMANDS.restart)!();
  assert.equal(h.clients.length, 2);
  assert.equal(h.clients[0]!.stopped, 1);
  assert.equal(h.clients[1]!.started, 1);
  await stub.commands.get(CLIENT_COMMANDS.showOutput)!();
  assert.equal(stub.outputs[0]!.shown, 1);
});

test("ddp-lsp.enable = false shows the server as disabled", async () => {
  stub.settings.set("enable", false);
  await start();
  assert.equal(status(), "$(circle-slash) DDP");
});
