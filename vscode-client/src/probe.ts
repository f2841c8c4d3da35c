/**
 * Before starting the server: can this interpreter run at all, and does it have ddp-lsp?
 *
 * Without this check a missing package shows up as the language client's "Server initialization
 * failed" plus a Python traceback in the output; with it, the user gets one notification that
 * says which interpreter lacks what, with the actions that fix it.
 */

import { spawn } from "node:child_process";

export type ProbeOutcome =
  | { kind: "ok"; version: string }
  | { kind: "no-python"; detail: string }
  | { kind: "no-ddp-lsp"; detail: string }
  | { kind: "broken"; detail: string };

export interface RawProbe {
  /** `error.code` from spawn (ENOENT, EACCES) when the process could not start. */
  spawnError?: string | undefined;
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut?: boolean;
}

// Prints the version, or exits 3 with a marker when the package is not importable, so that a
// broken ddp-lsp (its own ImportError inside) is not mistaken for a missing one.
export const PROBE_SCRIPT = [
  "import importlib.util, sys",
  "if importlib.util.find_spec('ddp_lsp') is None:",
  "    print('DDP_LSP_MISSING'); sys.exit(3)",
  "import ddp_lsp.lsp.server, ddp_lsp",
  "print(ddp_lsp.__version__)",
].join("\n");

export function classifyProbe(raw: RawProbe): ProbeOutcome {
  if (raw.spawnError === "ENOENT" || raw.spawnError === "EACCES" || raw.spawnError === "ENOTDIR") {
    return { kind: "no-python", detail: raw.spawnError };
  }
  if (raw.spawnError) {
    return { kind: "broken", detail: raw.spawnError };
  }
  if (raw.timedOut) {
    return { kind: "broken", detail: "the interpreter did not answer within the time limit" };
  }
  if (raw.exitCode === 3 && raw.stdout.includes("DDP_LSP_MISSING")) {
    return { kind: "no-ddp-lsp", detail: "No module named 'ddp_lsp'" };
  }
  if (raw.exitCode === 0) {
    return { kind: "ok", version: raw.stdout.trim().split(/\r?\n/).pop() ?? "" };
  }
  const lastLine = raw.stderr.trim().split(/\r?\n/).pop() ?? "";
  // A `python3` that is a shim without a real interpreter behind it (pyenv, the Windows store
  // alias) exits non-zero before running anything: treat it as "no Python".
  if (/not found|No such file|was not found|command not found/i.test(raw.stderr) && !raw.stdout) {
    return { kind: "no-python", detail: lastLine };
  }
  return { kind: "broken", detail: lastLine || `exit code ${String(raw.exitCode)}` };
}

/**
 * `-I`, isolated mode, for every Python we start: no current directory or script directory on
 * sys.path, no PYTHONPATH/PYTHONSTARTUP, no user site-packages. A workspace file named like a
 * module (`struct.py`, a `ddp_lsp/` folder) is never imported in place of ours. The probe uses
 * it too, so "found" means what the server will find.
 */
export const ISOLATED = ["-I"];

/** Environment for every Python we start: no current directory on sys.path (3.11+). */
export function pythonEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...base, PYTHONSAFEPATH: "1", PYTHONUNBUFFERED: "1" };
}

/**
 * `cwd` should be a directory the workspace does not control: `python -c` and `python -m` put
 * the current directory first on sys.path (before 3.11's PYTHONSAFEPATH), so a `ddp_lsp/` or
 * `pygls.py` in the workspace would otherwise be imported in place of the real one.
 */
export function runProbe(python: string, cwd?: string, timeoutMs = 20_000): Promise<RawProbe> {
  return new Promise((resolve) => {
    let stdout = "";
    let stderr = "";
    let settled = false;
    const done = (raw: RawProbe): void => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(raw);
      }
    };
    const child = spawn(python, [...ISOLATED, "-c", PROBE_SCRIPT], {
      cwd,
      env: pythonEnv(),
      stdio: ["ignore", "pipe", "pipe"],
      windowsHide: true,
    });
    const timer = setTimeout(() => {
      child.kill();
      done({ exitCode: null, stdout, stderr, timedOut: true });
    }, timeoutMs);
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
    child.on("error", (err: NodeJS.ErrnoException) => done({ spawnError: err.code ?? err.message, exitCode: null, stdout, stderr }));
    child.on("close", (code) => done({ exitCode: code, stdout, stderr }));
  });
}
