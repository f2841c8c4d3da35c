import assert from "node:assert/strict";
import { test } from "node:test";
import { classifyProbe, runProbe } from "../../src/probe";
import { statusView, summarizePreflight } from "../../src/status";

test("probe outcomes are told apart", () => {
  assert.deepEqual(classifyProbe({ exitCode: 0, stdout: "0.1.0\n", stderr: "" }), { kind: "ok", version: "0.1.0" });
  assert.equal(classifyProbe({ spawnError: "ENOENT", exitCode: null, stdout: "", stderr: "" }).kind, "no-python");
  assert.equal(classifyProbe({ exitCode: 3, stdout: "DDP_LSP_MISSING\n", stderr: "" }).kind, "no-ddp-lsp");
  // ddp-lsp present but its import fails (a missing pygls): broken, not missing.
  const broken = classifyProbe({ exitCode: 1, stdout: "", stderr: "Traceback...\nModuleNotFoundError: No module named 'pygls'\n" });
  assert.deepEqual(broken, { kind: "broken", detail: "ModuleNotFoundError: No module named 'pygls'" });
  assert.equal(classifyProbe({ exitCode: null, stdout: "", stderr: "", timedOut: true }).kind, "broken");
  assert.equal(classifyProbe({ exitCode: 127, stdout: "", stderr: "pyenv: python3: command not found" }).kind, "no-python");
});

test("a real spawn of a missing interpreter reports no-python", async () => {
  const raw = await runProbe("/nonexistent/ddp-lsp-test/python3");
  assert.equal(classifyProbe(raw).kind, "no-python");
});

test("a preflight report's summary gives the verdict", () => {
  const report = (summary: Record<string, number>, extra: Record<string, unknown> = {}) => ({
    schema: "ddp-lsp-preflight/1",
    host: "gpu-01",
    summary,
    probes: [],
    error: null,
    ...extra,
  });
  assert.equal(summarizePreflight(report({ pass: 5, warn: 0, fail: 0, skip: 2 })).verdict, "pass");
  assert.equal(summarizePreflight(report({ pass: 5, warn: 1, fail: 0, skip: 0 })).verdict, "warn");
  const failed = summarizePreflight(report({ pass: 5, warn: 1, fail: 2, skip: 0 }));
  assert.deepEqual(failed, { verdict: "fail", passed: 5, warned: 1, failed: 2, skipped: 0, host: "gpu-01", markdown: undefined });
  assert.equal(summarizePreflight({ report: report({ pass: 1 }) }).verdict, "pass");
  const errored = summarizePreflight(report({}, { error: "torch is not installed" }));
  assert.equal(errored.verdict, "error");
  assert.equal(errored.error, "torch is not installed");
  assert.equal(summarizePreflight(null).verdict, "error");
  // The server's answer: a one-line summary in either spelling, and ok: false on failure.
  const line = (summary: string) => summarizePreflight({ ok: true, error: null, summary, markdown: "# r" });
  assert.deepEqual(line("✗2 ⚠1 ✓10 –4"), { verdict: "fail", passed: 10, warned: 1, failed: 2, skipped: 4, host: undefined, markdown: "# r" });
  assert.equal(line("0 fail, 3 warn, 1 pass, 0 skip").verdict, "warn");
  assert.equal(line("✗0 ⚠0 ✓10 –4").verdict, "pass");
  assert.equal(line("all good").verdict, "error");
  assert.equal(summarizePreflight({ ok: false, error: null }).verdict, "error");
  assert.equal(summarizePreflight({ something: 1 }).verdict, "error");
});

test("the status bar shows the server state and the last verdict", () => {
  const running = statusView("running", undefined);
  assert.equal(running.text, "$(check) DDP");
  assert.match(running.tooltip, /not run yet/);
  assert.equal(running.background, undefined);
  const failed = statusView("running", { verdict: "fail", passed: 1, warned: 0, failed: 1, skipped: 0, host: "h" });
  assert.equal(failed.text, "$(check) DDP $(error) preflight");
  assert.match(failed.tooltip, /Preflight fail on h: 1 passed, 0 warnings, 1 failed/);
  assert.equal(failed.background, "statusBarItem.errorBackground");
  assert.equal(statusView("missing", undefined, "/usr/bin/python3").background, "statusBarItem.errorBackground");
  assert.match(statusView("missing", undefined, "/usr/bin/python3").tooltip, /not installed.*\/usr\/bin\/python3/);
  assert.equal(statusView("starting", undefined).text, "$(sync~spin) DDP");
});
