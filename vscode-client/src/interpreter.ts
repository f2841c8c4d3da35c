/**
 * Which Python runs `python -m ddp_lsp serve`.
 *
 * Order: the environment selected in the Python extension (where the user's torch and
 * usually ddp-lsp live, and what they switch when they switch projects), else the
 * `ddp-lsp.interpreter` setting, else `python3` on PATH. In an untrusted workspace an
 * interpreter inside the workspace is skipped at every step, so the next one is used.
 * `interpreterCandidates` lists every choice in that order: when the Python
 * extension's environment lacks ddp-lsp, the controller falls back to the setting before it
 * offers to install. The extension bundles no interpreter of its own. The Python extension's API is typed here by hand, only the
 * part we call, so the extension does not need `@vscode/python-extension` at runtime.
 */

import * as os from "node:os";
import * as path from "node:path";

/** `environments` from the `ms-python.python` extension's exported API (the part we use). */
export interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: unknown): { id: string; path: string };
  resolveEnvironment(
    env: { id: string; path: string } | string,
  ): Promise<{ executable: { uri?: { fsPath: string } | undefined } } | undefined>;
  onDidChangeActiveEnvironmentPath(listener: (e: unknown) => unknown): { dispose(): unknown };
}

export interface PythonExtensionApi {
  environments: PythonEnvironmentsApi;
}

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

export const DEFAULT_PYTHON = process.platform === "win32" ? "python" : "python3";

/** `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~` in a configured path. */
export function expandPath(
  value: string,
  workspaceFolder: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string {
  let out = value.trim();
  out = out.replace(/\$\{userHome\}/g, os.homedir());
  out = out.replace(/\$\{env:([^}]+)\}/g, (_m, name: string) => env[name] ?? "");
  if (workspaceFolder !== undefined) {
    out = out.replace(/\$\{workspaceFolder\}/g, workspaceFolder);
    // A relative path in a workspace setting means relative to the folder, like `.venv/bin/python`.
    if (out && !path.isAbsolute(out) && !out.startsWith("~") && out.includes(path.sep)) {
      out = path.join(workspaceFolder, out);
    }
  }
  if (out === "~" || out.startsWith("~/")) {
    out = path.join(os.homedir(), out.slice(1));
  }
  return out;
}

/** True when `file` lies inside one of `roots` (after resolving `..`). */
export function isInside(file: string, roots: readonly string[]): boolean {
  if (!path.isAbsolute(file)) {
    return false; // a bare name is looked up on PATH, outside the workspace
  }
  const resolved = path.resolve(file);
  return roots.some((root) => {
    const rel = path.relative(path.resolve(root), resolved);
    return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
  });
}

export interface ResolveOptions {
  setting: string | undefined;
  python: PythonExtensionApi | undefined;
  resource?: unknown;
  workspaceFolder?: string | undefined;
  /**
   * Folders of an untrusted workspace: an interpreter inside them (a `.venv` that came with the
   * repository) is a program the workspace controls, and starting the server would run it.
   */
  untrustedRoots?: readonly string[];
  log?: (line: string) => void;
}

/** The first choice (see the order above). */
export async function resolveInterpreter(options: ResolveOptions): Promise<Interpreter> {
  const [first] = await interpreterCandidates(options);
  return first ?? { command: DEFAULT_PYTHON, source: "default" };
}

/**
 * Every interpreter that may run the server, best first, without duplicates: the Python
 * extension's, then `ddp-lsp.interpreter`; `python3` on PATH only when neither names one.
 */
export async function interpreterCandidates(options: ResolveOptions): Promise<Interpreter[]> {
  const log = options.log ?? (() => undefined);
  const out: Interpreter[] = [];
  const untrusted = options.untrustedRoots ?? [];
  const allowed = (command: string, from: string): boolean => {
    if (isInside(command, untrusted)) {
      log(`Not using ${command} (${from}): it is inside the untrusted workspace.`);
      return false;
    }
    return true;
  };
  const api = options.python?.environments;
  if (api) {
    try {
      const active = api.getActiveEnvironmentPath(options.resource);
      // `path` is an executable for venvs but can be an environment folder (conda): resolving
      // gives the interpreter inside it.
      const resolved = await api.resolveEnvironment(active);
      const exe = resolved?.executable.uri?.fsPath ?? active.path;
      if (exe && allowed(exe, "the Python extension")) {
        out.push({ command: exe, source: "python-extension" });
      }
    } catch (err) {
      log(`The Python extension could not name an interpreter: ${String(err)}`);
    }
  }
  const configured = options.setting ? expandPath(options.setting, options.workspaceFolder) : "";
  if (configured && !out.some((c) => c.command === configured) && allowed(configured, "ddp-lsp.interpreter")) {
    out.push({ command: configured, source: "setting" });
  }
  if (out.length === 0) {
    out.push({ command: DEFAULT_PYTHON, source: "default" });
  }
  return out;
}

/** The shell line that installs ddp-lsp into `python`'s environment, quoted for the platform. */
export function installCommand(python: string, platform: NodeJS.Platform = process.platform): string {
  const quoted =
    platform === "win32"
      ? `& "${python.replace(/"/g, '""')}"` // PowerShell, VS Code's default Windows terminal
      : `'${python.replace(/'/g, `'\\''`)}'`;
  return `${quoted} -m pip install ddp-lsp`;
}
