/**
 * The rank view's command on the client side: `DDP: Show rank paths` asks the server's
 * `ddp-lsp.showRankPaths` for the places that make the cursor's line rank-dependent (the rank
 * conditions and early exits that decide which ranks reach it) and shows them in a peek view.
 *
 * The inlay hints and semantic tokens need no code here: the language client asks for them
 * because the server advertises them.
 */

import * as vscode from "vscode";

/** An LSP `Location` as it arrives in a `workspace/executeCommand` result (plain JSON). */
export interface WireLocation {
  uri: string;
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
}

function isPosition(v: unknown): v is { line: number; character: number } {
  const p = v as { line?: unknown; character?: unknown } | null;
  return p !== null && typeof p === "object" && typeof p.line === "number" && typeof p.character === "number";
}

/** The well-formed locations of a server answer; anything else is dropped, not thrown. */
export function wireLocations(value: unknown): WireLocation[] {
  if (!Array.isArray(value)) {
    return [];
  }
  return value.filter((v): v is WireLocation => {
    const loc = v as { uri?: unknown; range?: { start?: unknown; end?: unknown } } | null;
    return (
      loc !== null &&
      typeof loc === "object" &&
      typeof loc.uri === "string" &&
      typeof loc.range === "object" &&
      loc.range !== null &&
      isPosition(loc.range.start) &&
      isPosition(loc.range.end)
    );
  });
}

export function toLocations(value: unknown): vscode.Location[] {
  return wireLocations(value).map(
    (l) =>
      new vscode.Location(
        vscode.Uri.parse(l.uri),
        new vscode.Range(
          new vscode.Position(l.range.start.line, l.range.start.character),
          new vscode.Position(l.range.end.line, l.range.end.character),
        ),
      ),
  );
}
