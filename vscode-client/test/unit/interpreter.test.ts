import assert from "node:assert/strict";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import {
  DEFAULT_PYTHON,
  expandPath,
  installCommand,
  interpreterCandidates,
  isInside,
  resolveInterpreter,
  type PythonExtensionApi,
} from "../../src/interpreter";

function pythonApi(active: { id: string; path: string }, executable?: string, fail = false): PythonExtensionApi {
  return {
    environments: {
      getActiveEnvironmentPath: () => {
        if (fail) {
          throw new Error("not ready");
        }
        return active;
      },
      resolveEnvironment: async () => (executable === undefined ? undefined : { executable: { uri: { fsPath: executable } } }),
      onDidChangeActiveEnvironmentPath: () => ({ dispose: () => undefined }),
    },
  };
}

test("the Python extension's interpreter comes first, even with ddp-lsp.interpreter set", async () => {
  const got = await resolveInterpreter({ setting: "/opt/py/bin/python", python: pythonApi({ id: "a", path: "/venv/bin/python" }) });
  assert.deepEqual(got, { command: "/venv/bin/python", source: "python-extension" });
});

test("without the Python extension, or when it cannot name one, the ddp-lsp.interpreter setting", async () => {
  assert.deepEqual(await resolveInterpreter({ setting: "/opt/py/bin/python", python: undefined }), {
    command: "/opt/py/bin/python",
    source: "setting",
  });
  const got = await resolveInterpreter({
    setting: "/opt/py/bin/python",
    python: pythonApi({ id: "x", path: "" }, undefined, true),
  });
  assert.deepEqual(got, { command: "/opt/py/bin/python", source: "setting" });
});

test("the Python extension's active environment is resolved to its executable", async () => {
  // A conda environment's path is its folder; resolveEnvironment names the interpreter inside.
  const got = await resolveInterpreter({
    setting: "",
    python: pythonApi({ id: "conda", path: "/opt/conda/envs/train" }, "/opt/conda/envs/train/bin/python"),
  });
  assert.deepEqual(got, { command: "/opt/conda/envs/train/bin/python", source: "python-extension" });
});

test("an unresolvable environment falls back to its path", async () => {
  const got = await resolveInterpreter({ setting: undefined, python: pythonApi({ id: "v", path: "/venv/bin/python" }) });
  assert.deepEqual(got, { command: "/venv/bin/python", source: "python-extension" });
});

test("without the Python extension, or when it throws, python3", async () => {
  assert.deepEqual(await resolveInterpreter({ setting: "", python: undefined }), { command: DEFAULT_PYTHON, source: "default" });
  const logged: string[] = [];
  const got = await resolveInterpreter({
    setting: "",
    python: pythonApi({ id: "x", path: "" }, undefined, true),
    log: (l) => logged.push(l),
  });
  assert.deepEqual(got, { command: DEFAULT_PYTHON, source: "default" });
  assert.match(logged.join("\n"), /not ready/);
});

test("configured paths expand workspace, home and environment variables", () => {
  assert.equal(expandPath("${workspaceFolder}/.venv/bin/python", "/w"), "/w/.venv/bin/python");
  assert.equal(expandPath(".venv/bin/python", "/w"), path.join("/w", ".venv/bin/python"));
  assert.equal(expandPath("~/py/bin/python", undefined), path.join(os.homedir(), "py/bin/python"));
  assert.equal(expandPath("${env:PYHOME}/bin/python", undefined, { PYHOME: "/p" }), "/p/bin/python");
  // A bare command name stays a PATH lookup.
  assert.equal(expandPath("python3.12", "/w"), "python3.12");
});

test("the install command quotes the interpreter for the terminal's shell", () => {
  assert.equal(installCommand("/home/me/my env/bin/python", "linux"), "'/home/me/my env/bin/python' -m pip install ddp-lsp");
  assert.equal(installCommand("/it's/python", "darwin"), "'/it'\\''s/python' -m pip install ddp-lsp");
  assert.equal(installCommand("C:\\Py 3\\python.exe", "win32"), '& "C:\\Py 3\\python.exe" -m pip install ddp-lsp');
});

test("in an untrusted workspace, interpreters inside it are passed over", async () => {
  const logged: string[] = [];
  const got = await resolveInterpreter({
    setting: ".venv/bin/python", // relative: resolved into the workspace
    workspaceFolder: "/w",
    python: pythonApi({ id: "v", path: "/w/env/bin/python" }),
    untrustedRoots: ["/w"],
    log: (l) => logged.push(l),
  });
  assert.deepEqual(got, { command: DEFAULT_PYTHON, source: "default" });
  assert.equal(logged.length, 2);
  // The Python extension's interpreter inside the untrusted workspace is skipped: the setting
  // (outside it) is next.
  const next = await resolveInterpreter({
    setting: "/opt/py/bin/python",
    python: pythonApi({ id: "v", path: "/w/.venv/bin/python" }),
    untrustedRoots: ["/w"],
  });
  assert.deepEqual(next, { command: "/opt/py/bin/python", source: "setting" });
  // Outside the workspace is fine, and so is a trusted one.
  const outside = await resolveInterpreter({ setting: "/opt/py/bin/python", python: undefined, untrustedRoots: ["/w"] });
  assert.equal(outside.command, "/opt/py/bin/python");
  assert.equal(isInside("/w/../other/python", ["/w"]), false);
  assert.equal(isInside("/w/a/../b/python", ["/w"]), true);
  assert.equal(isInside("/workspace2/python", ["/w"]), false);
  assert.equal(isInside("python3", ["/w"]), false);
});

test("candidates: the Python extension's, then ddp-lsp.interpreter, without duplicates", async () => {
  const api = pythonApi({ id: "a", path: "/venv/bin/python" });
  assert.deepEqual(await interpreterCandidates({ setting: "/opt/py/bin/python", python: api }), [
    { command: "/venv/bin/python", source: "python-extension" },
    { command: "/opt/py/bin/python", source: "setting" },
  ]);
  assert.deepEqual(await interpreterCandidates({ setting: "/venv/bin/python", python: api }), [
    { command: "/venv/bin/python", source: "python-extension" },
  ]);
  // python3 on PATH only when nothing names an interpreter.
  assert.deepEqual(await interpreterCandidates({ setting: "", python: undefined }), [
    { command: DEFAULT_PYTHON, source: "default" },
  ]);
  // An untrusted workspace's own interpreter is skipped; the setting outside it remains.
  const inside = pythonApi({ id: "w", path: "/w/.venv/bin/python" });
  assert.deepEqual(
    await interpreterCandidates({ setting: "/opt/py/bin/python", python: inside, untrustedRoots: ["/w"] }),
    [{ command: "/opt/py/bin/python", source: "setting" }],
  );
});
