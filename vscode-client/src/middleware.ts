/**
 * The language client middleware's decisions, as plain functions (extension.ts wires them in).
 *
 * Restricted Mode is enforced here because code lenses and code actions run server commands
 * through the language client, not through our palette commands.
 */

import { SERVER_COMMANDS } from "./commands";
import { SECTION, sanitizeSection } from "./settings";

export interface GuardDeps {
  trusted(): boolean;
  warn(message: string): void;
  /** Receives every `ddp-lsp.runPreflight` answer, for the status bar. */
  record(result: unknown): void;
}

export const UNTRUSTED_PREFLIGHT = "ddp-lsp: the preflight is off in untrusted workspaces.";

export async function guardCommand(
  command: string,
  args: unknown[],
  next: (command: string, args: unknown[]) => unknown,
  deps: GuardDeps,
): Promise<unknown> {
  if (command !== SERVER_COMMANDS.runPreflight) {
    return next(command, args);
  }
  if (!deps.trusted()) {
    deps.warn(UNTRUSTED_PREFLIGHT);
    return undefined;
  }
  const result: unknown = await next(command, args);
  deps.record(result);
  return result;
}

/** Drops the "Run preflight" lens in an untrusted workspace; keeps every other lens. */
export function filterLenses<T extends { command?: { command: string } | undefined }>(
  lenses: T[] | null | undefined,
  trusted: boolean,
): T[] | null | undefined {
  if (trusted || !lenses) {
    return lenses;
  }
  return lenses.filter((lens) => lens.command?.command !== SERVER_COMMANDS.runPreflight);
}

/** Maps the answers to a `workspace/configuration` request: our section through the mapping. */
export function mapConfiguration(
  items: ReadonlyArray<{ section?: string | undefined }>,
  result: unknown,
  trusted: boolean,
): unknown {
  if (!Array.isArray(result)) {
    return result;
  }
  return result.map((value: unknown, i: number) =>
    items[i]?.section === SECTION ? sanitizeSection(value, trusted) : value,
  );
}
