/**
 * What the client sends the server as its `ddp-lsp` settings section.
 *
 * VS Code hands us the whole contributed section, including client-only keys (`interpreter`,
 * `trace.server`). The server ignores those, but sending only what it reads keeps the wire
 * honest and lets the tests compare this mapping with the server's own config code. The one
 * thing we must change rather than copy: in an untrusted workspace the preflight interpreter is
 * dropped, because the preflight runs that interpreter and a workspace could point it anywhere.
 */

/** The server's editor settings (ddp_lsp/lsp/config.py), keys as VS Code spells them. */
export interface ServerSettings {
  enable: boolean;
  select: string[];
  ignore: string[];
  severity: Record<string, string>;
  rankGuardNames: string[];
  assumeDistributed: boolean;
  exclude: string[];
  project: boolean;
  preflight: { python: string | null };
  rankView: { hints: string; semanticTokens: boolean };
}

/** The subset of `vscode.WorkspaceConfiguration` we read; the tests pass a plain object. */
export interface ConfigReader {
  get<T>(section: string): T | undefined;
}

export const SECTION = "ddp-lsp";

/**
 * Keys that the server reads and that a user can set: the drift test checks this list against
 * the server's config code and package.json's `contributes.configuration`.
 */
export const SERVER_KEYS = [
  "enable",
  "select",
  "ignore",
  "severity",
  "rankGuardNames",
  "assumeDistributed",
  "exclude",
  "project",
  "preflight.python",
  "rankView.hints",
  "rankView.semanticTokens",
] as const;

/** Keys that only the client reads; the server accepts and ignores them. */
export const CLIENT_KEYS = ["interpreter", "trace.server"] as const;

function stringList(value: unknown, fallback: string[]): string[] {
  if (typeof value === "string") {
    return [value];
  }
  // An invalid value is passed through untouched: the server validates every key and names the
  // bad one in a message, which is clearer than the client silently "fixing" it.
  return Array.isArray(value) ? (value as string[]) : fallback;
}

export function serverSettings(config: ConfigReader, trusted: boolean): ServerSettings {
  const python = config.get<string>("preflight.python");
  const severity = config.get<Record<string, string>>("severity");
  return {
    enable: config.get<boolean>("enable") ?? true,
    select: stringList(config.get("select"), ["DDP"]),
    ignore: stringList(config.get("ignore"), []),
    severity: severity !== null && typeof severity === "object" ? { ...severity } : {},
    rankGuardNames: stringList(config.get("rankGuardNames"), []),
    assumeDistributed: config.get<boolean>("assumeDistributed") ?? false,
    exclude: stringList(config.get("exclude"), []),
    project: config.get<boolean>("project") ?? true,
    preflight: { python: trusted && python ? python : null },
    rankView: {
      hints: config.get<string>("rankView.hints") ?? "all",
      semanticTokens: config.get<boolean>("rankView.semanticTokens") ?? false,
    },
  };
}

/**
 * Rewrites one `workspace/configuration` answer for the `ddp-lsp` section.
 *
 * The language client answers the server's configuration requests from VS Code's raw settings;
 * this passes them through the same mapping so the server sees one shape whichever way the
 * settings arrive (initializationOptions, didChangeConfiguration or a pull).
 */
export function sanitizeSection(raw: unknown, trusted: boolean): unknown {
  if (raw === null || typeof raw !== "object") {
    return raw;
  }
  const flat = new Map<string, unknown>();
  const walk = (obj: Record<string, unknown>, prefix: string): void => {
    for (const [key, value] of Object.entries(obj)) {
      const name = prefix ? `${prefix}.${key}` : key;
      if (value !== null && typeof value === "object" && !Array.isArray(value) && name !== "severity") {
        walk(value as Record<string, unknown>, name);
      } else {
        flat.set(name, value);
      }
    }
  };
  walk(raw as Record<string, unknown>, "");
  return serverSettings({ get: <T>(key: string) => flat.get(key) as T | undefined }, trusted);
}
